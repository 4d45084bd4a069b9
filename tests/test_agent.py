"""Agent mode: an MCP client drives `python -m warpforge.agent.server` over stdio, and the CLI verbs.

One MCP session (a module fixture) evaluates honest, cheating and failing candidates on two small
CPU tasks and makes every bad request once; the tests then check what came back and what the
archive recorded. A bad request is a structured error, a failing candidate is a verdict, and the
server answers every call after both.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import wait_until_listening

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from warpforge.cli.agent import add_agent_parsers, cmd_agent, cmd_mcp, parse_http  # noqa: E402
from warpforge.archive import Archive  # noqa: E402
from warpforge.errors import UsageError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
HONEST = (ROOT / "examples" / "diag_matmul_broadcast.py").read_text()
AGENT = "test-agent"
# these tests are about the agent interface, not timing precision: short timing budgets and the
# fewest paired rounds (the defaults: 25 ms of warm-up and 100 ms of repetitions per timing run, 5 rounds)
FAST_TIMING = ["--warmup-ms", "5", "--rep-ms", "20", "--paired-rounds", "2"]
TOOLS = {"list_tasks", "get_task", "evaluate", "profile", "history", "search_archive", "best"}


def fixture(name: str) -> str:
    return (FIXTURES / "candidates" / f"{name}.py").read_text()


async def _drive(archive: Path) -> dict[str, Any]:
    """One agent session; every answer is kept as (is_error, structured content)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "warpforge.agent.server", "--archive", str(archive), "--device", "cpu",
                                      "--task-dir", str(FIXTURES / "tasks"), *FAST_TIMING],
        env={"WARPFORGE_AGENT": AGENT, "PYTHONPATH": str(ROOT / "src")}, cwd=str(ROOT))
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write, read_timeout_seconds=240) as session:
        await session.initialize()
        out["tools"] = {t.name: t for t in (await session.list_tools()).tools}

        async def call(key: str, tool: str, **arguments: Any) -> None:
            result = await session.call_tool(tool, arguments)
            assert result.content and result.content[0].type == "text"
            assert json.loads(result.content[0].text) == result.structured_content  # text clients see the same
            out[key] = (result.is_error, result.structured_content)

        diag, matmul = "level1/diag_matmul", str(FIXTURES / "tasks" / "matmul.py")
        await call("list_tasks", "list_tasks")
        await call("task_before", "get_task", task=diag)
        await call("honest", "evaluate", task=diag, source=HONEST)
        await call("cheat", "evaluate", task=diag, source=fixture("patch_timer"))
        await call("raises", "evaluate", task=diag, source=fixture("raises_exception"))
        await call("unknown_task", "evaluate", task="level1/no_such_task", source=HONEST)
        await call("empty_source", "evaluate", task=diag, source="  \n")
        await call("oversized_source", "evaluate", task=diag, source="#" * (1 << 20) + "\n" + HONEST)
        await call("unknown_device", "evaluate", task=diag, source=HONEST, device="tpu")
        await call("bad_limit", "history", task=diag, limit=0)
        await call("unknown_parent", "evaluate", task=diag, source=HONEST, parents=[999])
        await call("child", "evaluate", task=diag, source=HONEST + "# v2\n", analysis="one broadcast multiply",
                   parents=[out["honest"][1]["attempt_id"]])
        await call("profile", "profile", task=diag, source=HONEST)
        await call("task_after", "get_task", task=diag)
        await call("other_task", "evaluate", task=matmul, source=fixture("honest_matmul"))
        await call("search", "search_archive", task=diag, k=3)
        await call("history", "history", task=diag, limit=10)
        await call("best", "best", task=diag)
        await call("best_none", "best", task="level1/relu")
    return out


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    archive = tmp_path_factory.mktemp("agent") / "agent.db"
    return archive, anyio.run(_drive, archive)


def ok(session: tuple[Path, dict[str, Any]], key: str) -> dict[str, Any]:
    is_error, payload = session[1][key]
    assert not is_error, payload
    return payload


def timed(verdict: dict[str, Any]) -> bool:
    """Whether the verdict has a speedup. A correct, timed result always keeps its point estimate and
    interval (claim.py), however busy the machine: only the claim's words change with the load."""
    timed = verdict["claim"]["verdict"] != "not_timed"
    assert timed == (verdict["speedup"] is not None), verdict
    return bool(timed)


def claimed(session: tuple[Path, dict[str, Any]]) -> set[int]:
    """The attempt ids of the honest kernels (honest, child) that claim a speedup."""
    return {ok(session, key)["attempt_id"] for key in ("honest", "child") if timed(ok(session, key))}


def test_the_server_lists_every_tool_with_a_description_for_an_agent(session: tuple[Path, dict[str, Any]]) -> None:
    tools = session[1]["tools"]
    assert set(tools) == TOOLS
    assert all(len(t.description) > 200 for t in tools.values())
    assert {"task", "source"} <= set(tools["evaluate"].input_schema["required"])
    assert tools["history"].annotations.read_only_hint and not tools["evaluate"].annotations.read_only_hint
    names = [t["name"] for t in ok(session, "list_tasks")["tasks"]]
    assert "level1/diag_matmul" in names and len(names) >= 30


def test_get_task_gives_the_reference_shapes_tolerance_and_then_baselines(session: tuple[Path, dict[str, Any]]) -> None:
    task = ok(session, "task_before")
    assert "class Model" in task["source"] and task["size_preset"] == "cpu"
    assert task["inputs"] == [{"shape": [512], "dtype": "float32"}, {"shape": [512, 512], "dtype": "float32"}]
    assert task["outputs"] == [{"shape": [512, 512], "dtype": "float32"}]
    assert task["tolerance"]["outputs"][0]["rel_l2"] == pytest.approx(3e-5)
    assert task["roofline"]["flops"] == 512 * 512 and task["hardware"]["device"] == "cpu"
    assert task["baselines"] is None and task["best"] is None  # nothing measured yet
    assert "ModelNew" in task["candidate_rules"]["contract"] and "torch" in task["candidate_rules"]["allowed_imports"]
    after = ok(session, "task_after")
    assert after["baselines"]["eager_ms"] > 0
    assert claimed(session) and after["best"]["attempt_id"] in claimed(session)


def test_an_honest_candidate_is_verified_timed_and_recorded(session: tuple[Path, dict[str, Any]]) -> None:
    verdict = ok(session, "honest")
    assert verdict["status"] == "correct" and verdict["correct"], verdict["reason"]
    assert verdict["kernels"]["kind"] == "pytorch_rewrite"
    assert timed(verdict) and verdict["speedup"] > 1  # ~40x: the point estimate is above 1 under any load
    assert isinstance(verdict["attempt_id"], int) and len(verdict["candidate_id"]) == 16
    assert "samples_ms" not in verdict["timing"]["candidate"]


def test_a_cheating_or_failing_candidate_is_a_verdict_not_an_error(session: tuple[Path, dict[str, Any]]) -> None:
    cheat = ok(session, "cheat")
    assert cheat["status"] == "rejected" and "time" in cheat["reason"]
    raises = ok(session, "raises")
    assert raises["status"] == "runtime_error" and "illegal memory access" in raises["reason"]
    assert ok(session, "child")["status"] == "correct"  # the server goes on after both


@pytest.mark.parametrize("key, code", [("unknown_task", "unknown_task"), ("empty_source", "empty_source"),
                                       ("oversized_source", "source_too_large"), ("unknown_device", "unknown_device"),
                                       ("bad_limit", "bad_argument"), ("unknown_parent", "bad_argument")])
def test_bad_requests_are_structured_errors(session: tuple[Path, dict[str, Any]], key: str, code: str) -> None:
    is_error, payload = session[1][key]
    assert is_error and set(payload) == {"error"}
    assert payload["error"]["code"] == code
    message = payload["error"]["message"]
    assert message and "\n" not in message and "Traceback" not in message


def test_profile_reuses_the_sessions_evaluation(session: tuple[Path, dict[str, Any]]) -> None:
    profile = ok(session, "profile")
    assert profile["reused_evaluation"] and profile["attempt_id"] == ok(session, "honest")["attempt_id"]
    assert profile["kernels"]["kind"] == "pytorch_rewrite" and "candidate_process" in profile["stage_seconds"]
    assert profile["nsight_compute"]["used"] is False


def test_history_best_and_search_read_the_archive(session: tuple[Path, dict[str, Any]]) -> None:
    history = ok(session, "history")
    ids = [a["attempt_id"] for a in history["attempts"]]
    assert ids == sorted(ids, reverse=True) and len(ids) == 4  # honest, cheat, raises, child; newest first
    child = history["attempts"][0]
    assert child["analysis"] == "one broadcast multiply" and child["parents"] == [ok(session, "honest")["attempt_id"]]
    assert {a["status"] for a in history["attempts"]} == {"correct", "rejected", "runtime_error"}
    assert all(a["source"] and a["reason"] for a in history["attempts"])
    best = ok(session, "best")
    assert best["found"] and best["best"]["status"] == "correct" and "ModelNew" in best["best"]["source"]
    assert best["best"]["attempt_id"] in claimed(session) == {a["attempt_id"] for a in history["attempts"]
                                                               if a["status"] == "correct"}
    assert best["best"]["speedup"] == history["best"]["speedup"] and best["best"]["claim"] == history["best"]["claim"]
    none = ok(session, "best_none")
    assert none["found"] is False and none["best"] is None
    stones = ok(session, "search")["stepping_stones"]
    assert [s["task"] for s in stones] == ["matmul"]  # the only OTHER task with a verified kernel
    assert stones[0]["status"] == "correct" and stones[0]["source"] == fixture("honest_matmul")


def test_the_archive_holds_one_agent_run_with_every_attempt(session: tuple[Path, dict[str, Any]]) -> None:
    archive_path, out = session
    with Archive(archive_path, read_only=True) as archive:
        runs = archive.runs()
        assert len(runs) == 1 and runs[0].status == "done"  # closed when the client went away
        assert json.loads(runs[0].config)["mode"] == "agent"
        attempts = archive.attempts()
        assert {(a.strategy, a.model) for a in attempts} == {("agent", AGENT)}
        assert [a.step for a in attempts if a.task == "level1/diag_matmul"] == [0, 1, 2, 3]
        assert [a.step for a in attempts if a.task == "matmul"] == [0]
        assert all(a.evaluation_id is not None for a in attempts)
        assert archive.attempt(ok(session, "other_task")["attempt_id"]).correct


# -- the CLI verbs -------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="warpforge")
    add_agent_parsers(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def run_agent(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = cmd_agent(parse("agent", *argv))
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else None, captured.err


def test_cli_verbs_print_one_json_object_and_use_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, task = str(tmp_path / "cli.db"), str(FIXTURES / "tasks" / "matmul.py")
    why = tmp_path / "why.txt"
    why.write_text("a single matmul")
    code, out, err = run_agent(capsys, "eval", task, str(FIXTURES / "candidates" / "honest_matmul.py"), "--archive", db,
                               "--device", "cpu", "--agent-name", "cli-agent", "--analysis-file", str(why), *FAST_TIMING)
    assert code == 0 and out["correct"] and not err
    first = out["attempt_id"]
    code, out, _ = run_agent(capsys, "eval", task, str(FIXTURES / "candidates" / "wrong_shape.py"), "--archive", db,
                             "--device", "cpu", "--parent", str(first), *FAST_TIMING)
    assert code == 1 and out["status"] == "incorrect"  # a negative result
    code, out, _ = run_agent(capsys, "history", "matmul", "--archive", db, "--no-source")
    assert code == 0 and [a["attempt_id"] for a in out["attempts"]] == [first + 1, first]
    assert "source" not in out["attempts"][0] and out["attempts"][0]["parents"] == [first]
    code, out, _ = run_agent(capsys, "best", "matmul", "--archive", db)
    assert code == 0 and out["best"]["attempt_id"] == first and out["best"]["analysis"] == "a single matmul"
    assert out["best"]["model"] == "cli-agent"
    code, out, _ = run_agent(capsys, "best", "level1/relu", "--archive", db)
    assert code == 1 and out["found"] is False
    code, out, _ = run_agent(capsys, "search", "level1/gemm", "--archive", db, "-k", "2")
    assert code == 0 and [s["task"] for s in out["stepping_stones"]] == ["matmul"]
    code, out, _ = run_agent(capsys, "task", "level1/diag_matmul", "--archive", db, "--device", "cpu")
    assert code == 0 and out["inputs"][1]["shape"] == [512, 512] and out["baselines"] is None
    code, out, _ = run_agent(capsys, "tasks", "--archive", db)
    assert code == 0 and {"level1/softmax", "matmul"} <= {t["name"] for t in out["tasks"]}
    with Archive(db, read_only=True) as archive:
        assert len(archive.runs()) == 2 and all(r.status == "done" for r in archive.runs())  # one run per call


def test_cli_usage_errors_are_one_sentence_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "cli.db")
    candidate = str(FIXTURES / "candidates" / "honest_matmul.py")
    for argv in (["eval", "level1/no_such_task", candidate], ["eval", "level1/relu", str(tmp_path / "missing.py")],
                 ["history", "level1/no_such_task"], ["search", "level1/relu", "-k", "0"]):
        code, out, err = run_agent(capsys, *argv, "--archive", db)
        assert code == 2 and out is None, argv
        assert err.startswith("warpforge: ") and err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.setenv("WARPFORGE_DEVICE", "tpu")
    code, out, err = run_agent(capsys, "task", "level1/relu", "--archive", db)
    assert code == 2 and "WARPFORGE_DEVICE" in err
    assert not Path(db).exists()  # nothing was recorded, so no archive was created


def test_mcp_without_the_sdk_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # makes the import fail
    assert cmd_mcp(parse("mcp")) == 2
    err = capsys.readouterr().err
    assert "pip install 'warpforge[agent]'" in err and err.count("\n") == 1


def test_http_addresses_bind_to_this_machine_unless_a_host_is_named() -> None:
    assert parse_http("8765") == ("127.0.0.1", 8765)
    assert parse_http(":8765") == ("127.0.0.1", 8765)
    assert parse_http("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_http("[::1]:9000") == ("::1", 9000)
    for bad in ("localhost", "host:port", "1:70000"):
        with pytest.raises(UsageError):
            parse_http(bad)
    assert cmd_mcp(parse("mcp", "--http", "localhost:x")) == 2
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert cmd_mcp(parse("mcp", "--http", str(busy.getsockname()[1]))) == 2  # before any server starts


def test_a_server_stopped_by_a_signal_exits_at_once_and_marks_its_run_stopped(tmp_path: Path) -> None:
    archive = tmp_path / "signal.db"
    server = subprocess.Popen([sys.executable, "-m", "warpforge.agent.server", "--archive", str(archive), "--device",
                               "cpu", *FAST_TIMING], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    for message in ({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                                  "clientInfo": {"name": "test", "version": "1"}}},
                    {"method": "notifications/initialized"},
                    {"id": 2, "method": "tools/call", "params": {"name": "evaluate", "arguments": {
                        "task": "level1/diag_matmul", "source": HONEST}}}):
        server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        server.stdin.flush()
        if "id" in message:
            assert json.loads(server.stdout.readline())["id"] == message["id"]
    server.terminate()  # SIGTERM while its stdin is still open: the SDK's reader thread is blocked on it
    assert server.wait(timeout=120) == 128 + 15  # a hang guard, not a speed claim: the exit status is the point
    with Archive(archive, read_only=True) as records:
        assert [r.status for r in records.runs()] == ["stopped"] and records.attempts()[0].correct


def test_evaluations_report_progress_while_they_run() -> None:
    from warpforge.agent.server import with_progress

    class Context:  # what with_progress uses of the SDK's Context
        reports: list[tuple[float, str]] = []

        async def report_progress(self, progress: float, total: float | None = None, message: str = "") -> None:
            self.reports.append((progress, message))

    ctx = Context()
    assert anyio.run(with_progress, ctx, lambda: time.sleep(0.5) or {"status": "correct"}, 0.1) == {"status": "correct"}
    assert len(ctx.reports) >= 3 and ctx.reports[0][0] > 0 and "evaluating" in ctx.reports[0][1]
    count = len(ctx.reports)
    time.sleep(0.3)
    assert len(ctx.reports) == count  # the beat stops with the work


def test_the_http_transport_serves_the_same_tools(tmp_path: Path) -> None:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "warpforge.agent.server", "--http", str(port), "--archive",
                               str(tmp_path / "http.db"), "--device", "cpu"], cwd=ROOT, stderr=subprocess.PIPE,
                              env={**os.environ, "WARPFORGE_MCP_TOKEN": "a-test-token-of-enough-length"})
    try:
        wait_until_listening(server, port)

        async def drive() -> tuple[set[str], Any]:
            client = create_mcp_http_client({"Authorization": "Bearer a-test-token-of-enough-length"})
            async with client, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                names = {t.name for t in (await session.list_tools()).tools}
                result = await session.call_tool("best", {"task": "level1/relu"})
                return names, result.structured_content

        names, best = anyio.run(drive)
        assert names == TOOLS and best["found"] is False
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert not (tmp_path / "http.db").exists()  # reading an absent archive does not create one


@pytest.mark.slow
def test_evaluations_on_an_executor_give_the_same_verdicts_and_records(tmp_path: Path) -> None:
    from warpforge.agent.tools import AgentTools

    diag, matmul = "level1/diag_matmul", str(FIXTURES / "tasks" / "matmul.py")
    with AgentTools(tmp_path / "pool.db", device="cpu", agent_name="pooled", executor="local") as tools:
        honest = tools.evaluate(diag, HONEST)
        cheat = tools.evaluate(diag, fixture("patch_timer"))
        other = tools.evaluate(matmul, fixture("honest_matmul"))  # a task file, not a suite name
        from warpforge.executor.evaluators import PoolEvaluator

        assert isinstance(tools._evaluators["cpu"], PoolEvaluator)  # the workers evaluated, not a Judge here
    assert (honest["status"], honest["correct"], cheat["status"], other["correct"]) == ("correct", True, "rejected", True)
    assert timed(honest) and honest["speedup"] > 0 and honest["kernels"]["kind"] == "pytorch_rewrite"
    with Archive(tmp_path / "pool.db", read_only=True) as archive:
        rows = archive.attempts()
        assert [(a.model, a.status) for a in rows] == [("pooled", "correct"), ("pooled", "rejected"), ("pooled", "correct")]
    with pytest.raises(Exception, match="executor must be local or ray"):
        AgentTools(tmp_path / "x.db", executor="slurm")
