"""Proposers: where candidate kernels come from (an LLM, recorded replies, templates).

A proposer turns a prompt context into a `Proposal`: the candidate it produced (or why it
produced none) plus everything needed to reproduce and learn from it — the rendered prompt,
the raw reply, the performance analysis the reply contained, and what it cost. `llm.py` is
the only code that talks to LLM APIs; `prompts/` holds the templates as data; `parse.py`
turns replies into sources; `replay.py` serves recorded replies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from warpforge.candidate import Candidate


@dataclass(frozen=True)
class Proposal:
    """One attempt to produce a candidate for one task."""

    task: str
    strategy: str
    """translate, repair, optimise, contrastive, crossover, retrieval (or a template name)."""
    model: str = ""
    """PROVIDER:MODEL of the LLM that answered ("" for non-LLM proposers)."""
    candidate: Candidate | None = None
    """None when the reply held no usable program (see `failure`)."""
    failure: str = ""
    """Why there is no candidate: one sentence (unparseable reply, truncated output, LLM error,
    or `DUPLICATE`: the program repeats an earlier candidate)."""
    prompt: str = ""
    """The rendered prompt as a JSON list of chat messages."""
    reply: str = ""
    analysis: str = ""
    """The reply's performance analysis and plan (contrastive prompts demand one)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    """Wall time of the LLM call(s) that produced this proposal."""


DUPLICATE = "duplicate of candidate #{id}: the reply repeated its program, which is not evaluated again"
"""The `failure` of a reply whose program (by Candidate.id, the source hash) its task's run already
has: recorded with no source, not evaluated again, and not counted as a failed attempt."""
# the second form is how archives written before issue 39 recorded the same thing
_DUPLICATE = re.compile(r"(?:duplicate of|the same source as) candidate #(\d+)")


def duplicate_of(failure: str) -> int | None:
    """The candidate a reply repeated, read from its failure (`DUPLICATE`); None for any other failure."""
    found = _DUPLICATE.match(failure or "")
    return int(found.group(1)) if found else None
