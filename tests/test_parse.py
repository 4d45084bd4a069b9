"""parse_reply / parse_review: every reply form the proposers meet, and every failure as a value."""

import pytest

from warpforge.propose.parse import ParsedReply, parse_reply, parse_review

PROGRAM = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.relu(x)
        return y
"""

OTHER_PROGRAM = PROGRAM.replace("torch.relu(x)", "x.clamp_min(0)")


def fenced(code: str, fence: str = "```", info: str = "python") -> str:
    return f"{fence}{info}\n{code.rstrip()}\n{fence}\n"


def edit(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def ok(parsed: ParsedReply) -> str:
    assert parsed.failure == "", parsed.failure
    assert parsed.source is not None
    return parsed.source


def failed(parsed: ParsedReply) -> str:
    assert parsed.source is None
    assert parsed.failure and "\n" not in parsed.failure
    return parsed.failure


# -- whole-file code blocks ---------------------------------------------------------------------

def test_single_python_block():
    assert ok(parse_reply("Here it is:\n\n" + fenced(PROGRAM) + "\nThis should be faster.")) == PROGRAM


@pytest.mark.parametrize("fence,info", [("```", "python"), ("```", "py"), ("```", "Python"), ("```", ""),
                                        ("~~~", ""), ("~~~", "python"), ("````", "python"), ("```", "python3")])
def test_fence_styles(fence, info):
    assert ok(parse_reply(fenced(PROGRAM, fence, info))) == PROGRAM


def test_several_blocks_prefers_the_last_that_defines_model_new():
    draft = PROGRAM.replace("torch.relu(x)", "x * (x > 0)")
    reply = ("First attempt:\n" + fenced(draft) + "\nThe kernel:\n" + fenced("__global__ void k() {}", info="cuda")
             + "\nFinal version:\n" + fenced(OTHER_PROGRAM) + "\nUsage:\n" + fenced("model = ModelNew()\nmodel(x)"))
    assert ok(parse_reply(reply)) == OTHER_PROGRAM


def test_a_longer_fence_can_hold_a_shorter_one():
    code = PROGRAM + '\nNOTE = """\n```\nnot a fence end\n```\n"""\n'
    assert ok(parse_reply(fenced(code, "````"))) == code


def test_block_nested_in_a_list_item_is_dedented():
    indented = "\n".join("   " + line if line else "" for line in PROGRAM.rstrip().split("\n"))
    reply = f"1. The code:\n   ```python\n{indented}\n   ```\n"
    assert ok(parse_reply(reply)) == PROGRAM


def test_model_new_defined_under_an_if_or_by_assignment_counts():
    guarded = "import torch.nn as nn\nif True:\n    class ModelNew(nn.Module):\n        pass\n"
    assigned = "import torch.nn as nn\nclass Fast(nn.Module):\n    pass\nModelNew = Fast\n"
    assert ok(parse_reply(fenced(guarded))) == guarded
    assert ok(parse_reply(fenced(assigned))) == assigned


def test_no_model_new_is_a_failure():
    reply = fenced(PROGRAM.replace("ModelNew", "Model"))
    assert "ModelNew" in failed(parse_reply(reply))


def test_model_new_only_in_a_docstring_is_a_failure():
    code = 'import torch\n"""\nclass ModelNew is defined elsewhere\n"""\nclass Fast:\n    pass\n'
    assert "does not define class ModelNew" in failed(parse_reply(fenced(code)))


def test_syntax_error_names_the_line():
    broken = PROGRAM.replace("def forward(self, x):", "def forward(self, x)")
    reason = failed(parse_reply(fenced(broken)))
    assert "not valid Python" in reason and "line 9" in reason and "def forward(self, x)" in reason


def test_null_bytes_are_a_failure_not_an_exception():
    assert "not valid Python" in failed(parse_reply(fenced(PROGRAM + "x = 1\x00\n")))


def test_reply_without_any_code_block():
    assert "no code block" in failed(parse_reply("I would use a Triton kernel with one program per row."))


def test_unfenced_whole_file_is_accepted():
    """reward.py passes whole candidate files, and some models forget the fences."""
    assert ok(parse_reply(PROGRAM)) == PROGRAM
    assert ok(parse_reply("Here is the file.\n" + PROGRAM)) == PROGRAM


@pytest.mark.parametrize("text", ["", "   \n\n  ", None])
def test_empty_reply(text):
    assert "empty" in failed(parse_reply(text))  # type: ignore[arg-type]


def test_crlf_line_endings():
    reply = ("## Analysis\r\nfewer passes\r\n\r\n" + fenced(PROGRAM)).replace("\n", "\r\n")
    parsed = parse_reply(reply, require_analysis=True)
    assert ok(parsed) == PROGRAM
    assert "\r" not in parsed.analysis


# -- truncation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("finish_reason", ["length", "max_tokens"])
def test_token_limit_is_truncation(finish_reason):
    assert "truncated" in failed(parse_reply(fenced(PROGRAM), finish_reason=finish_reason))


def test_unclosed_fence_is_truncation():
    reply = "Plan: fuse.\n```python\n" + PROGRAM[:80]
    assert "truncated" in failed(parse_reply(reply))


def test_unclosed_fence_after_a_complete_block_is_still_truncation():
    reply = fenced(PROGRAM) + "\nAn improved version:\n```python\nimport torch\n"
    assert "truncated" in failed(parse_reply(reply))


def test_stray_fence_at_the_end_is_not_truncation():
    assert ok(parse_reply(fenced(PROGRAM) + "```\n\n")) == PROGRAM


# -- SEARCH/REPLACE edits -----------------------------------------------------------------------

def test_exact_edit():
    reply = "Use clamp.\n" + edit("        y = torch.relu(x)", "        y = x.clamp_min(0)")
    parsed = parse_reply(reply, previous=PROGRAM)
    assert ok(parsed) == OTHER_PROGRAM
    assert parsed.edits_applied == 1


def test_edits_inside_a_fence_apply_in_order():
    first = edit("        y = torch.relu(x)", "        y = x.clamp_min(0)")
    second = edit("        y = x.clamp_min(0)\n        return y", "        return x.clamp_min(0)")
    parsed = parse_reply("```python\n" + first + second + "```\n", previous=PROGRAM)
    assert ok(parsed).endswith("    def forward(self, x):\n        return x.clamp_min(0)\n")
    assert parsed.edits_applied == 2


def test_whitespace_tolerant_edit_reindents_the_replacement():
    search = "def forward(self, x):  \n    y = torch.relu(x)\n\n    return y"  # 4 too few, trailing spaces, a blank
    replace = "def forward(self, x):\n    return x.clamp_min(0)"
    source = ok(parse_reply(edit(search, replace), previous=PROGRAM))
    assert source.endswith("    def forward(self, x):\n        return x.clamp_min(0)\n")


def test_edit_against_a_crlf_previous_file():
    parsed = parse_reply(edit("        y = torch.relu(x)", "        y = x.clamp_min(0)"),
                         previous=PROGRAM.replace("\n", "\r\n"))
    assert ok(parsed) == OTHER_PROGRAM


def test_edit_deleting_lines():
    source = ok(parse_reply(edit("    def __init__(self):\n        super().__init__()\n", ""), previous=PROGRAM))
    assert "__init__" not in source


def test_unmatched_edit_names_the_first_unmatched_line():
    search = "    def forward(self, x):\n        y = torch.sigmoid(x)\n        return y"
    reason = failed(parse_reply(edit(search, "    pass"), previous=PROGRAM))
    assert "edit 1 of 1 does not match" in reason and "y = torch.sigmoid(x)" in reason


def test_second_unmatched_edit_is_named():
    reply = edit("        y = torch.relu(x)", "        y = x.clamp_min(0)") + edit("nothing like this", "x")
    assert "edit 2 of 2" in failed(parse_reply(reply, previous=PROGRAM))


def test_unmatched_edit_falls_back_to_a_whole_file_block():
    reply = edit("not in the file", "whatever") + "\nOr the whole file:\n" + fenced(OTHER_PROGRAM)
    parsed = parse_reply(reply, previous=PROGRAM)
    assert ok(parsed) == OTHER_PROGRAM and parsed.edits_applied == 0


def test_edits_without_a_previous_file():
    reply = edit("        y = torch.relu(x)", "        y = x.clamp_min(0)")
    assert "no earlier file" in failed(parse_reply(reply))
    assert ok(parse_reply(reply + fenced(OTHER_PROGRAM))) == OTHER_PROGRAM


def test_edit_cut_off_is_truncation():
    reply = "<<<<<<< SEARCH\n        y = torch.relu(x)\n=======\n        y = x.cl"
    assert "truncated" in failed(parse_reply(reply, previous=PROGRAM))


def test_edit_without_divider():
    reply = "<<<<<<< SEARCH\n        y = torch.relu(x)\n>>>>>>> REPLACE\n"
    assert "=======" in failed(parse_reply(reply, previous=PROGRAM))


def test_empty_search_part():
    assert "empty SEARCH" in failed(parse_reply(edit("", "import math"), previous=PROGRAM))


def test_edit_that_breaks_the_syntax():
    reason = failed(parse_reply(edit("        return y", "        return (y"), previous=PROGRAM))
    assert reason.startswith("after applying 1 SEARCH/REPLACE edit(s), the code is not valid Python")


def test_edit_that_removes_model_new():
    reason = failed(parse_reply(edit("class ModelNew(nn.Module):", "class Other(nn.Module):"), previous=PROGRAM))
    assert "ModelNew" in reason


# -- analysis -----------------------------------------------------------------------------------

CONTRASTIVE_REPLY = """## Analysis
Variant 3 reads each row once with 16-byte loads; variant 1 makes three passes.

### Memory traffic
3 passes x 256 MB vs 2 passes.

## Plan
Online softmax in one pass, float4 loads.

```python
{code}
```

This should reach about 90% of bandwidth.
"""


def test_analysis_and_plan_are_extracted_without_the_code():
    parsed = parse_reply(CONTRASTIVE_REPLY.format(code=PROGRAM.rstrip()), require_analysis=True)
    assert ok(parsed) == PROGRAM
    assert parsed.analysis.startswith("## Analysis\nVariant 3")
    assert "### Memory traffic" in parsed.analysis and parsed.analysis.endswith("float4 loads.")
    assert "import torch" not in parsed.analysis and "90%" not in parsed.analysis


def test_analysis_stops_at_another_heading():
    reply = "## Analysis\nslow\n## Plan\nfast\n## Code notes\nsee below\n" + fenced(PROGRAM)
    assert parse_reply(reply).analysis == "## Analysis\nslow\n## Plan\nfast"


def test_analysis_heading_variants():
    for heading in ("## Performance Analysis", "### 1. Analysis", "# Analysis:", "**Analysis**"):
        parsed = parse_reply(f"{heading}\nwhy\n" + fenced(PROGRAM), require_analysis=True)
        assert parsed.failure == "" and parsed.analysis.startswith(heading)


def test_missing_analysis_when_required():
    reply = "## Plan\nfuse\n" + fenced(PROGRAM)
    assert "## Analysis" in failed(parse_reply(reply, require_analysis=True))
    assert parse_reply(reply).failure == ""  # not required: fine
    assert parse_reply(reply).analysis == "## Plan\nfuse"


def test_empty_analysis_section_does_not_count():
    reply = "## Analysis\n\n## Plan\nfuse\n" + fenced(PROGRAM)
    assert failed(parse_reply(reply, require_analysis=True))


def test_analysis_heading_inside_code_does_not_count():
    code = PROGRAM.replace("import torch\n", "import torch\n## Analysis\n", 1)
    assert failed(parse_reply(fenced(code), require_analysis=True))


def test_analysis_is_kept_when_the_reply_fails():
    parsed = parse_reply("## Analysis\nwhy it is slow\n```python\nimport torch\n", finish_reason="length")
    assert parsed.source is None and parsed.analysis == "## Analysis\nwhy it is slow"


def test_no_analysis_gives_empty_text():
    assert parse_reply(fenced(PROGRAM)).analysis == ""


# -- nothing raises -----------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["```", "~~~\n", "<<<<<<< SEARCH", "=======\n>>>>>>> REPLACE", "## Analysis",
                                  "\x00\x01", "```python\n```", "class ModelNew(", "\r\r\n\r", "`" * 2000,
                                  "<<<<<<< SEARCH\n=======\n>>>>>>> REPLACE\n" * 3, "((" * 5000])
@pytest.mark.parametrize("previous", [None, PROGRAM, ""])
def test_odd_replies_fail_as_values(text, previous):
    parsed = parse_reply(text, previous=previous, require_analysis=True)
    assert parsed.source is None and parsed.failure


# -- review verdicts ----------------------------------------------------------------------------

@pytest.mark.parametrize("reply,verdict,finding", [
    ("VERDICT: plausible\nOne fused pass; the reference makes three.", "plausible",
     "One fused pass; the reference makes three."),
    ("VERDICT: suspicious\nIt caches the output keyed by x.data_ptr().", "suspicious",
     "It caches the output keyed by x.data_ptr()."),
    ("**VERDICT: Suspicious**\r\nline 12 skips half the rows.", "suspicious", "line 12 skips half the rows."),
    ("verdict - plausible. The algebra is exact.", "plausible", "The algebra is exact."),
    ("Let me look.\n\nVERDICT: `suspicious`\nreturns a stored tensor", "suspicious", "returns a stored tensor"),
    ("VERDICT: plausible", "plausible", ""),
])
def test_review_verdicts(reply, verdict, finding):
    assert parse_review(reply) == (verdict, finding)


@pytest.mark.parametrize("reply", ["It looks fine to me.", "", "VERDICT: plausible or suspicious\nhard to say",
                                   "VERDICT: plausible\nbut wait\nVERDICT: suspicious\nit caches"])
def test_unclear_reviews(reply):
    verdict, finding = parse_review(reply)
    assert verdict == "unclear" and finding
