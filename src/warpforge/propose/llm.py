"""The only code in warpforge that talks to LLM APIs.

`LLMClient.complete` sends chat messages to one model of an ensemble (chosen by weight, or by
a UCB1 bandit on how often a model's proposals improved the best kernel), retries what is worth
retrying (429, 5xx, timeouts, lost connections) with exponential backoff and jitter, keeps at
most `concurrency` requests in flight, and counts tokens and cost per model. All I/O goes
through a `Transport` (transport.py), one small class per provider (`openai` for every
OpenAI-compatible endpoint, `anthropic`, `replay` for recorded replies, and in external.py `cmd`
for a command per request and `inbox` for request and reply files); the SDK clients are made
with max_retries=0 so the retry policy is ours and tested. It builds no prompts and parses no
replies.

    LLMError(WarpforgeError)    a request failed for good (after retries, or a refusal such as HTTP 400)
    TransientError(Exception)   raised by a transport for one failed try (transport.py); never leaves LLMClient
"""

from __future__ import annotations

import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from warpforge.errors import ConfigError, LLMError
from warpforge.propose.external import CommandTransport, InboxTransport
from warpforge.propose.replay import RecordedReplies, estimate_tokens, last_user_text
from warpforge.propose.transport import (LOCAL_PROVIDERS, PROVIDERS, SPEC_FORMS, ModelSpec, Reply, TransientError,
                                         Transport)

# USD per million tokens (prompt, completion): standard rates, no batch or cache discounts.
# Sources: platform.openai.com/docs/pricing and docs.anthropic.com/en/docs/about-claude/pricing
# (also served at platform.claude.com), as published when each model launched (2024-2025) and
# unchanged in copies of those pages dated March-October 2026; the table was written 2026-11-23
# without re-fetching the pages, so check them before trusting a dollar budget. Dated snapshots
# ("gpt-4o-2024-08-06", "claude-sonnet-4-20250514") cost what their base name costs. Models not
# listed (newer ones, local ones) cost 0 unless given prices.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00), "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00), "gpt-4.1-mini": (0.40, 1.60), "gpt-4.1-nano": (0.10, 0.40),
    "o3": (2.00, 8.00), "o3-mini": (1.10, 4.40), "o4-mini": (1.10, 4.40),
    "gpt-5": (1.25, 10.00), "gpt-5-mini": (0.25, 2.00), "gpt-5-nano": (0.05, 0.40), "gpt-5.1": (1.25, 10.00),
    "claude-3-5-haiku": (0.80, 4.00), "claude-3-7-sonnet": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00), "claude-sonnet-4-5": (3.00, 15.00), "claude-haiku-4-5": (1.00, 5.00),
    "claude-opus-4": (15.00, 75.00), "claude-opus-4-1": (15.00, 75.00), "claude-opus-4-5": (5.00, 25.00),
}
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")

_PLACEHOLDER_KEY = "EMPTY"  # a local server started without --api-key accepts any key (vLLM's docs use this one)
_PING_TIMEOUT_S = 10.0
_MAX_BACKOFF_S = 60.0


def default_prices(model: str) -> tuple[float, float]:
    """(prompt, completion) USD per million tokens from `PRICES`; (0, 0) for a model not listed."""
    return PRICES.get(_SNAPSHOT_SUFFIX.sub("", model), (0.0, 0.0))


def parse_model_specs(specs: Sequence[str], base_url: str | None = None,
                      prices: Mapping[str, tuple[float, float]] | None = None) -> list[ModelSpec]:
    """`--llm` values to specs; several make an ensemble. `base_url` goes to every openai and
    anthropic spec (a local server is free: the price table is used only without it); `prices`
    maps "PROVIDER:MODEL" or "MODEL" to (prompt, completion) USD per million tokens."""
    if not specs:
        raise ConfigError(f"no model given: {SPEC_FORMS}")
    parsed = []
    for text in specs:
        provider, colon, rest = text.strip().partition(":")
        provider, label = _label(provider)
        model, at, weight_text = rest.rpartition("@") if "@" in rest else (rest, "", "")
        try:
            weight = float(weight_text) if at else 1.0
        except ValueError:
            if provider not in LOCAL_PROVIDERS:  # a command or a folder may hold an @ of its own
                raise ConfigError(f"{text!r} is not a model: {SPEC_FORMS}") from None
            model, weight = rest, 1.0
        if not colon or provider not in PROVIDERS or not model.strip():
            raise ConfigError(f"{text!r} is not a model: {SPEC_FORMS}")
        model = model.strip()
        url = base_url if provider in ("openai", "anthropic") else None
        price = (prices or {}).get(label or f"{provider}:{model}") or (prices or {}).get(model)
        if price is None:
            price = default_prices(model) if url is None and provider in ("openai", "anthropic") else (0.0, 0.0)
        parsed.append(ModelSpec(provider, model, url, weight, float(price[0]), float(price[1]), label))
    if base_url and {"openai", "anthropic"} <= {s.provider for s in parsed}:
        raise ConfigError("--base-url names one endpoint but the models use both openai and anthropic: "
                          "drop --base-url or use one provider")
    if len({s.name for s in parsed}) < len(parsed):
        raise ConfigError("the same --llm model is given twice: give it once with a weight (PROVIDER:MODEL@2)")
    return parsed


def _label(provider: str) -> tuple[str, str]:
    """"cmd(NAME)" -> ("cmd", "NAME"); "openai" -> ("openai", "")."""
    if provider.endswith(")") and "(" in provider:
        head, _, label = provider[:-1].partition("(")
        if label.strip():
            return head.strip(), label.strip()
    return provider.strip(), ""


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    """PROVIDER:MODEL (`ModelSpec.name`) of the model that answered; `LLMClient.record` takes it back."""
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    seconds: float
    """Wall time of the call, retries and backoff included."""
    finish_reason: str
    """stop | length (the reply hit max_tokens) | whatever else the endpoint said."""


@dataclass(frozen=True)
class ModelUsage:
    """Totals for one model since the client was made."""

    calls: int = 0
    """Completions returned."""
    errors: int = 0
    """LLMErrors raised (a call that failed for good)."""
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    chosen: int = 0
    """Times `choose` picked this model."""
    recorded: int = 0
    """Outcomes fed back through `record`."""
    improved: int = 0
    """... of which improved on the best candidate."""


TransportFactory = Callable[[ModelSpec, float], Transport]


class LLMClient:
    """Thread-safe; see the module docstring. Why the defaults:

    timeout_s=300: an 8192-token reply at the 30-50 tokens/s of a large local model takes 3-4 min.
    max_retries=5, backoff_s=1: waits of about 1, 2, 4, 8, 16 s (31 s in all, Retry-After honoured,
        each capped at 60 s) ride out a rate-limit window or a server restart, then the call fails.
    concurrency=4: a generation's proposals overlap without tripping low-tier rate limits; raise it
        for a local server with batching (vLLM, SGLang) or a high API tier.
    """

    def __init__(self, specs: Sequence[ModelSpec], *, timeout_s: float = 300.0, max_retries: int = 5,
                 concurrency: int = 4, selection: str = "weight", seed: int = 0, backoff_s: float = 1.0,
                 transport: TransportFactory | None = None) -> None:
        if not specs:
            raise ConfigError(f"no model given: {SPEC_FORMS}")
        if selection not in ("weight", "bandit"):
            raise ConfigError(f"model selection {selection!r} is unknown: use weight or bandit")
        if timeout_s <= 0 or max_retries < 0 or concurrency < 1 or backoff_s < 0:
            raise ConfigError("LLM timeout must be > 0, retries >= 0, concurrency >= 1 and backoff >= 0")
        self.specs = tuple(specs)
        self.timeout_s, self.max_retries, self.backoff_s, self.selection = timeout_s, max_retries, backoff_s, selection
        self._factory = transport or make_transport
        self._transports = {s.name: self._factory(s, timeout_s) for s in self.specs}
        self._usage = {s.name: ModelUsage() for s in self.specs}
        self._slots = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()
        self._choice_rng = random.Random(seed)
        self._jitter_rng = random.Random(seed + 1)

    # -- calls ----------------------------------------------------------------------------------

    def complete(self, messages: list[dict[str, str]], *, model: ModelSpec | None = None, max_tokens: int = 8192,
                 temperature: float = 0.7) -> Completion:
        """One reply from `model` (None: `choose()`); LLMError when it cannot be had."""
        spec = model or self.choose()
        transport = self._transport(spec)
        started = time.monotonic()
        reason = ""
        for attempt in range(self.max_retries + 1):
            try:
                with self._slots:
                    reply = transport.chat(messages, max_tokens=max_tokens, temperature=temperature)
            except TransientError as exc:
                reason = _one_line(str(exc))
                if attempt < self.max_retries:
                    self._add(spec, retries=1)
                    time.sleep(self._backoff(attempt, exc.retry_after_s))
                continue
            except LLMError:
                self._add(spec, errors=1, seconds=time.monotonic() - started)
                raise
            seconds = time.monotonic() - started
            cost = spec.cost(reply.prompt_tokens, reply.completion_tokens)
            self._add(spec, calls=1, prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                      cost_usd=cost, seconds=seconds)
            return Completion(reply.text, spec.name, reply.prompt_tokens, reply.completion_tokens, cost, seconds,
                              reply.finish_reason)
        self._add(spec, errors=1, seconds=time.monotonic() - started)
        raise LLMError(f"{spec.name} failed {self.max_retries + 1} times, the last with {reason}; "
                       f"try again later or raise the timeout or retries")

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        """Exponential with jitter (0.5-1.5x) so parallel callers do not retry in step; at least Retry-After."""
        with self._lock:
            jitter = 0.5 + self._jitter_rng.random()
        delay = self.backoff_s * (2 ** attempt) * jitter
        if retry_after_s is not None:
            delay = max(delay, retry_after_s)
        return min(delay, _MAX_BACKOFF_S)

    def _transport(self, spec: ModelSpec) -> Transport:
        with self._lock:
            if spec.name not in self._transports:  # a model outside the ensemble, asked for by name
                self._transports[spec.name] = self._factory(spec, self.timeout_s)
                self._usage[spec.name] = ModelUsage()
            return self._transports[spec.name]

    def check(self) -> None:
        """Fail fast before a run: ConfigError naming the key to set or the endpoint that cannot be reached."""
        for spec in self.specs:
            self._transports[spec.name].ping()

    # -- choosing models ------------------------------------------------------------------------

    def choose(self) -> ModelSpec:
        """A model for the next request: by weight (seeded), or UCB1 on the improvement rate."""
        with self._lock:
            spec = self._choose_by_weight() if self.selection == "weight" else self._choose_by_bandit()
            self._bump(spec, chosen=1)
            return spec

    def _choose_by_weight(self) -> ModelSpec:
        if len(self.specs) == 1:
            return self.specs[0]
        return self._choice_rng.choices(self.specs, weights=[s.weight for s in self.specs])[0]

    def _choose_by_bandit(self) -> ModelSpec:
        """UCB1 (Auer et al. 2002). Pulls are counted when chosen, not when recorded: a generation
        asks for several models before any result is back, and must spread them out. The mean is
        smoothed ((improved + 1) / (recorded + 2)) so a model whose results are pending is not 0."""
        untried = [s for s in self.specs if self._usage[s.name].chosen == 0]
        if untried:
            return untried[0]
        total = sum(self._usage[s.name].chosen for s in self.specs)

        def score(spec: ModelSpec) -> float:
            u = self._usage[spec.name]
            return (u.improved + 1) / (u.recorded + 2) + math.sqrt(2 * math.log(total) / u.chosen)

        best = max(score(s) for s in self.specs)
        return self._choice_rng.choice([s for s in self.specs if score(s) >= best - 1e-12])

    def record(self, model: str, improved: bool) -> None:
        """Feed the bandit: did a proposal of `model` (PROVIDER:MODEL, or MODEL) verify and improve?
        Unknown names are ignored (an archive may hold attempts of models no longer in the ensemble)."""
        with self._lock:
            for spec in self.specs:
                if model in (spec.name, spec.model):
                    self._bump(spec, recorded=1, improved=int(improved))
                    return

    # -- accounting -----------------------------------------------------------------------------

    @property
    def usage(self) -> dict[str, ModelUsage]:
        """Totals per PROVIDER:MODEL (a snapshot)."""
        with self._lock:
            return dict(self._usage)

    def _add(self, spec: ModelSpec, **amounts: Any) -> None:
        with self._lock:
            self._bump(spec, **amounts)

    def _bump(self, spec: ModelSpec, **amounts: Any) -> None:
        """Caller holds the lock."""
        u = self._usage[spec.name]
        self._usage[spec.name] = replace(u, **{k: getattr(u, k) + v for k, v in amounts.items()})


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _status_error(spec: ModelSpec, status: int, message: str, retry_after: str | None = None) -> Exception:
    """429, 408, 409 and 5xx are worth another try; any other 4xx is an answer."""
    if status in (408, 409, 429) or status >= 500:
        try:
            seconds = float(retry_after) if retry_after else None
        except ValueError:
            seconds = None  # an HTTP date: fall back to our backoff
        return TransientError(f"HTTP {status}: {_one_line(message)}", seconds)
    return LLMError(f"{spec.name} refused the request with HTTP {status}: {_one_line(message)}")


# -- transports: the only code that calls the SDKs -----------------------------------------------

def make_transport(spec: ModelSpec, timeout_s: float) -> Transport:
    if spec.provider == "openai":
        return OpenAITransport(spec, timeout_s)
    if spec.provider == "anthropic":
        return AnthropicTransport(spec, timeout_s)
    if spec.provider in LOCAL_PROVIDERS:
        return CommandTransport(spec, timeout_s) if spec.provider == "cmd" else InboxTransport(spec, timeout_s)
    return ReplayTransport(spec, timeout_s)


class _SDKTransport:
    """Shared by the two SDK transports: key and endpoint from the spec or the environment."""

    key_env = ""
    url_env = ""
    hosted_url = ""

    def __init__(self, spec: ModelSpec, timeout_s: float) -> None:
        self.spec, self.timeout_s = spec, timeout_s
        self.base_url = spec.base_url or os.environ.get(self.url_env) or None
        self.key = os.environ.get(self.key_env) or (_PLACEHOLDER_KEY if self.base_url else None)
        self._client: Any = None
        self._lock = threading.Lock()
        self._takes_temperature = True

    @property
    def url(self) -> str:
        return (self.base_url or self.hosted_url).rstrip("/")

    def missing_key(self) -> str | None:
        if self.key is None:
            return (f"set {self.key_env} to use {self.spec.name} (or --base-url URL for a local "
                    f"{self.spec.provider}-compatible server, which needs no key)")
        return None

    def client(self) -> Any:
        missing = self.missing_key()
        if missing:
            raise LLMError(missing)
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> Any:
        raise NotImplementedError

    def ping(self) -> None:
        missing = self.missing_key()
        if missing:
            raise ConfigError(missing)
        sdk = self._sdk()
        try:
            self._list_models(self.client().with_options(timeout=min(self.timeout_s, _PING_TIMEOUT_S)))
        except sdk.APIConnectionError:
            fix = "start the server or fix --base-url" if self.base_url else "check the network connection"
            raise ConfigError(f"cannot reach {self.url}: {fix}") from None
        except sdk.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise ConfigError(f"{self.url} refused the key (HTTP {exc.status_code}): set a valid "
                                  f"{self.key_env}") from None
            # anything else (e.g. a server without /models) still proves the endpoint answers

    def _sdk(self) -> Any:
        raise NotImplementedError

    def _list_models(self, client: Any) -> None:
        raise NotImplementedError

    def _send(self, create: Callable[..., Any], kwargs: dict[str, Any], with_temperature: dict[str, Any]) -> Any:
        """Send the temperature while the model takes it. Reasoning models (OpenAI's o-series and
        gpt-5, Anthropic's newest) refuse it with HTTP 400; this model is then asked without it."""
        if self._takes_temperature:
            try:
                return self._call(lambda: create(**kwargs, **with_temperature))
            except LLMError as exc:
                if "temperature" not in str(exc).replace(self.spec.name, ""):
                    raise
                self._takes_temperature = False
        return self._call(lambda: create(**kwargs))

    def _call(self, create: Callable[[], Any]) -> Any:
        """Run one SDK request, turning the SDK's exceptions into ours."""
        sdk = self._sdk()
        try:
            return create()
        except sdk.APITimeoutError:
            raise TransientError(f"no reply within {self.timeout_s:g} s") from None
        except sdk.APIConnectionError as exc:
            raise TransientError(f"connection to {self.url} failed ({exc.__cause__ or exc})") from None
        except sdk.APIStatusError as exc:
            raise _status_error(self.spec, exc.status_code, exc.message,
                                exc.response.headers.get("retry-after")) from None
        except sdk.APIError as exc:  # e.g. a reply that does not parse
            raise LLMError(f"{self.spec.name} sent an unusable reply: {_one_line(str(exc))}") from None


class OpenAITransport(_SDKTransport):
    """The official openai SDK against api.openai.com or any OpenAI-compatible server."""

    key_env, url_env, hosted_url = "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1"

    def _sdk(self) -> Any:
        import openai
        return openai

    def _make_client(self) -> Any:
        import openai
        return openai.OpenAI(api_key=self.key, base_url=self.base_url, timeout=self.timeout_s, max_retries=0)

    def _list_models(self, client: Any) -> None:
        client.models.list()

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> Reply:
        client = self.client()
        kwargs: dict[str, Any] = {"model": self.spec.model, "messages": messages}
        hosted = self.base_url is None
        # api.openai.com deprecated max_tokens (its reasoning models refuse it); local servers
        # (vLLM, Ollama, llama.cpp) have long understood max_tokens, not all the new name
        kwargs["max_completion_tokens" if hosted else "max_tokens"] = max_tokens
        response = self._send(client.chat.completions.create, kwargs, {"temperature": temperature})
        if not response.choices:
            raise LLMError(f"{self.spec.name} sent a reply with no choices")
        choice = response.choices[0]
        text = choice.message.content or ""
        usage = response.usage
        prompt_tokens = usage.prompt_tokens if usage else estimate_tokens("".join(m["content"] for m in messages))
        completion_tokens = usage.completion_tokens if usage else estimate_tokens(text)
        return Reply(text, prompt_tokens, completion_tokens, choice.finish_reason or "stop")


class AnthropicTransport(_SDKTransport):
    """The official anthropic SDK (Messages API); the system message goes into `system=`."""

    key_env, url_env, hosted_url = "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "https://api.anthropic.com"

    def __init__(self, spec: ModelSpec, timeout_s: float) -> None:
        super().__init__(spec, timeout_s)
        if self.base_url:
            # the SDK appends /v1/messages itself; "http://host/v1" is the usual mistake
            self.base_url = re.sub(r"/v1/?$", "", self.base_url)

    def _sdk(self) -> Any:
        import anthropic
        return anthropic

    def _make_client(self) -> Any:
        import anthropic
        return anthropic.Anthropic(api_key=self.key, base_url=self.base_url, timeout=self.timeout_s, max_retries=0)

    def _list_models(self, client: Any) -> None:
        client.models.list(limit=1)

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> Reply:
        client = self.client()
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        turns = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
        kwargs: dict[str, Any] = {"model": self.spec.model, "messages": turns, "max_tokens": max_tokens}
        if system:
            kwargs["system"] = system
        # anthropic>=1.0 dropped `temperature` from create()'s signature (its MIGRATION.md: send it
        # in extra_body); the API still takes it for the models that have one
        response = self._send(client.messages.create, kwargs, {"extra_body": {"temperature": temperature}})
        text = "".join(getattr(block, "text", "") for block in response.content if block.type == "text")
        stop = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}
        finish = stop.get(response.stop_reason, response.stop_reason or "stop")
        return Reply(text, response.usage.input_tokens, response.usage.output_tokens, finish)


class ReplayTransport:
    """Recorded replies from the JSONL file named by the spec's model (see replay.py); no network.
    The file is read once, here, so a bad file is a ConfigError when the client is made."""

    def __init__(self, spec: ModelSpec, timeout_s: float) -> None:
        self.spec, self.timeout_s = spec, timeout_s
        self.replies = RecordedReplies.from_file(spec.model)

    def ping(self) -> None:
        pass  # read in __init__

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> Reply:
        entry = self.replies.take(last_user_text(messages))
        if entry is None:
            raise LLMError(self.replies.none_left_message())
        if entry.delay_s > 0:
            time.sleep(min(entry.delay_s, self.timeout_s))
            if entry.delay_s > self.timeout_s:
                raise TransientError(f"no reply within {self.timeout_s:g} s")
        if entry.status is not None:
            raise _status_error(self.spec, entry.status, entry.reply or f"injected HTTP {entry.status}",
                                None if entry.retry_after_s is None else str(entry.retry_after_s))
        prompt = "\n".join(m["content"] for m in messages)
        return Reply(entry.reply,
                     entry.prompt_tokens if entry.prompt_tokens is not None else estimate_tokens(prompt),
                     entry.completion_tokens if entry.completion_tokens is not None else estimate_tokens(entry.reply),
                     entry.finish_reason)
