"""`warpforge mcp` and `warpforge agent task|eval|profile|history|search|best|tasks`: argument parsing only.

`mcp` serves the agent tools (tools.py) over MCP (server.py) to untrusted clients: task files only
from --task-dir folders, and over HTTP a bearer token (from WARPFORGE_MCP_TOKEN, else made up and
printed at start) and loopback unless --allow-remote. `agent VERB` calls one tool (for the
operator: any task file) and prints its dict as one JSON object on stdout. Exit codes: 0
success; 1 a negative result (a candidate not correct, no verified kernel yet, the harness
failing); 2 a usage error, with one sentence on stderr. The device comes from --device, else
WARPFORGE_DEVICE, else CUDA when a GPU is visible; the agent's name from --agent-name, else
WARPFORGE_AGENT, else "agent".
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

from warpforge.cli.archive import DEFAULT_ARCHIVE

NO_MCP = "warpforge mcp needs the MCP SDK (mcp 2 or later): pip install 'warpforge[agent]'"
TOKEN_ENV = "WARPFORGE_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
"""A chosen token shorter than this is refused: the generated one (secrets.token_urlsafe(32)) has 43."""


def add_agent_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `mcp` and `agent` to warpforge's subcommands."""
    add_mcp_arguments(sub.add_parser(
        "mcp", help="serve the agent tools (task, evaluate, profile, history, search, best) over MCP",
        description="Serve warpforge's agent tools to a coding agent over the Model Context Protocol: stdio by "
                    "default, streamable HTTP with --http."))
    archive = argparse.ArgumentParser(add_help=False)
    archive.add_argument("--archive", default=DEFAULT_ARCHIVE, help=f"archive file (default: ./{DEFAULT_ARCHIVE})")
    device = argparse.ArgumentParser(add_help=False)
    device.add_argument("--device", choices=["cpu", "cuda"],
                        help="default: $WARPFORGE_DEVICE, else cuda when a GPU is visible, else cpu")
    agent = argparse.ArgumentParser(add_help=False)
    agent.add_argument("--agent-name", help="recorded as the model of each attempt (default: $WARPFORGE_AGENT or agent)")
    agent.add_argument("--analysis-file", help="a file with why this candidate should be faster (stored with it)")
    agent.add_argument("--parent", type=int, action="append", default=[], metavar="ATTEMPT_ID",
                       help="an attempt this candidate builds on (repeatable; stored as lineage)")
    add_executor_arguments(agent)
    from warpforge.cli.common import add_sandbox_option

    add_sandbox_option(agent)

    p = sub.add_parser("agent", help="the agent tools as commands that print one JSON object",
                       description="The tools `warpforge mcp` serves, as commands for agents that run shell commands.")
    verbs = p.add_subparsers(dest="agent_command", required=True)
    verbs.add_parser("tasks", parents=[archive], help="the suite's tasks and the archive's, with their best speedups")
    task = verbs.add_parser("task", parents=[archive, device], help="a task's reference, shapes, tolerance, baselines")
    task.add_argument("task", help="suite task name (level1/softmax) or task file")
    for verb, what in (("eval", "compile, verify and time a candidate; record it"),
                       ("profile", "which kernels a candidate ran, its compiler log and stage times")):
        v = verbs.add_parser(verb, parents=[archive, device, agent], help=what)
        v.add_argument("task", help="suite task name (level1/softmax) or task file")
        v.add_argument("candidate", help="candidate file defining class ModelNew")
    history = verbs.add_parser("history", parents=[archive], help="earlier scored attempts of a task, newest first")
    history.add_argument("task")
    history.add_argument("--limit", type=int, default=10, help="how many attempts (default 10, at most 100)")
    history.add_argument("--no-source", action="store_true", help="leave the sources out")
    search = verbs.add_parser("search", parents=[archive], help="best kernels of the most similar other tasks")
    search.add_argument("task")
    search.add_argument("-k", type=int, default=3, help="how many other tasks (default 3)")
    best = verbs.add_parser("best", parents=[archive], help="the fastest verified kernel of a task")
    best.add_argument("task")
    best.add_argument("--hardware-key", help="only timings from this machine")


def add_executor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", choices=["local", "ray"],
                   help="evaluate on executor workers: local (one per GPU) or ray (a cluster's GPUs); default: in this process")
    p.add_argument("--workers", type=int, help="executor workers (default: one per GPU)")
    p.add_argument("--ray-address", help="an existing Ray cluster (auto, ray://host:10001); default: start a local one")


def add_mcp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (PORT alone: on 127.0.0.1); "
                        f"clients send 'Authorization: Bearer TOKEN' (${TOKEN_ENV}, else a token printed at start)")
    p.add_argument("--allow-remote", action="store_true",
                   help="let --http listen on an address other machines can reach (the token is still required)")
    p.add_argument("--task-dir", action="append", default=[], metavar="DIR",
                   help="a folder whose task files clients may name (repeatable); without it, suite and archived "
                        "tasks only")
    p.add_argument("--archive", default=DEFAULT_ARCHIVE, help=f"archive file (default: ./{DEFAULT_ARCHIVE})")
    p.add_argument("--device", choices=["cpu", "cuda"],
                   help="default device for evaluations: $WARPFORGE_DEVICE, else cuda when a GPU is visible")
    p.add_argument("--agent-name", help="recorded as the model of each attempt (default: $WARPFORGE_AGENT or agent)")
    add_executor_arguments(p)
    from warpforge.cli.common import add_sandbox_option

    add_sandbox_option(p)


def parse_http(value: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT, :PORT or PORT; the host defaults to 127.0.0.1 (this machine only)."""
    from warpforge.errors import UsageError

    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--http {value!r}: give HOST:PORT or PORT, e.g. --http 127.0.0.1:8765")
    return host, int(port)


def _check_remote(http: tuple[str, int], allowed: bool) -> None:
    """Only this machine may connect unless the operator says otherwise: a token can leak, a loopback bind cannot."""
    from warpforge.errors import UsageError

    host = http[0]
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any address
        loopback = False
    if not loopback and not allowed:
        raise UsageError(f"--http {host}:{http[1]} accepts connections from other machines: pass --allow-remote as "
                         "well (clients still need the token), or listen on 127.0.0.1")


def _task_dirs(dirs: list[str]) -> tuple[Path, ...]:
    from warpforge.errors import UsageError

    for d in dirs:
        if not Path(d).is_dir():
            raise UsageError(f"--task-dir {d} is not a folder: give a folder of task files")
    return tuple(Path(d) for d in dirs)


def _token() -> tuple[str, bool]:
    """The HTTP bearer token and whether the operator chose it ($WARPFORGE_MCP_TOKEN), else a new random one."""
    from warpforge.errors import UsageError

    chosen = os.environ.get(TOKEN_ENV, "").strip()
    if chosen and len(chosen) < MIN_TOKEN_CHARS:
        raise UsageError(f"${TOKEN_ENV} is {len(chosen)} characters: use at least {MIN_TOKEN_CHARS}, such as the "
                         "output of: python -c 'import secrets; print(secrets.token_urlsafe())'")
    return (chosen, True) if chosen else (secrets.token_urlsafe(32), False)


def _check_port(host: str, port: int) -> None:
    """Fail now, with one sentence, rather than inside the HTTP server's start-up."""
    import socket

    from warpforge.errors import UsageError

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): pick another --http port "
                         "or host") from None


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        import mcp.server.mcpserver  # noqa: F401  (only to find out whether the SDK is there)
    except ImportError:
        print(f"warpforge: {NO_MCP}", file=sys.stderr)
        return 2
    from warpforge.agent.server import build_server
    from warpforge.agent.tools import AgentTools
    from warpforge.errors import UsageError

    try:
        device = _device(args.device)
        http = parse_http(args.http) if args.http else None
        if http is not None:
            _check_remote(http, args.allow_remote)
            _check_port(*http)
        task_dirs = _task_dirs(args.task_dir)
        token, chosen = _token() if http is not None else ("", False)
        if device == "cuda":
            from warpforge.config import require_cuda

            require_cuda("the device is cuda", "pass --device cpu or unset WARPFORGE_DEVICE")
    except UsageError as exc:
        print(f"warpforge: {exc}", file=sys.stderr)
        return 2
    from warpforge.cli.common import sandbox_from_args
    from warpforge.config import EvalConfig

    tools = AgentTools(args.archive, device=device, agent_name=_agent_name(args), interface="mcp",
                       eval_config=EvalConfig(sandbox=sandbox_from_args(args)), executor=args.executor, workers=args.workers, ray_address=args.ray_address,
                       task_dirs=task_dirs)
    server = build_server(tools)

    def stop(signum: int, frame: Any) -> None:
        # An exception raised here would wait for the SDK's thread blocked reading stdin; leave at once
        # instead, with the evaluators stopped and the run marked stopped. (Under --http, uvicorn takes
        # these signals while it serves and shuts down cleanly; the run is then marked done below.)
        tools.close("stopped")
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if http is None:
            server.run("stdio")  # returns when the client closes our stdin
        else:
            from warpforge.agent.server import serve_http

            shown = f"${TOKEN_ENV}" if chosen else f"{token} (new at each start; set {TOKEN_ENV} to choose one)"
            print(f"warpforge: serving MCP at http://{http[0]}:{http[1]}/mcp (archive {args.archive}); clients must send "
                  f"the header 'Authorization: Bearer TOKEN', TOKEN = {shown}", file=sys.stderr)
            serve_http(server, http[0], http[1], token)
    finally:
        tools.close()
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from warpforge.agent.tools import FAILURE_CODES, MAX_SOURCE_BYTES, AgentTools
    from warpforge.config import EvalConfig
    from warpforge.errors import UsageError

    from warpforge.cli.common import sandbox_from_args

    verb = args.agent_command
    try:
        device = _device(getattr(args, "device", None))
        source = _read(args.candidate, MAX_SOURCE_BYTES) if verb in ("eval", "profile") else ""
        analysis = _read(args.analysis_file, 64 << 10) if getattr(args, "analysis_file", None) else ""
    except UsageError as exc:
        print(f"warpforge: {exc}", file=sys.stderr)
        return 2
    # one evaluation per call: no spare candidate process is worth starting
    with AgentTools(args.archive, device=device, agent_name=_agent_name(args), interface="cli",
                    eval_config=EvalConfig(spare_workers=0, sandbox=sandbox_from_args(args)), executor=getattr(args, "executor", None),
                    workers=getattr(args, "workers", None), ray_address=getattr(args, "ray_address", None)) as tools:
        out: dict[str, Any] = {
            "tasks": lambda: tools.list_tasks(),
            "task": lambda: tools.get_task(args.task),
            "eval": lambda: tools.evaluate(args.task, source, analysis=analysis, parents=args.parent),
            "profile": lambda: tools.profile(args.task, source),
            "history": lambda: tools.history(args.task, args.limit, not args.no_source),
            "search": lambda: tools.search_archive(args.task, args.k),
            "best": lambda: tools.best(args.task, args.hardware_key),
        }[verb]()
    if "error" in out:
        print(f"warpforge: {out['error']['message']}", file=sys.stderr)
        return 1 if out["error"]["code"] in FAILURE_CODES else 2
    print(json.dumps(out))
    if verb in ("eval", "profile"):
        return 0 if out.get("correct") else 1
    if verb == "best":
        return 0 if out["found"] else 1
    return 0


def _device(flag: str | None) -> str | None:
    from warpforge.errors import UsageError

    device = flag or os.environ.get("WARPFORGE_DEVICE") or None
    if device not in (None, "cpu", "cuda"):
        raise UsageError(f"WARPFORGE_DEVICE={device!r} is not cpu or cuda: set it to one of them, or unset it")
    return device


def _agent_name(args: argparse.Namespace) -> str:
    return getattr(args, "agent_name", None) or os.environ.get("WARPFORGE_AGENT") or "agent"


def _read(path: str, limit: int) -> str:
    from warpforge.errors import UsageError

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path} is not a file: give the path of a .py file")
    if p.stat().st_size > limit:
        raise UsageError(f"{path} is {p.stat().st_size} bytes, over the {limit >> 10} KiB limit")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None

