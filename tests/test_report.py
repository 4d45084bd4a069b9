"""The HTML report (`warpforge report`), against archives built here with sqlite3 and the
documented schema: the pages hold the key elements, every archive string is escaped, an empty
archive and a task without a correct kernel give pages that say so, bad paths give UsageError."""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sqlite3
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from warpforge.errors import UsageError
from warpforge.report.html import add_report_parser, cmd_report, write_report
from warpforge.report.pages import _diff, _page_names

SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE runs(id TEXT PRIMARY KEY, started REAL, finished REAL, status TEXT, config TEXT, seed INTEGER);
CREATE TABLE tasks(name TEXT PRIMARY KEY, path TEXT, source_hash TEXT, source TEXT, metadata TEXT);
CREATE TABLE candidates(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, task TEXT, step INTEGER,
    source_hash TEXT, source TEXT, language TEXT, parents TEXT, strategy TEXT, model TEXT, island INTEGER,
    features TEXT, prompt TEXT, reply TEXT, analysis TEXT, failure TEXT,
    prompt_tokens INTEGER, completion_tokens INTEGER, cost_usd REAL, llm_seconds REAL, created REAL,
    UNIQUE(run_id, task, step));
CREATE TABLE evaluations(id INTEGER PRIMARY KEY AUTOINCREMENT, candidate_id INTEGER, run_id TEXT, task TEXT,
    status TEXT, correct INTEGER, stage TEXT, reason TEXT, speedup REAL, speedup_vs_compile REAL,
    candidate_ms REAL, candidate_iqr_ms REAL, reference_ms REAL, compile_ms REAL, kernels_kind TEXT,
    hardware TEXT, hardware_key TEXT, result TEXT, review TEXT, created REAL);
CREATE TABLE llm_calls(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, task TEXT, model TEXT, role TEXT,
    prompt_tokens INTEGER, completion_tokens INTEGER, cost_usd REAL, seconds REAL, error TEXT, created REAL);
INSERT INTO meta VALUES ('schema_version', '1');
"""

EVIL_SOURCE = '''import torch
import triton
import triton.language as tl

# </pre><script>alert(1)</script>
@triton.jit
def softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * n + offs, e / tl.sum(e, 0), mask=offs < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''
PARENT_SOURCE = EVIL_SOURCE.replace("# </pre><script>alert(1)</script>\n", "").replace(
    "e / tl.sum(e, 0)", "e / tl.sum(e, axis=0)")
EVIL_TASK = "level9/<b>evil</b>"
SOFTMAX_TIMED = 4  # correct and timed softmax attempts: points on its chart
BIG = 260  # attempts of level1/relu: more than the report's folding threshold


class Archive:
    """Writes rows the way the search loop does (candidate first, then its evaluations)."""

    def __init__(self, path: Path):
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)
        self.t = 1_790_000_000.0

    def run(self, run_id: str, config: dict, status: str = "done") -> None:
        self.db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                        (run_id, self.t, self.t + 3600, status, json.dumps(config), 7))

    def task(self, name: str) -> None:
        self.db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?)",
                        (name, f"/suite/{name}.py", "h", "class Model: ...", json.dumps({"description": name})))

    def candidate(self, run: str, task: str, step: int, source: str | None, parents: list[int] = [],
                  strategy: str = "optimise", language: str = "triton", failure: str | None = None,
                  model: str = "openai:gpt-5") -> int:
        self.t += 10
        cur = self.db.execute(
            "INSERT INTO candidates(run_id, task, step, source_hash, source, language, parents, strategy, model, "
            "island, features, prompt, reply, analysis, failure, prompt_tokens, completion_tokens, cost_usd, "
            "llm_seconds, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '{}', 'prompt', 'reply', '', ?, 1200, 800, "
            "0.012, 9.5, ?)",
            (run, task, step, str(hash(source)), source, language, json.dumps(parents), strategy, model, failure, self.t))
        self.db.execute("INSERT INTO llm_calls(run_id, task, model, role, prompt_tokens, completion_tokens, cost_usd, "
                        "seconds, error, created) VALUES (?, ?, ?, 'propose', 1200, 800, 0.012, 9.5, NULL, ?)",
                        (run, task, model, self.t))
        assert cur.lastrowid is not None
        return cur.lastrowid

    def evaluate(self, cid: int, status: str, stage: str, speedup: float | None = None, reason: str = "",
                 kind: str | None = "custom_kernel", vs_compile: float | None = None) -> None:
        run, task = self.db.execute("SELECT run_id, task FROM candidates WHERE id = ?", (cid,)).fetchone()
        timed = speedup is not None
        self.db.execute(
            "INSERT INTO evaluations(candidate_id, run_id, task, status, correct, stage, reason, speedup, "
            "speedup_vs_compile, candidate_ms, candidate_iqr_ms, reference_ms, compile_ms, kernels_kind, hardware, "
            "hardware_key, result, review, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '{}', "
            "'NVIDIA H100 80GB HBM3', '{}', ?, ?)",
            (cid, run, task, status, int(status == "correct"), stage, reason or f"{status} at {stage}", speedup,
             vs_compile if vs_compile is not None else (speedup * 0.6 if timed else None),
             1.0 / speedup if timed else None, 0.01 if timed else None, 1.0 if timed else None,
             0.6 if timed else None, kind if status == "correct" else None,
             json.dumps({"verdict": "honest", "finding": "no <b>tricks</b>"}) if status == "correct" else None,
             self.t))


def build_archive(path: Path) -> dict[str, int]:
    """Five tasks: softmax (a lineage, a malicious best kernel), gemm (two runs, a PyTorch rewrite,
    a parent from another task), gemm_bias_relu (every kind of failure, nothing correct), relu
    (BIG attempts with a wide speedup range) and an evil task name; mlp is listed with no attempts."""
    a = Archive(path)
    a.run("run-1", {"strategy": "evolve", "llm": "openai:gpt-5", "budget": {"candidates": 16, "cost_usd": 5},
                    "note": "<script>alert('config')</script>"})
    for name in ("level1/softmax", "level1/gemm", "level2/gemm_bias_relu", "level1/relu", "level3/mlp", EVIL_TASK):
        a.task(name)
    ids: dict[str, int] = {}
    sm = "level1/softmax"
    ids["s0"] = a.candidate("run-1", sm, 0, PARENT_SOURCE.replace("axis=0", "0"), strategy="translate")
    a.evaluate(ids["s0"], "correct", "done", 1.2)
    ids["s1"] = a.candidate("run-1", sm, 1, PARENT_SOURCE, [ids["s0"]])
    a.evaluate(ids["s1"], "correct", "done", 2.0)
    ids["s2"] = a.candidate("run-1", sm, 2, "broken(", [ids["s1"]], strategy="repair")
    a.evaluate(ids["s2"], "compile_error", "compile", reason="error: expected ')' <img src=x onerror=alert(2)>")
    ids["best"] = a.candidate("run-1", sm, 3, EVIL_SOURCE, [ids["s1"], ids["s0"]], strategy="crossover",
                              model="<i>model</i>")
    a.evaluate(ids["best"], "incorrect", "verify")  # an older evaluation, superseded by the next
    a.evaluate(ids["best"], "correct", "done", 3.5)
    ids["s4"] = a.candidate("run-1", sm, 4, EVIL_SOURCE + "#x", [ids["best"]])
    a.evaluate(ids["s4"], "incorrect", "verify")
    ids["s5"] = a.candidate("run-1", sm, 5, EVIL_SOURCE + "#y", [ids["s4"]])
    a.evaluate(ids["s5"], "correct", "done", 3.0)
    ids["s6"] = a.candidate("run-1", sm, 6, None, failure="the reply held no code block", strategy="optimise")
    ids["s7"] = a.candidate("run-1", sm, 7, EVIL_SOURCE + "#z", [ids["best"]], strategy="contrastive")
    a.evaluate(ids["s7"], "timeout", "bench")

    gm = "level1/gemm"
    ids["g0"] = a.candidate("run-1", gm, 0, "torch.mm", [ids["s1"]], strategy="retrieval", language="pytorch")
    a.evaluate(ids["g0"], "correct", "done", 1.05, kind="pytorch_rewrite")
    a.t += 7200
    a.run("run-2", {"strategy": "best-of-n", "llm": "anthropic:claude"}, status="stopped")
    ids["g1"] = a.candidate("run-2", gm, 0, "torch.addmm", [ids["g0"]], language="pytorch")
    a.evaluate(ids["g1"], "correct", "done", 1.1, kind="pytorch_rewrite")
    ids["g2"] = a.candidate("run-2", gm, 1, "cuda", [ids["g1"]], language="cuda")  # recorded, not evaluated yet

    fb = "level2/gemm_bias_relu"
    for step, (status, stage) in enumerate([("incorrect", "verify"), ("compile_error", "compile"),
                                            ("runtime_error", "verify"), ("timeout", "bench"),
                                            ("crashed", "verify"), ("rejected", "static")]):
        cid = a.candidate("run-1", fb, step, f"attempt {step}", language="cuda")
        a.evaluate(cid, status, stage)
    a.candidate("run-1", fb, 6, None, failure="LLM error: rate limited")
    a.db.execute("UPDATE evaluations SET reason = CAST(X'6261642080ff2062797465' AS TEXT) WHERE task = ? AND "
                 "status = 'crashed'", (fb,))  # not valid UTF-8

    rng = random.Random(0)
    for step in range(BIG):
        cid = a.candidate("run-1", "level1/relu", step, f"relu {step}", [cid] if step else [])
        if rng.random() < 0.5:
            a.evaluate(cid, "correct", "done", 10 ** rng.uniform(-1.3, 1.6))
        else:
            a.evaluate(cid, rng.choice(["incorrect", "compile_error", "timeout"]), rng.choice(["verify", "compile"]))

    cid = a.candidate("run-1", EVIL_TASK, 0, "x = 1", language="cpp")
    a.evaluate(cid, "correct", "done", 1.5)
    a.db.commit()
    a.db.close()
    return ids


# ---------------------------------------------------------------- a tiny DOM over html.parser

VOID = {"meta", "br", "img", "hr", "input", "link", "wbr"}


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Element | None):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Element | str] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        for c in self.children:
            if isinstance(c, Element):
                yield c
                yield from c.iter()

    def find_all(self, tag: str, cls: str | None = None) -> list[Element]:
        return [e for e in self.iter() if e.tag == tag and (cls is None or cls in (e.attrs.get("class") or "").split())]

    def by_id(self, ident: str) -> Element:
        found = [e for e in self.iter() if e.attrs.get("id") == ident]
        assert len(found) == 1, f"expected one element #{ident}, found {len(found)}"
        return found[0]


class DOM(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Element("#root", {}, None)
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs), self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Element(tag, dict(attrs), self.current))

    def handle_endtag(self, tag):
        node: Element | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"stray </{tag}>"
        self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse(path: Path) -> Element:
    return DOM(path.read_text(encoding="utf-8")).root


# ---------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    ids = build_archive(root / "archive.db")
    index = write_report(root / "archive.db", root / "site")
    return index, ids


def task_page(index: Path, name: str) -> Path:
    rows = [r for r in parse(index).find_all("tr", "task-row") if r.attrs["data-task"] == name]
    assert len(rows) == 1
    href = rows[0].find_all("a")[0].attrs["href"]
    assert href and href.startswith("tasks/") and ".." not in href
    return index.parent / href


def test_index_leaderboard_has_a_row_per_task(report):
    index, _ = report
    assert index.name == "index.html" and index.is_file()
    dom = parse(index)
    rows = {r.attrs["data-task"]: r for r in dom.by_id("leaderboard").find_all("tr", "task-row")}
    assert set(rows) == {"level1/softmax", "level1/gemm", "level2/gemm_bias_relu", "level1/relu", "level3/mlp",
                         EVIL_TASK}
    cells = [td.text().strip() for td in rows["level1/softmax"].find_all("td")]
    assert cells[:8] == ["level1/softmax", "8", "4", "50%", "3.5x faster [3.44-3.56]", "2.1×", "triton", "custom_kernel"]
    assert "no correct kernel" in rows["level2/gemm_bias_relu"].text()
    assert "pytorch_rewrite" in rows["level1/gemm"].text()
    assert rows["level1/softmax"].find_all("td")[8].text() == "16,000"  # 8 logged LLM calls of 2,000 tokens
    assert "Geometric-mean speedup" in dom.by_id("geomean").text()


def test_index_groups_the_tasks_by_level(report):
    index, _ = report
    rows = {r.attrs["data-level"]: [td.text().strip() for td in r.find_all("td")]
            for r in parse(index).by_id("levels").find_all("tr", "level-row")}
    assert list(rows) == ["level 1", "level 2", "level 3", "level 9"]  # EVIL_TASK is level9/...
    # level 1: softmax, gemm, relu, all attempted; level 2: gemm_bias_relu, nothing correct, so 1x
    assert rows["level 1"][1:3] == ["3", "3"] and rows["level 2"][1:5] == ["1", "1", "0", "1×"]
    assert rows["level 3"][1:3] == ["1", "0"] and rows["level 3"][4] == "—"  # mlp: listed, never attempted


def test_index_kind_split_failure_mix_and_runs(report):
    index, _ = report
    dom = parse(index)
    split = {tr.find_all("td")[0].text(): [td.text() for td in tr.find_all("td")[1:]]
             for tr in dom.by_id("kinds").find_all("tr") if tr.find_all("td")}
    assert split["pytorch_rewrite"] == ["2", "1"]  # two correct gemm candidates, one task best
    assert split["custom_kernel"][1] == "3"  # softmax, relu, the evil task
    bars = dom.find_all("svg", "bars")
    assert len(bars) == 1
    segments = {r.attrs["data-key"] for r in bars[0].find_all("rect", "seg")}
    assert {"correct", "incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected",
            "no_candidate", "not_evaluated"} <= segments
    runs = dom.by_id("runs").find_all("tbody")[0].find_all("tr", None)
    assert [r.find_all("td")[0].text() for r in runs if r.parent and r.parent.tag == "tbody"] == ["run-1", "run-2"]
    assert "strategy=evolve" in dom.by_id("runs").text() and "budget.candidates=16" in dom.by_id("runs").text()


def test_task_page_best_kernel_diff_and_lineage(report):
    index, ids = report
    dom = parse(task_page(index, "level1/softmax"))
    assert dom.by_id("best-source").text() == EVIL_SOURCE
    diff = dom.by_id("diff")
    added = [s.text() for s in diff.find_all("span", "add")]
    removed = [s.text() for s in diff.find_all("span", "del")]
    assert "+# </pre><script>alert(1)</script>" in added
    assert any("axis=0" in line for line in removed)
    lineage = dom.by_id("lineage")
    chain = [a.attrs["href"] for a in lineage.find_all("ul", "chain")[0].find_all("a")]
    assert chain == [f"#c{ids['s0']}", f"#c{ids['s1']}", f"#c{ids['s0']}"]  # root, parent, crossed-with
    rows = lineage.find_all("ul", "tree")[0].find_all("li")
    tree = [r.find_all("a")[0].attrs["href"] for r in rows]
    assert tree == [f"#c{ids['s4']}", f"#c{ids['s5']}", f"#c{ids['s7']}"]
    # s5 is s4's only child: it continues s4's line; s7 is s4's sibling
    assert [(r.attrs["class"], r.attrs["data-depth"]) for r in rows] == [("branch", "0"), ("cont", "0"), ("branch", "0")]
    for href in chain + tree:  # every lineage link lands on a row of the attempts table
        dom.by_id(href[1:])


def test_task_page_chart_points_and_attempts_table(report):
    index, ids = report
    dom = parse(task_page(index, "level1/softmax"))
    scatter = dom.find_all("svg", "scatter")
    assert len(scatter) == 1
    assert len(scatter[0].find_all("circle", "point")) == SOFTMAX_TIMED
    assert len(scatter[0].find_all("line", "fail")) == 4  # compile error, incorrect, no candidate, timeout
    assert len(scatter[0].find_all("path", "best")) == 1
    rows = dom.by_id("attempts").find_all("tr", "attempt")
    assert [r.find_all("td")[1].text() for r in rows] == [str(s) for s in range(8)]
    statuses = [r.find_all("td")[6].text() for r in rows]
    assert statuses == ["correct", "correct", "compile_error", "correct", "incorrect", "correct", "no_candidate", "timeout"]
    assert "the reply held no code block" in rows[-2].text()
    assert dom.find_all("svg", "bars")


def test_attempts_of_later_runs_follow_earlier_ones_on_the_chart(report):
    index, _ = report
    dom = parse(task_page(index, "level1/gemm"))
    xs = [float(c.attrs["cx"] or 0) for c in dom.find_all("circle", "point")]
    assert len(xs) == 2 and xs[0] < xs[1]  # run-2's step 0 is drawn after run-1's step 0
    assert "retrieval" in dom.by_id("attempts").text()
    links = [a.attrs["href"] for a in dom.by_id("lineage").find_all("a")]
    assert any(h and h.startswith("level1_softmax.html#c") for h in links)  # a parent from another task


def test_everything_from_the_archive_is_escaped(report):
    index, _ = report
    pages = [index, *sorted((index.parent / "tasks").glob("*.html"))]
    assert len(pages) == 7
    for page in pages:
        dom = parse(page)
        assert dom.find_all("script") == [], page
        assert dom.find_all("img") == [] and dom.find_all("b") == [] and dom.find_all("i") == [], page
        csp = [m.attrs["content"] for m in dom.find_all("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"]
        assert csp and "default-src 'none'" in csp[0]  # no script would run even if escaping failed
        text = page.read_text()
        assert "<script" not in text and "onerror=alert" not in text.replace("onerror=alert(2)&gt;", "")
    index_dom = parse(index)
    assert EVIL_TASK in index_dom.by_id("leaderboard").text()
    assert "<script>alert('config')</script>" in index_dom.by_id("runs").text()
    softmax = parse(task_page(index, "level1/softmax"))
    assert "<img src=x onerror=alert(2)>" in softmax.by_id("attempts").text()
    assert "<i>model</i>" in softmax.by_id("best-facts").text()
    assert task_page(index, EVIL_TASK).name == "level9_b_evil_b.html"


def test_task_without_correct_kernel_says_so(report):
    index, _ = report
    dom = parse(task_page(index, "level2/gemm_bias_relu"))
    assert "No correct candidate" in dom.by_id("no-best").text()
    assert dom.find_all("svg", "scatter") == []
    assert len(dom.by_id("attempts").find_all("tr", "attempt")) == 7
    keys = {r.attrs["data-key"] for r in dom.find_all("rect", "seg")}
    assert keys == {"incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected", "no_candidate"}
    assert "bad \ufffd\ufffd byte" in dom.by_id("attempts").text()
    empty = parse(task_page(index, "level3/mlp"))
    assert "No attempts" in empty.by_id("no-attempts").text()


def test_many_attempts_fold_the_table_and_use_a_log_axis(report):
    index, _ = report
    dom = parse(task_page(index, "level1/relu"))
    fold = dom.by_id("attempts-fold")
    assert fold.tag == "details" and len(fold.find_all("tr", "attempt")) == BIG
    scatter = dom.find_all("svg", "scatter")[0]
    assert scatter.attrs["data-log-y"] == "true"
    correct = sum(1 for r in fold.find_all("tr", "attempt") if r.find_all("td")[6].text() == "correct")
    assert len(scatter.find_all("circle", "point")) == correct
    assert len(scatter.find_all("line", "fail")) == BIG - correct
    chain = dom.by_id("lineage").find_all("ul", "chain")[0]
    folded = chain.find_all("details")
    assert len(folded) == 1  # a long chain shows its roots and last steps; the middle is folded, not dropped
    links = [a.attrs["href"] for a in chain.find_all("a")]
    assert len(links) == len(set(links)) and len(links) > 14
    for href in links:
        dom.by_id(href[1:])
    trees = dom.by_id("lineage").find_all("ul", "tree")  # the descendants: a few shown, the rest folded
    assert len(trees) == 2 and trees[1].parent and trees[1].parent.tag == "details"
    assert len(trees[0].find_all("li")) == 12 and len(trees[0].find_all("li")) + len(trees[1].find_all("li")) <= 120


def test_page_names_are_safe_and_unique():
    pages = _page_names(["a/b", "a_b", "A_B", "../../etc/passwd", "", "x" * 300])
    assert len(set(p.lower() for p in pages.values())) == 6
    assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\.html", p) and len(p) < 100 for p in pages.values())


def test_diff_lines_are_classified_by_position_not_by_look():
    lines = _diff("--i;\nkeep\n", "keep\n+++j;\n", "#1", "#2")
    assert [kind for kind, _ in lines] == ["head", "head", "hunk", "del", "ctx", "add"]
    assert lines[3][1] == "---i;" and lines[5][1] == "++++j;"


def test_empty_archive_gives_a_page_that_says_so(tmp_path):
    db = sqlite3.connect(tmp_path / "empty.db")
    db.executescript(SCHEMA)
    db.close()
    index = write_report(tmp_path / "empty.db", tmp_path / "site")
    dom = parse(index)
    assert "no attempts yet" in dom.by_id("empty").text()
    assert dom.by_id("leaderboard").find_all("tr", "task-row") == []
    assert list((tmp_path / "site" / "tasks").iterdir()) == []


def test_bad_archives_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        write_report(tmp_path / "missing.db", tmp_path / "site")
    with pytest.raises(UsageError, match="does not exist"):
        write_report(tmp_path, tmp_path / "site")
    (tmp_path / "notes.txt").write_text("not a database, just some text that is long enough to have a header\n" * 20)
    with pytest.raises(UsageError, match="not an SQLite file"):
        write_report(tmp_path / "notes.txt", tmp_path / "site")
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t(x)").connection.close()
    with pytest.raises(UsageError, match="not a warpforge archive"):
        write_report(tmp_path / "other.db", tmp_path / "site")
    db = sqlite3.connect(tmp_path / "future.db")
    db.executescript(SCHEMA.replace("'schema_version', '1'", "'schema_version', '2'"))
    db.close()
    with pytest.raises(UsageError, match="schema version 2"):
        write_report(tmp_path / "future.db", tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_cli_prints_the_index_path(tmp_path, capsys):
    build_archive(tmp_path / "a.db")
    parser = argparse.ArgumentParser()
    add_report_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(tmp_path / "a.db"), "--out", str(tmp_path / "out")])
    assert cmd_report(args) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "out" / "index.html")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium for a headless screenshot")
def test_headless_chromium_renders_the_pages(report, tmp_path):
    index, _ = report
    for page in (index, task_page(index, "level1/softmax")):
        shot = tmp_path / f"{page.stem}.png"
        subprocess.run(["chromium", "--headless", "--disable-gpu", "--no-sandbox", f"--screenshot={shot}",
                        "--window-size=1280,1600", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
        assert shot.stat().st_size > 10_000


def test_every_page_says_when_a_run_was_unsandboxed(tmp_path):
    a = Archive(tmp_path / "mixed.db")
    a.run("run-safe", {"strategy": "evolve", "eval": {"sandbox": True}})
    a.run("run-open", {"strategy": "evolve", "eval": {"sandbox": False}})
    a.task("level1/relu")
    a.evaluate(a.candidate("run-open", "level1/relu", 0, "class ModelNew: ..."), "correct", "done", 1.5)
    a.db.commit()
    index = write_report(tmp_path / "mixed.db", tmp_path / "site")
    for page in [index, *(tmp_path / "site" / "tasks").iterdir()]:
        text = page.read_text()
        assert "Unsandboxed" in text and "run-open" in text and "run-safe" not in text.split("Unsandboxed")[1][:300]
    a.db.execute("DELETE FROM runs WHERE id = 'run-open'")
    a.db.commit()
    assert "Unsandboxed" not in write_report(tmp_path / "mixed.db", tmp_path / "site2").read_text()
