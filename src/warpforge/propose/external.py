"""Models reached through a program or through files: the `cmd` and `inbox` providers.

`--llm cmd:COMMAND` runs COMMAND through the shell once per request, with the prompt on its
stdin and the reply read from its stdout. Any command-line agent or local runner works this
way: `claude -p`, `codex exec -`, `llm -m MODEL`, `ollama run MODEL`. A command that prints a
JSON object with `result` (or `text`) and `usage.input_tokens` / `usage.output_tokens`, as
`claude -p --output-format json` does, has its token counts taken from it; otherwise tokens are
estimated (about four characters a token). The command also sees WARPFORGE_MAX_TOKENS and
WARPFORGE_TEMPERATURE. A non-zero exit or a time-out is retried like an HTTP 5xx; exit 127
(command not found) is not.

`--llm inbox:DIR` writes each request to DIR/<id>.request.md and waits for DIR/<id>.reply.md, so
anything that reads and writes files can answer: a coding agent, a script, a person. A reply is
taken once its size has stopped changing. Answered pairs move to DIR/answered/. Ids are a hash
of the prompt plus a count, so after a kill the same prompt finds a reply that was written
while nobody waited. DIR/README.md tells the responder all of this. A reply must be a regular
file of at most MAX_REPLY_BYTES: a link (to the user's files, to /dev/zero), a FIFO or a bigger
file is refused, and the request fails with that reason (untrusted.py reads it).

`cmd(NAME):COMMAND` and `inbox(NAME):DIR` record NAME as the model in the archive (default:
`cmd:COMMAND`, `inbox:DIR`). Both transports are used through LLMClient, which adds the
retries, the concurrency limit and the accounting.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from warpforge.errors import ConfigError, LLMError
from warpforge.propose.replay import estimate_tokens
from warpforge.propose.transport import ModelSpec, Reply, TransientError
from warpforge.untrusted import RefusedFile, read_regular, write_atomically

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
POLL_S = 0.2
"""How often the inbox looks for a reply."""
MAX_REPLY_BYTES = 4 << 20
"""The largest inbox reply read: a kernel and its analysis take tens of kB, a model's whole
context window (200k tokens, about 4 characters each) under 1 MB."""

INBOX_README = """# warpforge inbox

warpforge writes each request to the model as `<id>.request.md` in this folder: the prompt as one
text (the system prompt first, then the user's message). Answer it by writing the whole reply to
`<id>.reply.md` (write it under another name first and rename it, or write it at once: warpforge
takes a reply once its size stops changing). Answered pairs move to `answered/`. A reply is a
plain file of at most 4 MB: a link or anything else is refused.

Each request also has `<id>.request.json`: the chat messages, max_tokens and temperature.
A reply is read as the model's reply: give the kernel in a fenced code block, as the prompt asks.
"""


def render_prompt(messages: list[dict[str, str]]) -> str:
    """One text for a program or a person: a system prompt then one user message as two
    paragraphs; any other conversation with each turn under its role."""
    roles = [m.get("role") for m in messages]
    if roles in (["user"], ["system", "user"]):
        return "\n\n".join(str(m.get("content", "")) for m in messages)
    return "\n\n".join(f"### {m.get('role', 'user')}\n\n{m.get('content', '')}" for m in messages)


def _reply_of(stdout: str, prompt: str) -> tuple[str, int, int]:
    """The reply's text and (prompt, completion) tokens: from a JSON object the tool printed
    (`result` or `text`, `usage`), else the whole output with estimated tokens."""
    text: str = stdout
    prompt_tokens: object = None
    completion_tokens: object = None
    stripped = stdout.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except ValueError:
            obj = None
        said = obj.get("result", obj.get("text")) if isinstance(obj, dict) else None
        if isinstance(obj, dict) and isinstance(said, str):
            text = said
            usage = obj.get("usage")
            if isinstance(usage, dict):
                prompt_tokens, completion_tokens = usage.get("input_tokens"), usage.get("output_tokens")
    return (text,
            prompt_tokens if isinstance(prompt_tokens, int) else estimate_tokens(prompt),
            completion_tokens if isinstance(completion_tokens, int) else estimate_tokens(text))


class CommandTransport:
    """`cmd:COMMAND`: the prompt on the command's stdin, the reply from its stdout."""

    def __init__(self, spec: ModelSpec, timeout_s: float) -> None:
        self.spec, self.timeout_s, self.command = spec, timeout_s, spec.model

    def ping(self) -> None:
        """The program exists (nothing is run: a call may cost money)."""
        try:
            argv = shlex.split(self.command)
        except ValueError as exc:
            raise ConfigError(f"--llm {self.spec.name}: the command does not parse ({exc})") from None
        program = next((w for w in argv if not _ASSIGNMENT.fullmatch(w)), None)  # past VAR=value prefixes
        if program is None:
            raise ConfigError(f"--llm {self.spec.name}: no command given: e.g. --llm 'cmd:claude -p'")
        if shutil.which(program) is None:
            raise ConfigError(f"--llm {self.spec.name}: {program!r} is not a program on PATH: install it or give "
                              "its full path")

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> Reply:
        prompt = render_prompt(messages)
        env = {**os.environ, "WARPFORGE_MAX_TOKENS": str(max_tokens), "WARPFORGE_TEMPERATURE": str(temperature)}
        # its own process group, so a time-out stops the agent the shell started, not only the shell
        proc = subprocess.Popen(self.command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(prompt, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise TransientError(f"{self.spec.name} gave no reply within {self.timeout_s:g} s") from None
        if proc.returncode == 127:
            raise LLMError(f"{self.spec.name}: command not found ({_tail(stderr)}); check --llm")
        if proc.returncode != 0:
            raise TransientError(f"{self.spec.name} exited with {proc.returncode}: {_tail(stderr) or 'no message'}")
        text, prompt_tokens, completion_tokens = _reply_of(stdout, prompt)
        if not text.strip():
            raise TransientError(f"{self.spec.name} printed no reply")
        return Reply(text, prompt_tokens, completion_tokens, "stop")


class InboxTransport:
    """`inbox:DIR`: a request file per call, answered by whoever writes the reply file."""

    def __init__(self, spec: ModelSpec, timeout_s: float) -> None:
        self.spec, self.timeout_s, self.dir = spec, timeout_s, Path(spec.model).expanduser()
        self._lock = threading.Lock()
        self._claimed: dict[str, set[int]] = {}  # per prompt, the request numbers a call here waits on

    def ping(self) -> None:
        """The folder exists (made if not), can be written, and holds the README."""
        try:
            (self.dir / "answered").mkdir(parents=True, exist_ok=True)
            readme = self.dir / "README.md"
            if not readme.exists():
                write_atomically(readme, INBOX_README)
        except OSError as exc:
            raise ConfigError(f"--llm {self.spec.name}: cannot write the inbox folder ({exc.strerror or exc})") from None

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> Reply:
        self.ping()
        prompt = render_prompt(messages)
        key = hashlib.sha256(prompt.encode()).hexdigest()[:12]
        n = self._claim(key)
        name = f"{key}-{n}"
        request, reply = self.dir / f"{name}.request.md", self.dir / f"{name}.reply.md"
        try:
            if not request.exists() and not reply.exists():  # after a kill the same request may be waiting already
                write_atomically(self.dir / f"{name}.request.json", json.dumps(
                    {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}, indent=1))
                write_atomically(request, prompt)
            try:
                text, refused = self._wait(reply), ""
            except RefusedFile as exc:  # a link, a FIFO, a device, too big: never read
                text, refused = None, str(exc)
        finally:
            with self._lock:
                self._claimed[key].discard(n)
        if text is None and not refused:
            raise TransientError(f"no reply in {reply} within {self.timeout_s:g} s")
        for path in (request, self.dir / f"{name}.request.json", reply):
            _move_aside(path, self.dir / "answered")  # (a refused reply too: the next ask is a new request)
        if text is None:
            raise LLMError(f"{self.spec.name}: the reply was refused: {refused}")
        if not text.strip():
            raise TransientError(f"{reply} was empty")
        return Reply(text, estimate_tokens(prompt), estimate_tokens(text), "stop")

    def _claim(self, key: str) -> int:
        """The number of this call's request of the prompt `key`: an outstanding request of the same
        prompt that no call here waits on (a killed run's, answered or not: the same prompt, so
        its reply answers this call), else the lowest number no request of it has had, here or in
        answered/. A resumed run asks fewer of a generation's identical prompts than the run it
        resumes, so counting from 0 in each process would give a new request and leave the
        waiting one unread."""
        with self._lock:
            claimed = self._claimed.setdefault(key, set())
            waiting = sorted(n for p in self.dir.glob(f"{key}-*.request.md")
                             if (n := _request_number(p.name, key)) is not None and n not in claimed)
            if waiting:
                n = waiting[0]
            else:
                used = {n for p in (self.dir / "answered").glob(f"{key}-*.request.md")
                        if (n := _request_number(p.name, key)) is not None}
                n = next(i for i in itertools.count() if i not in claimed and i not in used)
            claimed.add(n)
            return n

    def _wait(self, reply: Path) -> str | None:
        """The reply's text once its size stopped changing between two looks; None at the time-out;
        RefusedFile for a reply that is not a regular file of at most MAX_REPLY_BYTES (its link
        is never followed: lstat, then read_regular's O_NOFOLLOW)."""
        deadline = time.monotonic() + self.timeout_s
        last = -1
        while time.monotonic() < deadline:
            try:
                size = reply.lstat().st_size
            except FileNotFoundError:
                size = -1
            if size >= 0 and size == last:
                try:
                    return read_regular(reply, MAX_REPLY_BYTES).decode(errors="replace")
                except FileNotFoundError:  # renamed away between the two looks: look again
                    size = -1
            last = size
            time.sleep(POLL_S)
        return None


def _request_number(name: str, key: str) -> int | None:
    """N of `<key>-<N>.request.md`, or None for any other name."""
    number = name.removeprefix(f"{key}-").removesuffix(".request.md")
    return int(number) if number.isdigit() else None


def _move_aside(path: Path, folder: Path) -> None:
    """Into `folder`, under a new name if one is taken (the same prompt can be asked again)."""
    if not os.path.lexists(path):  # (a link is moved as the link, never followed)
        return
    target, i = folder / path.name, 1
    while os.path.lexists(target):
        target = folder / f"{path.stem}.{i}{path.suffix}"
        i += 1
    path.replace(target)


def _tail(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[-limit:]
