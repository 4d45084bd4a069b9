"""`warpforge mcp`: the agent tools served over the Model Context Protocol (the official `mcp` SDK).

stdio by default (the agent's client starts this process and talks over its stdin/stdout);
`--http HOST:PORT` serves streamable HTTP at /mcp instead, every request checked for a bearer
token first (`serve_http`). Each tool is a thin wrapper over `AgentTools` (tools.py): its dict goes
back as structured content and as JSON text, flagged as an error when it is {"error": ...}, whose
message names no host path (requests are untrusted). This module holds the descriptions an agent
reads; it evaluates nothing itself. `serve` is `warpforge mcp` once the SDK is found, its options
checked by cli/agent_options.py. Run it as
`python -m warpforge.agent.server [--archive PATH] [--device cpu|cuda] [--http HOST:PORT]` too.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from warpforge.agent.tools import AgentTools
from warpforge.cli.agent_options import TOKEN_ENV, add_mcp_arguments, agent_name, mcp_options
from warpforge.cli.common import config_from_args
from warpforge.errors import ConfigError, UsageError

INSTRUCTIONS = """\
warpforge verifies and times GPU kernels (KernelBench format) honestly and keeps every attempt in an archive.
Workflow: list_tasks -> get_task (the PyTorch reference, shapes, tolerance, baselines) -> write a candidate
(a Python file defining class ModelNew(nn.Module), same constructor and forward as Model) -> evaluate ->
read status, reason, speedup, compile_log -> history / search_archive for what worked before -> iterate ->
best. Only status "correct" counts; speedup > 1 means faster than eager PyTorch. Every evaluation is recorded
in the archive under this server's agent name; evaluations run one at a time, and the first one of a task takes
longer (its reference process starts)."""

PROGRESS_EVERY_S = 5.0
"""Progress notifications while an evaluation runs (a cold CUDA build takes a minute): clients that
reset their request timeout on progress then wait for it instead of giving up after 60 s."""

TASK = Annotated[str, Field(description="a suite task name such as level1/softmax (see list_tasks), a task recorded in "
                                          "the archive, or the path of a task file in a folder this server allows")]
SOURCE = Annotated[str, Field(description="the full Python source of the candidate file, defining class ModelNew")]
DEVICE = Annotated[str | None, Field(description="cpu or cuda; default: the server's device (cuda when a GPU is visible)")]

DESCRIPTIONS = {
    "list_tasks": """List the tasks warpforge can evaluate: the built-in suite (KernelBench format, levels 1-3)
and any task already recorded in the archive. Returns {"tasks": [{name, description, level, attempts, correct,
best_speedup}]}. Pick a task, then call get_task.""",
    "get_task": """Everything needed to write a candidate for one task: the PyTorch reference source (class Model,
get_inputs, get_init_inputs), the input and output shapes and dtypes at the size the evaluator uses on this
device, the correctness tolerance per output and how it is applied, the hardware, the speed-of-light (roofline)
estimate when the task declares its FLOPs and bytes, eager / torch.compile baseline timings measured earlier on
this machine (null before the task's first evaluation), the best kernel so far, and the rules a candidate must
follow (allowed imports, what is refused). Call it once per task before writing code.""",
    "evaluate": """Compile, verify and time one candidate against a task in a sandboxed process, and record it in
the archive (strategy "agent"). `source` is the whole candidate file: class ModelNew(nn.Module) with the same
__init__ and forward signature as the task's Model; it may build CUDA (load_inline), Triton, C++ or PyTorch code.
Returns the verdict: status (correct | incorrect | compile_error | runtime_error | timeout | crashed | rejected),
reason (one sentence: read it), stage, max_abs_err / rel_l2_err against `tolerance`, speedup over eager PyTorch
(> 1 is faster) with candidate_ms / reference_ms (median), speedup_vs_compile, kernels (kind: custom_kernel or
pytorch_rewrite), compile_log (the first compiler errors: fix those), output_tail, roofline, hardware and
attempt_id (this attempt in the archive). Only "correct" counts; "rejected" means the evaluator caught an exploit
(timer or harness tampering, cached results, hidden work): do not try. Optional: `analysis`, why you expect this
version to be faster (stored with it); `parents`, the attempt_ids it builds on (stored as lineage).
The first evaluation of a task starts its reference process; later ones reuse it and are faster.""",
    "profile": """What ran and where the time went for a candidate: which kernels launched (custom, library,
PyTorch, with the custom kernels' share of GPU time), the compiler log summary, per-stage seconds, timings and
the roofline fraction. Reuses this session's evaluation of the same source when there is one; otherwise it
evaluates the source first (recorded like evaluate). Nsight Compute is not run (the answer says whether it is
installed). Use it to confirm that your own kernel, not a PyTorch or cuBLAS fallback, did the work.""",
    "history": """Earlier scored attempts for a task from the archive (yours, other agents' and LLM runs'),
newest first: attempt_id, status, speedup, candidate_ms, reason, compile_log, analysis, model, and the source
(include_source=false to leave sources out), plus the best so far. Use it for contrastive reflection before
writing the next version: compare the fastest correct sources with slower ones, write down why the faster ones
are faster, avoid the mistakes in the reasons of failed ones, then change one thing at a time.""",
    "search_archive": """Stepping stones: the best verified kernels of the k most similar OTHER tasks in the
archive (similar = their reference programs use the same operations), with their source, speedup, language and
similarity. Borrow their techniques (tiling, fusion, vectorised loads, algebraic rewrites) for this task. Empty
when the archive holds no verified kernel of another task.""",
    "best": """The fastest verified kernel for a task in the archive, with its source, speedup, timings, language,
model and hardware_key; found=false when none is verified yet. hardware_key (from an evaluation's attempt or
get_task) restricts it to timings from one machine: speedups from different machines are not comparable.""",
}


def build_server(tools: AgentTools) -> MCPServer[Any]:
    """An MCP server whose tools call `tools`; the caller runs it and closes `tools` afterwards.
    Its clients are untrusted, so `tools` must confine task files to its `task_dirs`."""
    if tools.task_dirs is None:
        raise ConfigError("MCP requests are untrusted: give AgentTools task_dirs (the folders whose task files they "
                          "may name; () for suite and archived tasks only)")
    server: MCPServer[Any] = MCPServer("warpforge", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)

    def list_tasks() -> CallToolResult:
        return _result(tools.list_tasks())

    def get_task(task: TASK, device: DEVICE = None) -> CallToolResult:
        return _result(tools.get_task(task, device))

    async def evaluate(ctx: Context, task: TASK, source: SOURCE, device: DEVICE = None,
                       analysis: Annotated[str, Field(description="optional: why this version should be faster")] = "",
                       parents: Annotated[list[int] | None, Field(description="optional: attempt_ids it builds on")]
                       = None) -> CallToolResult:
        return _result(await with_progress(ctx, lambda: tools.evaluate(task, source, device, analysis, parents)))

    async def profile(ctx: Context, task: TASK, source: SOURCE, device: DEVICE = None) -> CallToolResult:
        return _result(await with_progress(ctx, lambda: tools.profile(task, source, device)))

    def history(task: TASK, limit: Annotated[int, Field(description="how many attempts, 1-100")] = 10,
                include_source: Annotated[bool, Field(description="include each attempt's source")] = True,
                ) -> CallToolResult:
        return _result(tools.history(task, limit, include_source))

    def search_archive(task: TASK, k: Annotated[int, Field(description="how many other tasks, 1-100")] = 3,
                       ) -> CallToolResult:
        return _result(tools.search_archive(task, k))

    def best(task: TASK, hardware_key: Annotated[str | None, Field(
            description="optional: only timings from this machine (an evaluation's hardware key)")] = None,
             ) -> CallToolResult:
        return _result(tools.best(task, hardware_key))

    for fn, annotations in ((list_tasks, reads), (get_task, reads), (evaluate, writes), (profile, writes),
                            (history, reads), (search_archive, reads), (best, reads)):
        server.add_tool(fn, name=fn.__name__, description=DESCRIPTIONS[fn.__name__], annotations=annotations)
    return server


async def with_progress(ctx: Context, work: Callable[[], dict[str, Any]],
                        every_s: float = PROGRESS_EVERY_S) -> dict[str, Any]:
    """Run `work` in a worker thread, reporting progress (seconds so far) every `every_s` meanwhile."""
    started = time.monotonic()

    async def beat() -> None:
        while True:
            await anyio.sleep(every_s)
            seconds = time.monotonic() - started
            await ctx.report_progress(round(seconds, 1), None, f"evaluating: {seconds:.0f} s so far")

    async with anyio.create_task_group() as group:
        group.start_soon(beat)
        future = _EVALUATOR.submit(work)
        payload = await anyio.to_thread.run_sync(future.result)
        group.cancel_scope.cancel()
    return payload


# Evaluations run on one long-lived thread: a Judge's children ask to die with the thread that
# started them (PR_SET_PDEATHSIG, sandbox.die_with_parent), and anyio retires idle worker
# threads, which would kill a task's reference process and spares between two tool calls.
# One thread also means one evaluation at a time on the GPU.
_EVALUATOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warpforge-evaluator")


class RequireToken:
    """ASGI middleware: a request without the header `Authorization: Bearer TOKEN` is answered 401
    and reaches nothing behind it (no session, no tool call)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or self._authorized(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await PlainTextResponse(UNAUTHORIZED, 401, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
        else:  # a WebSocket, closed before it is accepted (the client sees 403)
            await send({"type": "websocket.close", "code": 1008})

    def _authorized(self, scope: Scope) -> bool:
        header = dict(scope.get("headers") or ()).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)  # constant time


UNAUTHORIZED = ("warpforge mcp needs the header 'Authorization: Bearer TOKEN': the token warpforge printed when it "
                "started, or the server's $WARPFORGE_MCP_TOKEN\n")


def serve_http(server: MCPServer[Any], host: str, port: int, token: str) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp until a signal stops it; every request must carry the token."""
    import uvicorn

    app = RequireToken(server.streamable_http_app(host=host), token)  # the SDK's app, as server.run would build it
    anyio.run(uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve)


# A word up to a space, quote or separator: one with two slashes or more is a path (a suite name
# such as level1/softmax has one), and an error shows only its last part.
_WORD = re.compile(r"[^\s'\"`:;,()<>\[\]{}]+")


def _without_paths(message: str) -> str:
    """An error message with each path cut to its file name: whether a path exists, or where the
    server keeps its archive and tasks, is none of a client's business."""

    def cut(word: re.Match[str]) -> str:
        url = word[0].startswith("//") and message[word.start() - 1:word.start()] == ":"
        return word[0] if word[0].count("/") < 2 or url else word[0].rstrip("/").rsplit("/", 1)[-1]

    return _WORD.sub(cut, message)


def _result(payload: dict[str, Any]) -> CallToolResult:
    """The tool's dict as structured content and as JSON text (for clients that show only text)."""
    if "error" in payload:
        payload = {"error": {**payload["error"], "message": _without_paths(str(payload["error"].get("message")))}}
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(payload, indent=1))],
                          structured_content=payload, is_error="error" in payload)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("warpforge")
    except PackageNotFoundError:
        return "0"


def serve(args: argparse.Namespace) -> int:
    """`warpforge mcp`: check the options (2 and one sentence when one is wrong), then serve the tools
    until the client closes stdin or a signal comes; the run is marked done or stopped."""
    try:
        options = mcp_options(args)
    except UsageError as exc:
        print(f"warpforge: {exc}", file=sys.stderr)
        return 2
    tools = AgentTools(args.archive, device=options.device, agent_name=agent_name(args), interface="mcp",
                       eval_config=options.eval_config, executor=args.executor,
                       workers=args.workers, ray_address=args.ray_address, task_dirs=options.task_dirs)
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
        if options.http is None:
            server.run("stdio")  # returns when the client closes our stdin
        else:
            host, port = options.http
            shown = f"${TOKEN_ENV}" if options.token_chosen else \
                f"{options.token} (new at each start; set {TOKEN_ENV} to choose one)"
            print(f"warpforge: serving MCP at http://{host}:{port}/mcp (archive {args.archive}); clients must send "
                  f"the header 'Authorization: Bearer TOKEN', TOKEN = {shown}", file=sys.stderr)
            serve_http(server, host, port, options.token)
    finally:
        tools.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m warpforge.agent.server ...`: the same as `warpforge mcp ...`."""
    parser = argparse.ArgumentParser(prog="warpforge mcp", description="Serve warpforge's agent tools over MCP.")
    add_mcp_arguments(parser)
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
