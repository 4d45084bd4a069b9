"""Run one Python entry point in a child process that we can always stop.

The child gets its own session (so the whole process group is killed, compilers included),
a wall-clock limit that *kills* it, a resident-memory limit enforced by polling /proc, and
captured stdout/stderr of which only the head and tail are kept. It talks to us through a
private pipe of JSON lines (`Channel`); it never sends pickles, so nothing it sends can run
code here. What this does NOT protect against: a child that forks a process into a new
session escapes the group kill (we reap orphans we can see through the subreaper flag),
and there is no network or filesystem isolation — see docs/evaluation.md.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CHANNEL_ENV = "WARPFORGE_CHANNEL_FD"
MAX_MESSAGE_BYTES = 1 << 20


@dataclass
class ChildOutcome:
    messages: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    out_of_memory: bool = False
    peak_rss_mb: float = 0.0
    output: str = ""
    seconds: float = 0.0
    bad_messages: int = 0

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


class _TailBuffer:
    """Keeps the first and last `limit/2` bytes of a stream and counts what was dropped."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.half:
            self.dropped += len(self.tail) - self.half
            del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes of output dropped ...]\n" if self.dropped else ""
        return (bytes(self.head).decode(errors="replace") + middle + bytes(self.tail).decode(errors="replace"))


def _rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants in the same session, in MiB."""
    total = 0
    try:
        sid = os.getsid(pid)
    except OSError:
        return 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) != sid:
                continue
            with open(f"/proc/{entry}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total / 2**20


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def become_subreaper() -> None:
    """Make orphaned grandchildren (a candidate's daemons) re-parent to us so we can kill them."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            pass


def reap_orphans() -> int:
    """Kill every process whose parent is us and that we did not start on purpose; return how many."""
    me, killed = os.getpid(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and int(entry) not in _LIVE_CHILDREN:
            try:
                os.kill(int(entry), signal.SIGKILL)
                os.waitpid(int(entry), 0)
                killed += 1
            except (OSError, ChildProcessError):
                pass
    return killed


_LIVE_CHILDREN: set[int] = set()


def run_child(
    module: str,
    args: list[str],
    *,
    timeout_s: float,
    mem_limit_mb: float,
    output_limit_bytes: int,
    env: dict[str, str] | None = None,
    on_message: Callable[[dict[str, Any]], str | None] | None = None,
    cwd: str | None = None,
) -> ChildOutcome:
    """Run `python -m module *args`; collect its channel messages until it exits or is killed.

    `on_message` may return a line to write to the child's stdin (a command such as "bench").
    """
    become_subreaper()
    read_fd, write_fd = os.pipe()
    child_env = dict(os.environ if env is None else env)
    child_env[CHANNEL_ENV] = str(write_fd)
    child_env["PYTHONUNBUFFERED"] = "1"
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        pass_fds=(write_fd,), env=child_env, cwd=cwd, start_new_session=True,
    )
    _LIVE_CHILDREN.add(proc.pid)
    os.close(write_fd)
    outcome = ChildOutcome()
    output = _TailBuffer(output_limit_bytes)
    assert proc.stdout is not None and proc.stdin is not None
    drain = threading.Thread(target=_drain, args=(proc.stdout, output), daemon=True)
    drain.start()
    selector = selectors.DefaultSelector()
    selector.register(read_fd, selectors.EVENT_READ)
    pending = b""
    channel_open = True
    try:
        while True:
            if time.monotonic() - start > timeout_s:
                outcome.timed_out = True
                break
            rss = _rss_mb(proc.pid)
            outcome.peak_rss_mb = max(outcome.peak_rss_mb, rss)
            if rss > mem_limit_mb:
                outcome.out_of_memory = True
                break
            if channel_open and selector.select(timeout=0.05):
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    channel_open = False
                    selector.unregister(read_fd)
                pending += chunk
                if len(pending) > MAX_MESSAGE_BYTES and b"\n" not in pending:
                    pending, outcome.bad_messages = b"", outcome.bad_messages + 1
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    message = _parse(line)
                    if message is None:
                        outcome.bad_messages += 1
                        continue
                    outcome.messages.append(message)
                    reply = on_message(message) if on_message else None
                    if reply is not None:
                        try:
                            proc.stdin.write(reply.encode() + b"\n")
                            proc.stdin.flush()
                        except (BrokenPipeError, OSError):
                            pass
            elif not channel_open:
                time.sleep(0.02)
            if proc.poll() is not None and not channel_open:
                break
            if proc.poll() is not None and channel_open and not selector.select(timeout=0.2):
                break
    finally:
        _kill_group(proc)
        proc.wait()
        _LIVE_CHILDREN.discard(proc.pid)
        os.close(read_fd)
        drain.join(timeout=2)
        reap_orphans()
    outcome.returncode = proc.returncode
    outcome.output = output.text()
    outcome.seconds = time.monotonic() - start
    return outcome


def _drain(stream: Any, sink: _TailBuffer) -> None:
    while True:
        data = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
        if not data:
            return
        sink.feed(data)


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return message if isinstance(message, dict) and isinstance(message.get("type"), str) else None


class Channel:
    """The child's end: JSON lines to the parent, bound at import so later patches don't matter."""

    def __init__(self) -> None:
        self._fd = int(os.environ.pop(CHANNEL_ENV))
        self._write = os.write
        self._dumps = json.dumps

    def send(self, type_: str, **payload: Any) -> None:
        data = self._dumps({"type": type_, **payload}, default=str).encode() + b"\n"
        while data:
            written = self._write(self._fd, data)
            data = data[written:]
