"""Proposers: where candidate kernels come from (an LLM, recorded replies, templates).

A proposer turns a prompt context into a `Proposal`: the candidate it produced (or why it
produced none) plus everything needed to reproduce and learn from it — the rendered prompt,
the raw reply, the performance analysis the reply contained, and what it cost. `llm.py` is
the only code that talks to LLM APIs; `prompts/` holds the templates as data; `parse.py`
turns replies into sources; `replay.py` serves recorded replies.
"""

from __future__ import annotations

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
    """Why there is no candidate: one sentence (unparseable reply, truncated output, LLM error)."""
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
