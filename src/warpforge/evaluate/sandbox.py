"""Run one Python entry point in a child process that we can always stop.

The child runs inside the OS sandbox that a `Jail` describes (jail.py: its own namespaces,
read-only filesystem, no network) or, unsandboxed, in a session of its own. Either way it has
a wall-clock limit that *kills* it, a resident-memory limit over all of its processes (every
descendant, whatever session it starts), enforced by polling /proc, and captured stdout/stderr
of which only the head and tail are kept. It talks to us through a private pipe of JSON lines
(`Channel`); it never sends pickles, so nothing it sends can run code here. Unsandboxed, a
daemon that double-forks away from the tree is reaped only through the subreaper flag, and
nothing limits what it reads or writes — see docs/evaluation.md.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from warpforge.evaluate.jail import Jail
from warpforge.evaluate.jail import command as jail_command

CHANNEL_ENV = "WARPFORGE_CHANNEL_FD"
MAX_MESSAGE_BYTES = 1 << 20
# How often `wait`'s watchdog looks at what a child wrote: tmpfs takes a few GB/s, so a file
# written between two looks overshoots a limit by a few hundred MB at most.
WATCH_S = 0.05


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
    over_limit: str | None = None
    """Why the child was killed for what it wrote (`wait`'s `watch`), in words; None if it was not."""

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


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process /proc shows."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            table[int(entry)] = (int(fields[1]), int(fields[3]))
        except (OSError, ValueError, IndexError):
            continue
    return table


def _tree(pid: int) -> list[int]:
    """`pid`, its descendants (whatever session they started), and the processes of its session.
    A sandboxed process's orphans re-parent to the sandbox's init, so they stay in the tree."""
    table = _process_table()
    session = table.get(pid, (0, -1))[1]
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid, *(p for p, (_, sid) in table.items() if sid == session and sid > 0)]
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(children.get(current, ()))
    return sorted(found & table.keys())


def _rss_mb(pid: int) -> float:
    """Resident memory of a process and all of its descendants, in MiB: anonymous and shared
    memory (RssAnon + RssShmem), not pages of files it maps, which the kernel can drop and read
    again (the reference process maps a candidate's outputs file of up to 6 GB to read it)."""
    total = 0
    for member in _tree(pid):
        try:
            with open(f"/proc/{member}/status") as f:
                fields = dict(line.split(":", 1) for line in f if line.startswith(("RssAnon", "RssShmem")))
            total += sum(int(v.split()[0]) for v in fields.values()) * 1024
        except (OSError, ValueError, IndexError):
            continue
    return total / 2**20


def _state(pid: int) -> str:
    """A process's state letter from /proc (R, S, T for stopped, Z...); "" when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _signal_tree(pid: int, sig: signal.Signals) -> bool:
    """Signal `pid` and every process of its tree; False when `pid` is gone."""
    members = _tree(pid) if pid > 0 else []
    if pid not in members:
        return False
    for member in members:
        try:
            os.kill(member, sig)
        except (ProcessLookupError, PermissionError):
            pass
    return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(3):  # a process forking while we kill is caught on the next pass
        if not _signal_tree(proc.pid, signal.SIGKILL):
            break
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


def die_with_parent() -> None:
    """Called first thing in a child: the kernel kills it (SIGKILL works on a stopped process too)
    when the process that started it dies, so a crashed or killed host leaves no spare behind,
    paused or not. Linux only; elsewhere a no-op. The kernel ties this to the *thread* that
    started the child: start Judges from a long-lived thread (the main one, or a dedicated
    executor thread), not from a pool that retires idle threads."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        parent = os.getppid()
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def reap_orphans(max_passes: int = 200) -> int:
    """Kill every process re-parented to us that we did not start, with its process group; repeat
    until a pass finds none (a daemon that keeps re-forking is caught between forks)."""
    killed = 0
    for _ in range(max_passes):
        found = _orphans()
        if not found:
            return killed
        for pid in found:
            # its whole group, unless that is ours (never: _orphans skips our session; belt and braces)
            group = _group(pid)
            kills = [lambda: os.kill(pid, signal.SIGKILL)]
            if group not in (None, os.getpgrp()):
                kills.insert(0, lambda: os.killpg(group, signal.SIGKILL))  # type: ignore[arg-type]
            for kill in kills:
                try:
                    kill()
                except (OSError, ProcessLookupError):
                    pass
            try:
                os.waitpid(pid, 0)
            except (OSError, ChildProcessError):
                pass
            killed += 1
        time.sleep(0.005)
    return killed


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _orphans() -> list[int]:
    """Processes re-parented to us from an evaluator child's session. A process in our own
    session is the host program's (a DataLoader worker, a subprocess it started) and is never
    touched: every evaluator child starts a new session, and so do its descendants unless they
    start yet another one."""
    me, found = os.getpid(), []
    own_session = os.getsid(0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid, session = int(fields[1]), int(fields[3])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and session != own_session and int(entry) not in _LIVE_CHILDREN | _OWN_CHILDREN:
            found.append(int(entry))
    return found


_LIVE_CHILDREN: set[int] = set()
# children this process had before it first started an evaluator child: the host program's own,
# never to be reaped (those in our own session are never reaped anyway, whenever they started)
_OWN_CHILDREN: set[int] = set()
_OWN_RECORDED = False


class Child:
    """One sandboxed child process: start it early (imports overlap other work), then `wait`."""

    def __init__(self, module: str, args: list[str], *, env: dict[str, str] | None = None,
                 cwd: str | None = None, output_limit_bytes: int = 64 << 10, jail: Jail | None = None) -> None:
        global _OWN_RECORDED
        if not _OWN_RECORDED:
            _OWN_CHILDREN.update(_orphans())
            _OWN_RECORDED = True
        become_subreaper()
        self._read_fd, write_fd = os.pipe()
        child_env = dict(os.environ if env is None else env)
        child_env[CHANNEL_ENV] = str(write_fd)
        if child_env.get("PYTHONPATH"):  # the child runs in a folder of its own: PYTHONPATH=src must still reach src
            child_env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in child_env["PYTHONPATH"].split(os.pathsep) if p)
        child_env["PYTHONUNBUFFERED"] = "1"
        self.sandboxed = jail is not None
        prefix = jail_command(jail, child_env) if jail is not None else []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=(write_fd,), env=child_env, cwd=cwd, start_new_session=True,
        )
        _LIVE_CHILDREN.add(self.proc.pid)
        os.close(write_fd)
        self._output = _TailBuffer(output_limit_bytes)
        self._drain = threading.Thread(target=_drain, args=(self.proc.stdout, self._output), daemon=True)
        self._drain.start()
        self.outcome = ChildOutcome()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._read_fd, selectors.EVENT_READ)
        self._pending = b""
        self._channel_open = True
        self._finished = False

    def send(self, line: str) -> None:
        """Write one command line to the child's stdin (it may have died: then nothing happens)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def wait(self, *, timeout_s: float, mem_limit_mb: float,
             on_message: Callable[[dict[str, Any]], str | None] | None = None,
             until: str | None = None, watch: Callable[[], str | None] | None = None) -> ChildOutcome:
        """Collect channel messages until the child exits or is killed; the clock starts now.

        `on_message` may return a line to write to the child's stdin (a command such as "bench").
        With `until`, return as soon as a message of that type arrives and leave the child
        running (a later `wait` goes on from there); the child is killed in every other case.
        `watch` (what the child has written, say) is called every WATCH_S from a thread of its own,
        so also while `on_message` works, and once more after the child is killed: when it gives a
        reason the child is killed and `outcome.over_limit` keeps the reason.
        """
        outcome = self.outcome
        start = time.monotonic()
        proc = self.proc
        watching = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(watch, watching), daemon=True) if watch else None
        if watchdog is not None:
            watchdog.start()
        try:
            while True:
                if outcome.over_limit:
                    break
                if time.monotonic() - start > timeout_s:
                    outcome.timed_out = True
                    break
                rss = _rss_mb(proc.pid)
                outcome.peak_rss_mb = max(outcome.peak_rss_mb, rss)
                if rss > mem_limit_mb:
                    outcome.out_of_memory = True
                    break
                for message in self._read_messages(timeout=0.05):
                    outcome.messages.append(message)
                    reply = on_message(message) if on_message else None
                    if reply is not None:
                        self.send(reply)
                    if until is not None and message["type"] == until:
                        outcome.seconds += time.monotonic() - start
                        return outcome
                    if message["type"] == "done":  # the child's work is over; do not wait for its exit
                        self._finished = True
                if self._finished:
                    break
                if proc.poll() is not None and not self._channel_open:
                    break
                if proc.poll() is not None and self._channel_open and not self._selector.select(timeout=0.2):
                    break
        except BaseException:
            self.kill()
            raise
        finally:
            watching.set()
            if watchdog is not None:
                watchdog.join()
        self.kill()
        if watch is not None and not outcome.over_limit:
            outcome.over_limit = watch()  # written just before it ended
        outcome.returncode = proc.returncode
        if self.sandboxed and proc.returncode is not None and 128 < proc.returncode < 128 + 65:
            outcome.returncode = 128 - proc.returncode  # bwrap exits 128+N for a child killed by signal N
        outcome.output = self._output.text()
        outcome.seconds += time.monotonic() - start
        return outcome

    def _watch(self, watch: Callable[[], str | None], stop: threading.Event) -> None:
        """`wait`'s watchdog: kill the child's tree (signals only: the waiting thread reaps it) on
        the first reason `watch` gives."""
        while not stop.wait(WATCH_S):
            why = watch()
            if why:
                self.outcome.over_limit = why
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                _signal_tree(self.proc.pid, signal.SIGKILL)
                return

    def _read_messages(self, timeout: float) -> list[dict[str, Any]]:
        if not self._channel_open:
            time.sleep(0.02)
            return []
        if not self._selector.select(timeout=timeout):
            return []
        chunk = os.read(self._read_fd, 1 << 16)
        if not chunk:
            self._channel_open = False
            self._selector.unregister(self._read_fd)
        self._pending += chunk
        if len(self._pending) > MAX_MESSAGE_BYTES and b"\n" not in self._pending:
            self._pending = b""
            self.outcome.bad_messages += 1
        *lines, self._pending = self._pending.split(b"\n")
        messages = []
        for line in lines:
            message = _parse(line)
            if message is None:
                self.outcome.bad_messages += 1
            else:
                message["_received"] = time.monotonic()  # stamped here: the child cannot forge it
                messages.append(message)
        return messages

    def pause(self) -> None:
        """Stop the child's whole process tree (SIGSTOP) until `resume`; returns once each of its
        processes is stopped, so nothing it does overlaps what the caller does next."""
        if self._signal(signal.SIGSTOP):
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and any(
                    _state(p) not in ("T", "t", "Z", "X", "") for p in _tree(self.proc.pid)):
                time.sleep(0.001)

    def resume(self) -> None:
        """Let a paused child go on (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> bool:
        if self.proc.poll() is not None:
            return False
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        return _signal_tree(self.proc.pid, sig)

    def kill(self) -> None:
        """Kill the child's whole process group and any orphan it left; idempotent."""
        _kill_group(self.proc)
        self.proc.wait()
        _LIVE_CHILDREN.discard(self.proc.pid)
        if self._read_fd >= 0:
            if self._channel_open:
                self._selector.unregister(self._read_fd)
                self._channel_open = False
            os.close(self._read_fd)
            self._read_fd = -1
        self._drain.join(timeout=2)
        reap_orphans()


def run_child(module: str, args: list[str], *, timeout_s: float, mem_limit_mb: float, output_limit_bytes: int,
              env: dict[str, str] | None = None, on_message: Callable[[dict[str, Any]], str | None] | None = None,
              cwd: str | None = None, jail: Jail | None = None) -> ChildOutcome:
    """Start `python -m module *args` and wait for it (see `Child`)."""
    child = Child(module, args, env=env, cwd=cwd, output_limit_bytes=output_limit_bytes, jail=jail)
    return child.wait(timeout_s=timeout_s, mem_limit_mb=mem_limit_mb, on_message=on_message)


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
        inherited = int(os.environ.pop(CHANNEL_ENV))
        # move the pipe to a random descriptor that compilers and other subprocesses do not inherit,
        # and close the number the environment (/proc/self/environ) still names
        self._fd = fcntl.fcntl(inherited, fcntl.F_DUPFD_CLOEXEC, 100 + secrets.randbelow(800))
        os.close(inherited)
        self._write = os.write
        self._dumps = json.dumps

    def post(self, message: Any) -> None:
        """A typed message (a protocol.Message): its KIND as the `type`, its fields as the payload."""
        self.send(message.KIND, **message.payload())

    def send(self, type_: str, **payload: Any) -> None:
        data = self._dumps({"type": type_, **payload}, default=str).encode() + b"\n"
        while data:
            written = self._write(self._fd, data)
            data = data[written:]
