"""The seam between `LLMClient` and a model: a `ModelSpec` names the model, a `Transport` (one per
model, made from its spec) sends one request and returns a `Reply`, or raises `TransientError` for
a try worth retrying and `LLMError` to give up. llm.py holds the client and the SDK transports,
external.py the `cmd` and `inbox` ones; this module holds only what both sides share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from warpforge.errors import ConfigError

PROVIDERS = ("openai", "anthropic", "replay", "cmd", "inbox")
LOCAL_PROVIDERS = ("cmd", "inbox")
"""Reached through a program or files on this machine (external.py): no endpoint, no price table."""

SPEC_FORMS = ("--llm takes PROVIDER:MODEL or PROVIDER:MODEL@WEIGHT with PROVIDER one of openai, anthropic, "
              "replay, cmd, inbox and WEIGHT a positive number (e.g. openai:gpt-4o@2, replay:replies.jsonl, "
              "'cmd:claude -p', inbox:DIR; cmd(NAME):COMMAND records NAME as the model)")


class TransientError(Exception):
    """One try failed in a way worth retrying (429, 5xx, timeout, lost connection)."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    """openai (any OpenAI-compatible endpoint: hosted, vLLM, SGLang, Ollama, llama.cpp server) | anthropic | replay
    | cmd (a command per request) | inbox (request and reply files)."""
    model: str
    """The model name; for replay, the path of a JSONL file of recorded replies; for cmd, the
    command; for inbox, the folder."""
    base_url: str | None = None
    """None: the provider's hosted API (or OPENAI_BASE_URL / ANTHROPIC_BASE_URL when set)."""
    weight: float = 1.0
    price_in_per_mtok: float = 0.0
    """USD per million prompt tokens."""
    price_out_per_mtok: float = 0.0
    """USD per million completion tokens."""
    label: str = ""
    """The name recorded for this model (cmd(NAME):COMMAND); "" for PROVIDER:MODEL."""

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS or not self.model:
            raise ConfigError(f"{self.provider}:{self.model} is not a model: {SPEC_FORMS}")
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ConfigError(f"{self.name} has weight {self.weight}: give a positive number after @")
        if min(self.price_in_per_mtok, self.price_out_per_mtok) < 0:
            raise ConfigError(f"{self.name} has a negative price: prices are USD per million tokens, 0 or more")

    @property
    def name(self) -> str:
        return self.label or f"{self.provider}:{self.model}"

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_in_per_mtok + completion_tokens * self.price_out_per_mtok) / 1e6


@dataclass(frozen=True)
class Reply:
    """What a transport returns for one successful request."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


class Transport(Protocol):
    """The I/O seam: one per model. `chat` raises TransientError (retry) or LLMError (give up)."""

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> Reply: ...

    def ping(self) -> None:
        """One cheap request; ConfigError saying what to fix when the endpoint cannot be used."""
        ...
