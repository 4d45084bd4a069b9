"""The `cmd` and `inbox` providers (propose/external.py), driven by scripted responders on the CPU."""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from warpforge.errors import ConfigError, LLMError
from warpforge.propose.external import render_prompt
from warpforge.propose.llm import LLMClient, parse_model_specs

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "Make relu fast."}]
PY = shlex.quote(sys.executable)


def responder(tmp_path: Path, body: str) -> str:
    """A command running a small Python script; `body` sees `prompt` (its stdin)."""
    script = tmp_path / "responder.py"
    script.write_text("import os, sys\nprompt = sys.stdin.read()\n" + body)
    return f"{PY} {shlex.quote(str(script))}"


def client(spec: str, **kwargs: object) -> LLMClient:
    return LLMClient(parse_model_specs([spec]), backoff_s=0.0, **kwargs)  # type: ignore[arg-type]


def test_the_two_providers_parse_with_a_name_a_weight_and_no_endpoint_or_price() -> None:
    cmd, named, inbox, at = parse_model_specs(["cmd:claude -p", "cmd(sonnet via claude):claude -p --model x",
                                               "inbox:/tmp/box@2", "cmd:echo user@host"],
                                              base_url="http://localhost:8000/v1")
    assert (cmd.provider, cmd.model, cmd.name, cmd.base_url) == ("cmd", "claude -p", "cmd:claude -p", None)
    assert named.name == "sonnet via claude" and named.model == "claude -p --model x"
    assert (inbox.provider, inbox.model, inbox.weight) == ("inbox", "/tmp/box", 2.0)
    assert at.model == "echo user@host" and at.weight == 1.0  # an @ that is no weight belongs to the command
    assert cmd.price_in_per_mtok == cmd.price_out_per_mtok == 0.0
    with pytest.raises(ConfigError):
        parse_model_specs(["cmd:"])


def test_a_command_gets_the_prompt_on_stdin_and_its_stdout_is_the_reply(tmp_path: Path) -> None:
    command = responder(tmp_path, "print('max', os.environ['WARPFORGE_MAX_TOKENS'], 'saw', prompt.splitlines()[-1])")
    llm = client(f"cmd(scripted):{command}")
    llm.check()
    reply = llm.complete(MESSAGES, max_tokens=123)
    assert reply.text.strip() == "max 123 saw Make relu fast." and reply.model == "scripted"
    prompt = render_prompt(MESSAGES)
    assert prompt == "You write kernels.\n\nMake relu fast."
    assert reply.prompt_tokens == len(prompt) // 4 and reply.completion_tokens == len(reply.text) // 4  # estimated
    assert llm.usage["scripted"].calls == 1


def test_token_counts_a_tool_reports_in_json_are_used(tmp_path: Path) -> None:
    command = responder(tmp_path, "import json\nprint(json.dumps({'type': 'result', 'result': 'the kernel', "
                                  "'usage': {'input_tokens': 1000, 'output_tokens': 42}}))")
    reply = client(f"cmd:{command}").complete(MESSAGES)
    assert (reply.text, reply.prompt_tokens, reply.completion_tokens) == ("the kernel", 1000, 42)


def test_a_failing_command_is_retried_then_an_error_and_a_missing_one_is_not_retried(tmp_path: Path) -> None:
    count = tmp_path / "count"
    flaky = responder(tmp_path, f"p = {str(count)!r}\nn = int(open(p).read()) if os.path.exists(p) else 0\n"
                                "open(p, 'w').write(str(n + 1))\n"
                                "sys.exit(3) if n < 2 else print('third time')")
    llm = client(f"cmd:{flaky}", max_retries=3)
    assert llm.complete(MESSAGES).text.strip() == "third time"
    assert llm.usage[f"cmd:{flaky}"].retries == 2
    broken = client("cmd:exit 5", max_retries=1)
    with pytest.raises(LLMError, match="failed 2 times.*exited with 5"):
        broken.complete(MESSAGES)
    client(f"cmd:LANG=C {PY} -c pass").check()  # a variable set before the program is not the program
    missing = client("cmd:no-such-program-warpforge", max_retries=3)
    with pytest.raises(ConfigError, match="not a program on PATH"):
        missing.check()
    with pytest.raises(LLMError, match="command not found"):
        missing.complete(MESSAGES)
    assert missing.usage["cmd:no-such-program-warpforge"].retries == 0


def test_a_command_past_its_time_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"sleep 60 & echo $! > {shlex.quote(str(pid_file))}; wait"
    llm = client(f"cmd:{command}", timeout_s=1.0, max_retries=0)
    with pytest.raises(LLMError, match="no reply within 1 s"):
        llm.complete(MESSAGES)
    pid = int(pid_file.read_text())
    for _ in range(50):  # the kill is sent before complete() returns
        if not running(pid):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the command's child {pid} outlived the time-out")


def running(pid: int) -> bool:
    """Alive and not a zombie: a killed orphan stays a zombie until whoever adopted it reaps it,
    which some containers' init never does."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def answer_requests(box: Path, stop: threading.Event, reply: str) -> None:
    """A responder that answers every request file it finds (writing the reply in two steps)."""
    while not stop.is_set():
        for request in box.glob("*.request.md"):
            target = box / request.name.replace(".request.md", ".reply.md")
            if not target.exists():
                tmp = box / f".{target.name}.tmp"
                tmp.write_text(f"{reply} to: {request.read_text().splitlines()[-1]}")
                tmp.replace(target)
        time.sleep(0.05)


def test_the_inbox_writes_a_request_and_takes_the_reply_written_for_it(tmp_path: Path) -> None:
    box = tmp_path / "box"
    llm = client(f"inbox:{box}", timeout_s=30.0)
    llm.check()
    assert "reply.md" in (box / "README.md").read_text()
    stop = threading.Event()
    thread = threading.Thread(target=answer_requests, args=(box, stop, "answer"), daemon=True)
    thread.start()
    try:
        first = llm.complete(MESSAGES)
        second = llm.complete(MESSAGES)  # the same prompt again: a new request, not the old reply
    finally:
        stop.set()
        thread.join()
    assert first.text == second.text == "answer to: Make relu fast."
    answered = sorted(p.name for p in (box / "answered").iterdir())
    assert len([n for n in answered if n.endswith(".reply.md")]) == 2
    assert not list(box.glob("*.request.md"))  # both moved aside once answered
    request = json.loads((box / "answered" / answered[0].replace(".reply.md", ".request.json")).read_text())
    assert request["messages"] == MESSAGES and request["max_tokens"] == 8192


def test_after_a_kill_the_inbox_takes_a_reply_written_while_nobody_waited(tmp_path: Path) -> None:
    box = tmp_path / "box"
    key = hashlib.sha256(render_prompt(MESSAGES).encode()).hexdigest()[:12]
    box.mkdir()
    (box / f"{key}-0.request.md").write_text(render_prompt(MESSAGES))  # the request of the killed run ...
    (box / f"{key}-0.reply.md").write_text("answered later")  # ... and its reply, written after the kill
    assert client(f"inbox:{box}", timeout_s=30.0).complete(MESSAGES).text == "answered later"
    with pytest.raises(LLMError, match="no reply in"):  # nobody answers this one
        client(f"inbox:{box}", timeout_s=0.5, max_retries=0).complete([{"role": "user", "content": "other"}])


def test_the_loop_runs_with_a_command_as_its_model(tmp_path: Path) -> None:
    """warpforge's own strategies with `cmd:` as the model: the scripted command answers with a
    correct rewrite of level1/diag_matmul (and the reviewer's audit); the attempts carry its name."""
    from warpforge import EvalConfig, load_task
    from warpforge.archive import Archive
    from warpforge.search import Budget, OptimizeConfig, Optimizer

    replies = [json.loads(line) for line in (ROOT / "examples/replay/cpu_suite.jsonl").read_text().splitlines()]
    rewrite = next(r["reply"] for r in replies if "unsqueeze(1) * B" in r.get("reply", ""))
    (tmp_path / "rewrite.md").write_text(rewrite)
    command = responder(tmp_path, f"print('VERDICT: plausible' if 'Audit: is this speedup real' in prompt else "
                                  f"open({str(tmp_path / 'rewrite.md')!r}).read())")
    llm = LLMClient(parse_model_specs([f"cmd(scripted-agent):{command}"]))
    config = OptimizeConfig(strategy="evolve", generation_size=2, budget=Budget(candidates=2),
                            eval=EvalConfig.of(device="cpu", warmup_ms=5.0, rep_ms=20.0, min_reps=5, timing_bound=100.0))
    with Archive(tmp_path / "a.db") as archive:
        Optimizer(archive, llm, config).run([load_task("level1/diag_matmul")])
        attempts = archive.attempts(task="level1/diag_matmul")
    assert len(attempts) == 2 and {a.model for a in attempts} == {"scripted-agent"}
    assert any(a.status == "correct" for a in attempts), [a.failure or a.status for a in attempts]


def test_a_resumed_run_takes_the_outstanding_request_of_the_same_prompt_whatever_its_number(tmp_path: Path) -> None:
    """A generation asks the same prompt several times (key-0 ... key-3); a run killed with key-3
    unanswered and resumed asks it once: it must wait on key-3 (answered meanwhile or later), not
    write a new key-0 beside it. Two calls of one process never share a request."""
    box = tmp_path / "box"
    key = hashlib.sha256(render_prompt(MESSAGES).encode()).hexdigest()[:12]
    (box / "answered").mkdir(parents=True)
    for n in range(3):  # the killed run's first three asks were answered and moved aside
        (box / "answered" / f"{key}-{n}.request.md").write_text(render_prompt(MESSAGES))
    (box / f"{key}-3.request.md").write_text(render_prompt(MESSAGES))
    (box / f"{key}-3.reply.md").write_text("the reply to the fourth ask")
    llm = client(f"inbox:{box}", timeout_s=30.0)
    assert llm.complete(MESSAGES).text == "the reply to the fourth ask"
    assert not list(box.glob("*.request.md")) and (box / "answered" / f"{key}-3.reply.md").exists()
    # two asks at once with nothing outstanding: two requests, numbered apart, each answered
    stop = threading.Event()
    thread = threading.Thread(target=answer_requests, args=(box, stop, "answer"), daemon=True)
    thread.start()
    try:
        with ThreadPoolExecutor(2) as pool:
            texts = list(pool.map(lambda _: llm.complete(MESSAGES).text, range(2)))
    finally:
        stop.set()
        thread.join()
    assert texts == ["answer to: Make relu fast."] * 2
    assert len(list((box / "answered").glob(f"{key}-*.reply.md"))) == 3  # the fourth ask's, and two more
