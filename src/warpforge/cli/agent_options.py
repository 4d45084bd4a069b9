"""The options of `warpforge mcp` and `warpforge agent`, and the checks `mcp` makes before it serves:
where --http may listen, the bearer token, the task folders, the device and the agent's name.

Argument parsing only, and nothing here imports the MCP SDK: agent/server.py serves with what
`mcp_options` returns (and builds its own parser from `add_mcp_arguments` for `python -m
warpforge.agent.server`); cli/agent.py adds the verbs to warpforge's command line.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from warpforge.cli.archive import DEFAULT_ARCHIVE
from warpforge.cli.common import add_eval_options, config_from_args
from warpforge.config import EvalConfig
from warpforge.errors import UsageError

NO_MCP = "warpforge mcp needs the MCP SDK (mcp 2 or later): pip install 'warpforge[agent]'"
TOKEN_ENV = "WARPFORGE_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
"""A chosen token shorter than this is refused: the generated one (secrets.token_urlsafe(32)) has 43."""


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
    p.add_argument("--agent-name", help="recorded as the model of each attempt (default: $WARPFORGE_AGENT or agent)")
    add_executor_arguments(p)
    add_eval_options(p, device_help="default device for evaluations: $WARPFORGE_DEVICE, else cuda when a GPU is "
                                    "visible")


@dataclass(frozen=True)
class McpOptions:
    """`warpforge mcp`'s options once checked."""

    device: str | None
    """cpu, cuda, or None: CUDA when a GPU is visible."""
    http: tuple[str, int] | None
    """(host, port) to serve streamable HTTP on; None: stdio."""
    task_dirs: tuple[Path, ...]
    token: str
    """The bearer token HTTP requests must carry ("" over stdio)."""
    token_chosen: bool
    """Whether the operator chose the token ($WARPFORGE_MCP_TOKEN) or it was made up at start."""
    eval_config: EvalConfig
    """The evaluation settings (--config, WARPFORGE_<FIELD> and the evaluation flags)."""


def mcp_options(args: argparse.Namespace) -> McpOptions:
    """Check `warpforge mcp`'s options before anything starts; UsageError naming the first problem."""
    eval_config = config_from_args(args, check_device=False)
    device = eval_config.device
    http = parse_http(args.http) if args.http else None
    if http is not None:
        _check_remote(http, args.allow_remote)
        _check_port(*http)
    task_dirs = _task_dirs(args.task_dir)
    token, chosen = _token() if http is not None else ("", False)
    if device == "cuda":
        from warpforge.config import require_cuda

        require_cuda("the device is cuda", "pass --device cpu or unset WARPFORGE_DEVICE")
    return McpOptions(device, http, task_dirs, token, chosen, eval_config)


def parse_http(value: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT, :PORT or PORT; the host defaults to 127.0.0.1 (this machine only)."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--http {value!r}: give HOST:PORT or PORT, e.g. --http 127.0.0.1:8765")
    return host, int(port)


def device_from(flag: str | None) -> str | None:
    """--device, else $WARPFORGE_DEVICE, else None (CUDA when a GPU is visible)."""
    device = flag or os.environ.get("WARPFORGE_DEVICE") or None
    if device not in (None, "cpu", "cuda"):
        raise UsageError(f"WARPFORGE_DEVICE={device!r} is not cpu or cuda: set it to one of them, or unset it")
    return device


def agent_name(args: argparse.Namespace) -> str:
    return getattr(args, "agent_name", None) or os.environ.get("WARPFORGE_AGENT") or "agent"


def _check_remote(http: tuple[str, int], allowed: bool) -> None:
    """Only this machine may connect unless the operator says otherwise: a token can leak, a loopback bind cannot."""
    host = http[0]
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any address
        loopback = False
    if not loopback and not allowed:
        raise UsageError(f"--http {host}:{http[1]} accepts connections from other machines: pass --allow-remote as "
                         "well (clients still need the token), or listen on 127.0.0.1")


def _task_dirs(dirs: list[str]) -> tuple[Path, ...]:
    for d in dirs:
        if not Path(d).is_dir():
            raise UsageError(f"--task-dir {d} is not a folder: give a folder of task files")
    return tuple(Path(d) for d in dirs)


def _token() -> tuple[str, bool]:
    """The HTTP bearer token and whether the operator chose it ($WARPFORGE_MCP_TOKEN), else a new random one."""
    chosen = os.environ.get(TOKEN_ENV, "").strip()
    if chosen and len(chosen) < MIN_TOKEN_CHARS:
        raise UsageError(f"${TOKEN_ENV} is {len(chosen)} characters: use at least {MIN_TOKEN_CHARS}, such as the "
                         "output of: python -c 'import secrets; print(secrets.token_urlsafe())'")
    return (chosen, True) if chosen else (secrets.token_urlsafe(32), False)


def _check_port(host: str, port: int) -> None:
    """Fail now, with one sentence, rather than inside the HTTP server's start-up."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): pick another --http port "
                         "or host") from None
