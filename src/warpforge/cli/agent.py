"""`warpforge mcp` and `warpforge agent task|eval|profile|history|search|best|tasks`: argument parsing only.

`mcp` serves the agent tools (tools.py) over MCP (server.py, with the options and checks of
agent_options.py) to untrusted clients: task files only
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
import json
import sys
from pathlib import Path
from typing import Any

from warpforge.cli.agent_options import (NO_MCP, add_executor_arguments, add_mcp_arguments, agent_name, device_from,
                                         parse_http)
from warpforge.cli.archive import DEFAULT_ARCHIVE
from warpforge.cli.common import add_eval_options

__all__ = ["add_agent_parsers", "cmd_agent", "cmd_mcp", "parse_http"]


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
    add_eval_options(agent, device_help="default: $WARPFORGE_DEVICE, else cuda when a GPU is visible, else cpu")

    p = sub.add_parser("agent", help="the agent tools as commands that print one JSON object",
                       description="The tools `warpforge mcp` serves, as commands for agents that run shell commands.")
    verbs = p.add_subparsers(dest="agent_command", required=True)
    verbs.add_parser("tasks", parents=[archive], help="the suite's tasks and the archive's, with their best speedups")
    task = verbs.add_parser("task", parents=[archive, device], help="a task's reference, shapes, tolerance, baselines")
    task.add_argument("task", help="suite task name (level1/softmax) or task file")
    for verb, what in (("eval", "compile, verify and time a candidate; record it"),
                       ("profile", "which kernels a candidate ran, its compiler log and stage times")):
        v = verbs.add_parser(verb, parents=[archive, agent], help=what)
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


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        import mcp.server.mcpserver  # noqa: F401  (only to find out whether the SDK is there)
    except ImportError:
        print(f"warpforge: {NO_MCP}", file=sys.stderr)
        return 2
    from warpforge.agent.server import serve

    return serve(args)


def cmd_agent(args: argparse.Namespace) -> int:
    from warpforge.agent.tools import FAILURE_CODES, MAX_SOURCE_BYTES, AgentTools
    from warpforge.cli.common import config_from_args
    from warpforge.errors import UsageError

    verb = args.agent_command
    try:
        device = device_from(getattr(args, "device", None))
        # one evaluation per call: no spare candidate process is worth starting
        eval_config = config_from_args(args, check_device=False, spare_workers=0)
        source = _read(args.candidate, MAX_SOURCE_BYTES) if verb in ("eval", "profile") else ""
        analysis = _read(args.analysis_file, 64 << 10) if getattr(args, "analysis_file", None) else ""
    except UsageError as exc:
        print(f"warpforge: {exc}", file=sys.stderr)
        return 2
    with AgentTools(args.archive, device=device, agent_name=agent_name(args), interface="cli",
                    eval_config=eval_config, executor=getattr(args, "executor", None),
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

