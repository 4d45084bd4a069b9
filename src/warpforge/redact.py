"""Redaction of secrets from text that a child process produced, before it is stored or shown.

`redact(text)` replaces the values of this process's secret-looking environment variables
(names with KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL) and well-known token shapes (OpenAI,
Anthropic, GitHub, Hugging Face, AWS, Slack, bearer tokens) with `[REDACTED]`. It is a net
for known shapes, not a guarantee: an encoded or split secret passes through.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

MARK = "[REDACTED]"
MIN_SECRET_CHARS = 8
"""Shorter values ("1", "true") would redact ordinary words."""

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# A token starts where no identifier character precedes it, so `mask-...` or `self.hf_x` stay
# (one look-behind for all shapes: ten times faster than one per shape on a 6 kB log).
_TOKENS = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join((
    r"sk-ant-[A-Za-z0-9_\-]{16,}",              # Anthropic
    r"sk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,}",  # OpenAI (and compatible servers)
    r"gh[pousr]_[A-Za-z0-9]{30,}",              # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{22,}",            # GitHub fine-grained tokens
    r"hf_[A-Za-z0-9]{30,}",                     # Hugging Face
    r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",   # AWS access key ids
    r"xox[abprs]-[A-Za-z0-9\-]{10,}",           # Slack
)) + ")")
_BEARER = re.compile(r"(\bBearer\s+)[A-Za-z0-9._~+/=\-]{16,}", re.IGNORECASE)


_NOT_SECRET_NAMES = frozenset({"TOKENIZERS_PARALLELISM"})


def secret_values() -> list[str]:
    """The values of secret-looking environment variables, read now (a key set later counts),
    longest first so a value that contains another is replaced whole. A value naming an existing
    file (GOOGLE_APPLICATION_CREDENTIALS=/path/creds.json) is a path, not a secret: redacting it
    would blank that folder out of every compiler log."""
    values = {v for k, v in os.environ.items()
              if len(v) >= MIN_SECRET_CHARS and _SECRET_NAME.search(k) and k not in _NOT_SECRET_NAMES
              and not (v[0] in "/~" and os.path.exists(os.path.expanduser(v)))}
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: Sequence[str] | None = None) -> str:
    """`text` with every known secret replaced by `[REDACTED]`; idempotent. `secrets`: the
    environment's values when already read (`secret_values()`), for many texts at once."""
    if not text:
        return text
    for value in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, MARK)
    text = _TOKENS.sub(MARK, text)
    return _BEARER.sub(lambda m: m.group(1) + MARK, text)


def redact_data(value: Any, secrets: Sequence[str] | None = None) -> Any:
    """`value` with `redact` applied to every string inside dicts, lists and tuples (keys too)."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {redact_data(k, secrets): redact_data(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_data(v, secrets) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_data(v, secrets) for v in value)
    return value
