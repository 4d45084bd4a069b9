"""Recorded LLM replies: the JSONL rules, and a loopback server that speaks the OpenAI API.

`RecordedReplies` serves replies from a JSONL file (one object a line, see `Recorded`) with no
network: the `replay` provider of llm.py uses it, so a run can be reproduced from recorded
replies. `ReplayServer` serves the same rules over HTTP on 127.0.0.1 (`GET /v1/models`,
`POST /v1/chat/completions`, and Anthropic's `POST /v1/messages`), with injected errors and
delays, so tests drive the real SDKs end to end. Neither is a model: nothing here reads prompts
beyond the `match` regexes.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from warpforge.errors import ConfigError


@dataclass(frozen=True)
class Recorded:
    """One line of a replies file; every entry is used at most once."""

    reply: str = ""
    match: re.Pattern[str] | None = None
    """Searched in the last user message; None fits any request (entries are then used in order)."""
    finish_reason: str = "stop"
    prompt_tokens: int | None = None
    """None: estimated as about a quarter of the prompt's characters."""
    completion_tokens: int | None = None
    status: int | None = None
    """Fault injection: answer with this HTTP error (429, 500, 503, 400...) instead of the reply."""
    delay_s: float = 0.0
    """Fault injection: wait this long before answering."""
    retry_after_s: float | None = None
    """With `status`: sent as the Retry-After header."""

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], where: str = "a recorded reply") -> Recorded:
        """Other keys are ignored, so a file may carry notes (the task, the strategy)."""
        def bad(why: str) -> ConfigError:
            return ConfigError(f"{where} {why}: expected {{\"reply\": str, optional \"match\", \"finish_reason\", "
                               f"\"prompt_tokens\", \"completion_tokens\", \"status\", \"delay_s\"}}")

        if not isinstance(obj, Mapping):
            raise bad("is not a JSON object")
        status = obj.get("status")
        if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
            raise bad(f"has status {status!r}, not an HTTP error code")
        reply = obj.get("reply", "" if status is not None else None)
        if not isinstance(reply, str):
            raise bad("has no \"reply\" string")
        match = obj.get("match")
        try:
            pattern = re.compile(match) if match is not None else None
        except (re.error, TypeError) as exc:
            raise bad(f"has a \"match\" that is not a regular expression ({exc})") from None
        try:
            return cls(reply, pattern, str(obj.get("finish_reason", "stop")),
                       _optional_int(obj.get("prompt_tokens")), _optional_int(obj.get("completion_tokens")),
                       status, float(obj.get("delay_s", 0.0)), _optional_float(obj.get("retry_after_s")))
        except (TypeError, ValueError) as exc:
            raise bad(f"has a value of the wrong type ({exc})") from None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def estimate_tokens(text: str) -> int:
    """About four characters a token for English and code: good enough for replayed accounting."""
    return len(text) // 4


class RecordedReplies:
    """Thread-safe: the first unused entry whose `match` fits the last user message is served."""

    def __init__(self, entries: Iterable[Recorded | Mapping[str, Any]], source: str = "the recorded replies") -> None:
        self.source = source
        self._entries = [e if isinstance(e, Recorded) else Recorded.from_dict(e, f"entry {i} of {source}")
                         for i, e in enumerate(entries, 1)]
        self._used = [False] * len(self._entries)
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> RecordedReplies:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read the recorded replies {path}: {exc.strerror or exc}") from None
        entries = []
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path} line {number} is not JSON ({exc.msg}): write one object a line") from None
                entries.append(Recorded.from_dict(obj, f"{path} line {number}"))
        return cls(entries, source=str(path))

    def take(self, prompt: str) -> Recorded | None:
        """The entry to serve for a request whose last user message is `prompt`, marked used; None if none fits."""
        with self._lock:
            for i, entry in enumerate(self._entries):
                if not self._used[i] and (entry.match is None or entry.match.search(prompt)):
                    self._used[i] = True
                    return entry
        return None

    def none_left_message(self) -> str:
        """Why `take` returned None, in one sentence."""
        with self._lock:
            unused = self._used.count(False)
        if unused == 0:
            return f"the recorded replies in {self.source} are used up"
        return f"none of the {unused} unused recorded replies in {self.source} matches the last user message"

    @property
    def unused(self) -> int:
        with self._lock:
            return self._used.count(False)


def message_text(content: Any) -> str:
    """Chat content as text: a string, or a list of content blocks (OpenAI and Anthropic shapes)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


# -- the loopback server ---------------------------------------------------------------------

@dataclass
class _ServerState:
    replies: RecordedReplies
    model: str
    api_key: str | None
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ReplayServer:
    """An OpenAI-compatible (and Anthropic-compatible) endpoint on 127.0.0.1 serving recorded replies.

    `base_url` ends in /v1 as the openai SDK expects; give the anthropic SDK `url` (it adds
    /v1/messages itself). Routes match on the path's end, so either base works for both.
    `requests` holds every POST body received, in order; `max_in_flight` the most requests
    that were being answered at once (counted until the reply is about to be written). With
    `api_key`, a request without that key (Bearer or x-api-key) gets HTTP 401, as a real server would.
    """

    def __init__(self, replies: RecordedReplies | Iterable[Recorded | Mapping[str, Any]] | str | Path,
                 model: str = "replay", api_key: str | None = None) -> None:
        if isinstance(replies, (str, Path)):
            replies = RecordedReplies.from_file(replies)
        elif not isinstance(replies, RecordedReplies):
            replies = RecordedReplies(replies)
        self._state = _ServerState(replies, model, api_key)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self._state))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self.base_url = self.url + "/v1"
        # a short poll interval: close() waits up to one interval for the serving loop to notice
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="replay-server", daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def paths(self) -> list[str]:
        """'METHOD PATH' of every request, GETs included."""
        with self._state.lock:
            return list(self._state.paths)

    @property
    def max_in_flight(self) -> int:
        return self._state.max_in_flight

    @property
    def replies(self) -> RecordedReplies:
        return self._state.replies

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> ReplayServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler_for(state: _ServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.state = state
    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms Nagle stalls
    state: _ServerState

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # tests read `requests`, not a log on stderr

    def do_GET(self) -> None:
        self._note(None)
        if not self._authorised():
            return
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            model = self.state.model
            self._send(200, {"object": "list", "has_more": False, "first_id": model, "last_id": model,
                             "data": [{"id": model, "object": "model", "type": "model", "created": 0,
                                       "created_at": "1970-01-01T00:00:00Z", "owned_by": "warpforge-replay",
                                       "display_name": model}]})
        else:
            self._send(404, _error_body(self._anthropic(), 404, f"no route for GET {self.path}"))

    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as exc:
            self._note(None)
            self._send(400, _error_body(self._anthropic(), 400, f"bad JSON body: {exc}"))
            return
        self._note(body)
        if not self._authorised():
            return
        path = self.path.split("?")[0].rstrip("/")
        if not (path.endswith("/chat/completions") or path.endswith("/messages")):
            self._send(404, _error_body(self._anthropic(), 404, f"no route for POST {self.path}"))
            return
        state = self.state
        with state.lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            messages = body.get("messages") or []
            entry = state.replies.take(last_user_text(messages))
            if entry is not None and entry.delay_s > 0:
                time.sleep(entry.delay_s)
        finally:
            # counted down before the reply is written, so a client that got its reply and sent
            # the next request can never be counted twice
            with state.lock:
                state.in_flight -= 1
        anthropic = self._anthropic()
        if entry is None:
            self._send(400, _error_body(anthropic, 400, state.replies.none_left_message()))
        elif entry.status is not None:
            headers = {"Retry-After": f"{entry.retry_after_s:g}"} if entry.retry_after_s is not None else {}
            self._send(entry.status, _error_body(anthropic, entry.status, entry.reply or f"injected HTTP {entry.status}"),
                       headers)
        else:
            prompt = "\n".join(message_text(m.get("content")) for m in messages if isinstance(m, dict))
            prompt += message_text(body.get("system", ""))
            tokens_in = entry.prompt_tokens if entry.prompt_tokens is not None else estimate_tokens(prompt)
            tokens_out = entry.completion_tokens if entry.completion_tokens is not None else estimate_tokens(entry.reply)
            model = str(body.get("model", state.model))
            shape = _anthropic_reply if anthropic else _openai_reply
            self._send(200, shape(model, entry, tokens_in, tokens_out))

    def _authorised(self) -> bool:
        expected = self.state.api_key
        if expected is None:
            return True
        given = self.headers.get("x-api-key") or self.headers.get("Authorization", "").removeprefix("Bearer ")
        if given == expected:
            return True
        self._send(401, _error_body(self._anthropic(), 401, "invalid API key"))
        return False

    def _anthropic(self) -> bool:
        return self.path.split("?")[0].rstrip("/").endswith("/messages")

    def _note(self, body: dict[str, Any] | None) -> None:
        with self.state.lock:
            self.state.paths.append(f"{self.command} {self.path}")
            if body is not None:
                self.state.requests.append(body)

    def _send(self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True  # the client gave up (a timeout test): nothing to tell it


def _openai_reply(model: str, entry: Recorded, tokens_in: int, tokens_out: int) -> dict[str, Any]:
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": entry.reply},
                         "finish_reason": entry.finish_reason, "logprobs": None}],
            "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                      "total_tokens": tokens_in + tokens_out}}


_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens"}


def _anthropic_reply(model: str, entry: Recorded, tokens_in: int, tokens_out: int) -> dict[str, Any]:
    return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": entry.reply}],
            "stop_reason": _ANTHROPIC_STOP.get(entry.finish_reason, entry.finish_reason), "stop_sequence": None,
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}}


def _error_body(anthropic: bool, status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            429: "rate_limit_error"}.get(status, "api_error")
    if anthropic:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "code": None, "param": None}}
