"""Turn an LLM reply into a candidate source: fenced code blocks, SEARCH/REPLACE edits, verdicts.

`parse_reply` finds the program in a reply (the last fenced block that defines `ModelNew`, or
edits applied to the previous file) and checks that it parses as Python; `parse_review` reads
a reviewer's verdict. Every failure is a value with a one-sentence reason that can be fed back
to the model, never an exception. Nothing in a reply is executed or imported: `ast.parse` only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from warpforge import pysource

TRUNCATING_FINISH = ("length", "max_tokens")
"""finish_reason values that mean the model hit its token limit (OpenAI, Anthropic)."""

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n]*?)[ \t]*$")
_SEARCH = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH\b.*$")
_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_REPLACE = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE\b.*$")
_MODEL_NEW = re.compile(r"^[ \t]*(class[ \t]+ModelNew\b|ModelNew[ \t]*=)", re.MULTILINE)
_HEADING = re.compile(r"^[ \t]{0,3}(?:(?P<hashes>#{1,6})[ \t]+(?P<title>.+?)[ \t#]*|\*\*(?P<bold>[^*]+?)\*\*:?)[ \t]*$")
_ANALYSIS_TITLE = re.compile(r"^(?:\d+[.)][ \t]*)?(?:performance[ \t]+)?analysis\b", re.IGNORECASE)
_PLAN_TITLE = re.compile(r"^(?:\d+[.)][ \t]*)?(?:plan|algorithm[ \t]+design|design)\b", re.IGNORECASE)
_VERDICT = re.compile(r"^[\s>*_`#-]*verdict[\s*_`]*[:\-][\s*_`]*(plausible|suspicious)\b(?P<rest>.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedReply:
    source: str | None
    """The complete candidate file, or None."""
    analysis: str
    """The reply's "## Analysis" and "## Plan" text when present, else ""."""
    failure: str
    """"" on success; else one sentence saying why the reply holds no usable program."""
    edits_applied: int = 0


@dataclass(frozen=True)
class _Block:
    info: str
    text: str
    first: int
    """Line index of the opening fence."""
    last: int
    """Line index of the closing fence."""


@dataclass(frozen=True)
class _Edit:
    search: list[str]
    replace: list[str]


def parse_reply(text: str, *, previous: str | None = None, finish_reason: str = "stop",
                require_analysis: bool = False) -> ParsedReply:
    """The candidate file in `text` (see the module docstring); `previous` is the file that
    SEARCH/REPLACE edits apply to; `require_analysis` demands a "## Analysis" section."""
    lines = _normalise(text or "").split("\n")
    if not "".join(lines).strip():
        return ParsedReply(None, "", "the reply was empty")
    blocks, unclosed = _fenced_blocks(lines)
    edits, edit_problem, first_edit_line = _edit_blocks(lines, blocks)
    starts = [b.first for b in blocks if _is_program(b) or _has_edits(b)]
    starts += [line for line in (first_edit_line, unclosed) if line is not None]
    code_line = min(starts, default=None)
    analysis, has_analysis = _analysis(lines, blocks, code_line)

    def fail(reason: str) -> ParsedReply:
        return ParsedReply(None, analysis, reason)

    if finish_reason in TRUNCATING_FINISH:
        return fail(f"the reply was truncated at the token limit (finish_reason={finish_reason})")
    if unclosed is not None:
        return fail(f"the reply was truncated (the code fence opened on line {unclosed + 1} is never closed)")
    if edit_problem:
        return fail(edit_problem)
    if require_analysis and not has_analysis:
        return fail("the reply has no '## Analysis' section before its code, which this prompt requires")

    whole = [b for b in blocks if _is_program(b) and not _has_edits(b)]
    if edits:
        if previous is None:
            problem = "the reply holds SEARCH/REPLACE edits but there is no earlier file to apply them to"
        else:
            source, problem = _apply_edits(_normalise(previous), edits)
            if not problem:
                checked = _check_program(source)
                if checked:
                    return fail(f"after applying {len(edits)} SEARCH/REPLACE edit(s), {checked}")
                return ParsedReply(source, analysis, "", edits_applied=len(edits))
        if not whole:
            return fail(problem)
        # the reply also holds a complete file: use it rather than waste the attempt
    if blocks and not whole:
        return fail("no code block in the reply defines class ModelNew")
    program = whole[-1].text if whole else _unfenced_program(lines)
    if program is None:
        return fail("the reply has no code block (expected the complete file in a ```python block)")
    checked = _check_program(program)
    return fail(checked) if checked else ParsedReply(program, analysis, "")


def parse_review(text: str) -> tuple[str, str]:
    """("plausible" | "suspicious" | "unclear", finding) from a reviewer's reply, which should
    start with a line `VERDICT: plausible` or `VERDICT: suspicious`. Contradicting verdict lines,
    or none, give "unclear" with the whole reply as the finding."""
    body = _normalise(text or "").strip()
    lines = body.split("\n")
    found = [(i, m) for i, line in enumerate(lines) if (m := _VERDICT.match(line))]
    verdicts = {m.group(1).lower() for _, m in found}
    hedged = any(re.search(r"plausible.*suspicious|suspicious.*plausible", m.group(0), re.I) for _, m in found)
    if len(verdicts) != 1 or hedged:
        return "unclear", body or "the review was empty"
    first, match = found[0]
    rest = match["rest"].lstrip(" \t*_`.:-").rstrip(" \t*_`")
    finding = "\n".join(([rest] if rest else []) + lines[first + 1:]).strip()
    if not finding:
        finding = "\n".join(lines[:first]).strip()
    return verdicts.pop(), finding


# -- code blocks --------------------------------------------------------------------------------

def _normalise(text: str) -> str:
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _fenced_blocks(lines: list[str]) -> tuple[list[_Block], int | None]:
    """Fenced blocks (``` or ~~~, any info string) and the line of a fence never closed.

    As in CommonMark, a block closes at a line of only the same fence character, at least as
    many; an opening fence line inside a block is content. A stray fence opened at the very end
    (nothing but blank lines after it) is ignored rather than called a truncation."""
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i])
        if not opened or (opened["fence"][0] == "`" and "`" in opened["info"]):
            i += 1
            continue
        fence, indent = opened["fence"], len(opened["indent"])
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), None)
        if end is None:
            if any(line.strip() for line in lines[i + 1:]):
                return blocks, i
            break
        body = [_dedent(line, indent) for line in lines[i + 1:end]]
        blocks.append(_Block(opened["info"].strip().lower(), "\n".join(body) + "\n", i, end))
        i = end + 1
    return blocks, None


def _dedent(line: str, indent: int) -> str:
    """Remove the opening fence's indentation (a block nested in a list item) from a line."""
    strip = min(indent, len(line) - len(line.lstrip(" \t")))
    return line[strip:]


def _is_program(block: _Block) -> bool:
    return bool(_MODEL_NEW.search(block.text))


def _has_edits(block: _Block) -> bool:
    return any(_SEARCH.match(line) for line in block.text.split("\n"))


def _unfenced_program(lines: list[str]) -> str | None:
    """A reply that is a bare Python file (no fences): the whole text, or the text from its first
    import on, when that parses and defines ModelNew."""
    starts = [0] + [i for i, line in enumerate(lines) if re.match(r"(import|from)\s+\w", line)][:1]
    for start in starts:
        text = "\n".join(lines[start:]).strip("\n") + "\n"
        if _MODEL_NEW.search(text) and not isinstance(_parse(text), str):
            return text
    return None


def _check_program(source: str) -> str:
    """"" when `source` parses and defines ModelNew at module level; else why not."""
    tree = _parse(source)
    if isinstance(tree, str):
        return tree
    if not _defines_model_new(tree.body):
        return "the code does not define class ModelNew at module level"
    return ""


def _parse(source: str) -> ast.Module | str:
    """The module's tree, or why it is not valid Python."""
    try:
        return pysource.parse(source)
    except SyntaxError as exc:
        line = (exc.text or "").strip()
        where = f" on line {exc.lineno}" if exc.lineno else ""
        return f"the code is not valid Python: {exc.msg}{where}" + (f" ({line[:120]!r})" if line else "")
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return f"the code is not valid Python: {type(exc).__name__}"


def _defines_model_new(body: list[ast.stmt]) -> bool:
    for node in body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
            return True
        if isinstance(node, ast.If | ast.Try | ast.With):
            nested = list(node.body) + list(getattr(node, "orelse", [])) + list(getattr(node, "finalbody", []))
            nested += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]
            if _defines_model_new(nested):
                return True
    return False


# -- SEARCH/REPLACE edits -----------------------------------------------------------------------

def _edit_blocks(lines: list[str], blocks: list[_Block]) -> tuple[list[_Edit], str, int | None]:
    """The edit blocks in order, a problem ("" if none), and the line where the first begins.
    Fence lines between or around edits are ignored; a fence line inside one is content."""
    edits: list[_Edit] = []
    search: list[str] = []
    replace: list[str] = []
    state, first = "outside", None
    for i, line in enumerate(lines):
        if state == "outside":
            if _SEARCH.match(line):
                state, search, replace = "search", [], []
                first = i if first is None else first
        elif state == "search":
            if _DIVIDER.match(line):
                state = "replace"
            elif _REPLACE.match(line) or _SEARCH.match(line):
                return edits, f"SEARCH/REPLACE edit {len(edits) + 1} has no ======= line between its two parts", first
            else:
                search.append(line)
        elif _REPLACE.match(line):
            edits.append(_Edit(search, replace))
            state = "outside"
        else:
            replace.append(line)
    if state != "outside":
        return edits, f"the reply was truncated inside SEARCH/REPLACE edit {len(edits) + 1}", first
    return edits, "", first


def _apply_edits(source: str, edits: list[_Edit]) -> tuple[str, str]:
    """`source` with the edits applied in order; or ("", why the first failing edit failed)."""
    lines = source.split("\n")
    for n, edit in enumerate(edits, 1):
        search = _trim_blank(edit.search)
        if not search:
            return "", f"SEARCH/REPLACE edit {n} of {len(edits)} has an empty SEARCH part"
        applied = _replace_exact(lines, edit.search, edit.replace) or _replace_tolerant(lines, search, edit.replace)
        if applied is None:
            return "", (f"SEARCH/REPLACE edit {n} of {len(edits)} does not match the previous file "
                        f"(first unmatched line: {_first_unmatched(lines, search).strip()[:120]!r})")
        lines = applied
    return "\n".join(lines), ""


def _trim_blank(lines: list[str]) -> list[str]:
    start = next((i for i, ln in enumerate(lines) if ln.strip()), len(lines))
    end = len(lines) - next((i for i, ln in enumerate(reversed(lines)) if ln.strip()), len(lines))
    return lines[start:end]


def _replace_exact(lines: list[str], search: list[str], replace: list[str]) -> list[str] | None:
    n = len(search)
    for i in range(len(lines) - n + 1):
        if lines[i:i + n] == search:
            return lines[:i] + replace + lines[i + n:]
    return None


def _replace_tolerant(lines: list[str], search: list[str], replace: list[str]) -> list[str] | None:
    """Match ignoring leading and trailing whitespace and blank lines inside the SEARCH part;
    a uniform indentation offset between SEARCH and the file is carried over to REPLACE."""
    wanted = [ln.strip() for ln in search if ln.strip()]
    content = [i for i, ln in enumerate(lines) if ln.strip()]
    for k in range(len(content) - len(wanted) + 1):
        window = content[k:k + len(wanted)]
        if all(lines[j].strip() == w for j, w in zip(window, wanted)):
            first, last = window[0], window[-1]
            return lines[:first] + _reindent(replace, _indent(search[0]), _indent(lines[first])) + lines[last + 1:]
    return None


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _reindent(replace: list[str], was: str, now: str) -> list[str]:
    if was == now:
        return replace
    if now.startswith(was):
        extra = now[len(was):]
        return [extra + ln if ln.strip() else ln for ln in replace]
    if was.startswith(now):
        cut = was[len(now):]
        return [ln[len(cut):] if ln.startswith(cut) else ln for ln in replace]
    return replace


def _first_unmatched(lines: list[str], search: list[str]) -> str:
    """The SEARCH line at which the best partial match in the file breaks off."""
    wanted = [ln for ln in search if ln.strip()]
    have = [ln.strip() for ln in lines if ln.strip()]
    best = 0
    for start in range(len(have)):
        k = 0
        while k < len(wanted) and start + k < len(have) and have[start + k] == wanted[k].strip():
            k += 1
        best = max(best, k)
    return wanted[min(best, len(wanted) - 1)]


# -- analysis -----------------------------------------------------------------------------------

def _analysis(lines: list[str], blocks: list[_Block], code_line: int | None) -> tuple[str, bool]:
    """The text from the first Analysis/Plan heading up to the program (or the next other heading
    of the same or a higher level), and whether a non-empty Analysis section was among it."""
    inside = {i for b in blocks for i in range(b.first, b.last + 1)}
    headings = []
    for i, line in enumerate(lines):
        m = _HEADING.match(line) if i not in inside else None
        if m:
            title = (m["title"] or m["bold"] or "").strip("*_ ")
            level = len(m["hashes"]) if m["hashes"] else 6
            kind = "analysis" if _ANALYSIS_TITLE.match(title) else "plan" if _PLAN_TITLE.match(title) else "other"
            headings.append((i, level, kind))
    ours = [(i, level) for i, level, kind in headings if kind != "other"]
    if not ours:
        return "", False
    start, level = ours[0]
    stops = [i for i, lvl, kind in headings if i > start and kind == "other" and lvl <= level]
    if code_line is not None and code_line > start:
        stops.append(code_line)
    end = min(stops, default=len(lines))
    text = "\n".join(lines[start:end]).strip()
    has = False
    for i, lvl, kind in headings:
        if kind == "analysis" and start <= i < end:
            section_end = min([j for j, jlvl, _ in headings if j > i and jlvl <= lvl] + [end])
            has = has or any(ln.strip() for ln in lines[i + 1:section_end])
    return text, has
