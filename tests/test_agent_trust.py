"""Agent mode's trust boundary: MCP clients are untrusted (docs/agent.md).

Each test attacks one property: HTTP without the right bearer token gets 401 and runs nothing; a
non-loopback bind needs --allow-remote; a task path outside the operator's --task-dir folders is
refused with the same answer whether or not it exists; task code in the probe child sees no API
keys or tokens; error messages name no host path.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import wait_until_listening

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from warpforge.cli.agent import add_agent_parsers, cmd_mcp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK = (ROOT / "tests" / "fixtures" / "tasks" / "matmul.py").read_text()
HONEST = (ROOT / "examples" / "diag_matmul_broadcast.py").read_text()
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
EVALUATE = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "evaluate", "arguments": {"task": "level1/diag_matmul", "source": HONEST, "device": "cpu"}}}


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_agent_parsers(parser.add_subparsers(dest="command"))
    return parser.parse_args(list(argv))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(port: int, message: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    """POST one JSON-RPC message to /mcp: (status, response headers)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=json.dumps(message).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`warpforge mcp --http PORT` without $WARPFORGE_MCP_TOKEN: it makes up a token and prints it once."""
    archive = tmp_path_factory.mktemp("http") / "http.db"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "WARPFORGE_MCP_TOKEN"}
    server = subprocess.Popen([sys.executable, "-m", "warpforge.agent.server", "--http", str(port), "--archive",
                               str(archive), "--device", "cpu"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    try:
        banner = server.stderr.readline()
        assert "serving MCP" in banner, banner
        token = banner.split("TOKEN = ", 1)[1].split()[0] if "TOKEN = " in banner else ""
        wait_until_listening(server, port)
        yield port, token, archive
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_http_without_the_right_token_is_refused_and_runs_nothing(http_server: Any) -> None:
    port, token, archive = http_server
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {token}x"},
                    {"Authorization": token}, {"Authorization": f"Basic {token}"}):
        status, answer = post(port, INITIALIZE, headers)
        assert status == 401 and answer.get("www-authenticate") == "Bearer", headers
    # a session opened with the token is no key for a request without it
    status, answer = post(port, INITIALIZE, {"Authorization": f"Bearer {token}"})
    assert status == 200
    session = {"mcp-session-id": answer["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        assert post(port, EVALUATE, {**session, **headers})[0] == 401
    assert not archive.exists()  # no evaluation started, nothing recorded


def test_http_with_the_printed_token_serves_the_tools(http_server: Any) -> None:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    port, token, _ = http_server
    assert len(token) >= 32  # secrets.token_urlsafe(32)

    async def drive() -> Any:
        client = create_mcp_http_client({"Authorization": f"Bearer {token}"})
        async with client, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (r, w), \
                ClientSession(r, w) as session:
            await session.initialize()
            return (await session.call_tool("best", {"task": "level1/relu"})).structured_content

    assert anyio.run(drive) == {"task": "level1/relu", "hardware_key": None, "found": False, "best": None}


def test_http_on_a_reachable_address_needs_allow_remote(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import signal

    from mcp.server.mcpserver import MCPServer

    import warpforge.agent.server as server

    served: list[tuple[str, int, str]] = []

    def refuse_to_serve(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the server started serving")

    monkeypatch.setattr(MCPServer, "run", refuse_to_serve)
    monkeypatch.setattr(server, "serve_http", lambda _, host, port, token: served.append((host, port, token)),
                        raising=False)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # cmd_mcp's handlers stay out of pytest's process
    monkeypatch.delenv("WARPFORGE_MCP_TOKEN", raising=False)
    port = free_port()
    assert cmd_mcp(parse("mcp", "--http", f"0.0.0.0:{port}", "--device", "cpu")) == 2
    assert "--allow-remote" in capsys.readouterr().err and not served
    assert cmd_mcp(parse("mcp", "--http", f"0.0.0.0:{port}", "--allow-remote", "--device", "cpu")) == 0
    assert len(served) == 1 and served[0][:2] == ("0.0.0.0", port) and len(served[0][2]) >= 32  # still a token
    assert served[0][2] in capsys.readouterr().err  # printed once, for the operator
    monkeypatch.setenv("WARPFORGE_MCP_TOKEN", "short")
    assert cmd_mcp(parse("mcp", "--http", str(port), "--device", "cpu")) == 2  # a guessable token is refused


async def _refusals(archive: Path, allowed: Path, names: dict[str, str]) -> dict[str, Any]:
    """Over stdio, `history` and `evaluate` of each name (history only of "allowed"); (is_error, content) per
    (key, tool)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "warpforge.agent.server", "--archive", str(archive), "--device", "cpu",
                                      "--task-dir", str(allowed)],
        env={"PYTHONPATH": str(ROOT / "src")}, cwd=str(ROOT))
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write, read_timeout_seconds=120) as session:
        await session.initialize()
        for key, name in names.items():
            for tool, arguments in (("history", {"task": name}), ("evaluate", {"task": name, "source": HONEST})):
                if key == "allowed" and tool == "evaluate":
                    continue  # it would evaluate (and create the archive); history shows the file is allowed
                result = await session.call_tool(tool, arguments)
                out[key, tool] = (result.is_error, result.structured_content)
    return out


def test_task_paths_outside_the_allowed_folders_are_refused_alike_whether_or_not_they_exist(tmp_path: Path) -> None:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "task.py").write_text(TASK)
    (outside / "task.py").write_text(TASK)  # a valid task, just not in an allowed folder
    (allowed / "linked.py").symlink_to(outside / "task.py")  # a link out of the folder is outside it
    names = {"allowed": str(allowed / "task.py"), "exists": str(outside / "task.py"),
             "missing": str(tmp_path / "missing" / "task.py"), "traversal": f"{allowed}/../outside/task.py",
             "suite_prefix": f"level1/../../../../../../..{outside}/task.py", "link": str(allowed / "linked.py"),
             "not_a_task": str(tmp_path / "passwd")}
    (tmp_path / "passwd").write_text("root:x:0:0\n")
    out = anyio.run(_refusals, tmp_path / "trust.db", allowed, names)

    is_error, history = out["allowed", "history"]
    assert not is_error and history["task"] == "task"
    for tool in ("history", "evaluate"):
        refusals = {key: out[key, tool] for key in names if key != "allowed"}
        assert all(is_error and set(payload) == {"error"} for is_error, payload in refusals.values()), refusals
        assert {payload["error"]["code"] for _, payload in refusals.values()} == {"unknown_task"}
        same_name = {refusals[key][1]["error"]["message"] for key in ("exists", "missing", "traversal", "suite_prefix")}
        assert len(same_name) == 1, same_name  # nothing tells an existing file from a missing one
        for _, payload in refusals.values():
            assert str(tmp_path) not in payload["error"]["message"]  # no host path in an error
    assert not (tmp_path / "trust.db").exists()  # every refused evaluate was refused before anything was recorded


def test_task_code_in_the_probe_sees_no_keys_or_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from warpforge.agent.probe import probe
    from warpforge.errors import TaskError
    from warpforge.task import load_task

    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-secret")
    monkeypatch.setenv("WARPFORGE_MCP_TOKEN", "mcp-server-secret")
    spy = tmp_path / "spy.py"
    spy.write_text("import os\n" + TASK + "\nraise RuntimeError('seen: ' + ' '.join("
                   "os.environ.get(k, 'absent') for k in ('OPENAI_API_KEY', 'WARPFORGE_MCP_TOKEN')))\n")
    with pytest.raises(TaskError) as raised:
        probe(load_task(spy), "cpu", "cpu")
    assert "seen: absent absent" in str(raised.value)


def test_error_messages_name_no_host_path() -> None:
    from warpforge.agent.server import _result
    from warpforge.agent.tools import error

    result = _result(error("bad_task", "task /home/someone/tasks/t.py has a syntax error at line 3: invalid syntax"))
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["error"]["message"] == "task t.py has a syntax error at line 3: invalid syntax"
    assert "/home" not in result.content[0].text


def test_an_mcp_server_is_built_only_over_confined_tools(tmp_path: Path) -> None:
    from warpforge.agent.server import build_server
    from warpforge.agent.tools import AgentTools
    from warpforge.errors import ConfigError

    with AgentTools(tmp_path / "x.db") as open_tools, pytest.raises(ConfigError, match="untrusted"):
        build_server(open_tools)  # any task file: for the operator's own CLI verbs and code only


def test_a_task_only_the_archive_holds_is_served_by_name(tmp_path: Path) -> None:
    from warpforge.agent.tools import AgentTools
    from warpforge.archive import Archive
    from warpforge.task import load_task

    elsewhere = tmp_path / "elsewhere" / "matmul.py"  # a task file an imported archive once named
    elsewhere.parent.mkdir()
    elsewhere.write_text(TASK)
    with Archive(tmp_path / "a.db") as archive:
        archive.add_task(load_task(elsewhere))
    with AgentTools(tmp_path / "a.db", device="cpu", task_dirs=()) as tools:
        described = tools.get_task("matmul")
        refused = tools.get_task(str(elsewhere))
    assert described["task"] == "matmul" and described["inputs"] == [{"shape": [64, 96], "dtype": "float32"},
                                                                      {"shape": [96, 48], "dtype": "float32"}]
    assert refused["error"]["code"] == "unknown_task"
