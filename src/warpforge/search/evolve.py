"""Evolutionary search: islands of attempts, elites per feature cell, and five operators.

Each slot of a generation belongs to an island (slot % islands). An island with nothing
correct yet translates the reference, or repairs its latest failure. Otherwise it picks an
operator at random with fixed weights: optimise its best elite, a contrastive prompt with
scored variants from different performance buckets (CUDA-L1), crossover of two elites from
different cells, retrieval of stepping stones from other tasks (the AI CUDA Engineer's
innovation archive), or repair. Elites are the fastest correct attempt per feature cell
(features.py: language, tensor cores, shared memory, fusion), so a slower kernel of a new
kind survives beside the incumbent. Every MIGRATE_EVERY generations an island also sees its
neighbour's best. Choices depend only on the attempts and (seed, generation, slot), so a
resumed run plans what an uninterrupted one would have.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from warpforge.archive import Attempt
from warpforge.propose.prompts import Variant, pick_contrastive
from warpforge.search.features import features_of
from warpforge.search.plan import Plan, beats

ISLANDS = 2
MIGRATE_EVERY = 3
WEIGHTS = {"optimise": 0.3, "contrastive": 0.3, "crossover": 0.15, "retrieval": 0.1, "repair": 0.15}
CONTRASTIVE_VARIANTS = 3
REPAIRABLE = ("compile_error", "runtime_error", "incorrect", "timeout")


def evolve(attempts: Sequence[Attempt], stones: Sequence[Attempt], slots: int, generation: int,
           seed: int) -> list[Plan]:
    plans = []
    for slot in range(slots):
        rng = random.Random(f"{seed}:{generation}:{slot}")
        island = slot % ISLANDS
        plans.append(_plan(island, _island(attempts, island, generation), attempts, stones, rng))
    return plans


def _island(attempts: Sequence[Attempt], island: int, generation: int) -> list[Attempt]:
    own = [a for a in attempts if (a.island or 0) % ISLANDS == island]
    if generation and generation % MIGRATE_EVERY == 0:
        neighbour = [a for a in attempts if (a.island or 0) % ISLANDS == (island - 1) % ISLANDS and a.timed]
        if neighbour:
            own.append(min(neighbour, key=lambda a: a.candidate_ms or float("inf")))
    return own


def elites(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The fastest correct attempt of each feature cell, fastest first."""
    best: dict[tuple[object, ...], Attempt] = {}
    for a in sorted(attempts, key=lambda a: (a.step, a.id)):
        if not a.timed or a.source is None:
            continue
        cell = features_of(a.source).cell
        if beats(a, best.get(cell)):
            best[cell] = a
    return sorted(best.values(), key=lambda a: a.candidate_ms or float("inf"))


def _plan(island: int, members: list[Attempt], everyone: Sequence[Attempt], stones: Sequence[Attempt],
          rng: random.Random) -> Plan:
    failures = [a for a in members if a.source is not None and a.status in REPAIRABLE]
    top = elites(members)
    if not top:
        if failures and rng.random() < 0.5:
            return Plan("repair", island, current=failures[-1])
        if stones and rng.random() < 0.25:
            return Plan("retrieval", island, stones=tuple(stones))
        return Plan("translate", island)
    options = {"optimise": True, "contrastive": len([a for a in everyone if a.source is not None and a.status]) >= 2,
               "crossover": len(top) >= 2 or len([a for a in members if a.timed]) >= 2,
               "retrieval": bool(stones), "repair": bool(failures)}
    names = [n for n, ok in options.items() if ok]
    choice = rng.choices(names, weights=[WEIGHTS[n] for n in names])[0]
    if choice == "optimise":
        return Plan("optimise", island, current=top[0] if rng.random() < 0.7 else rng.choice(top))
    if choice == "contrastive":
        return Plan("contrastive", island, variants=tuple(_buckets(everyone, rng)))
    if choice == "crossover":
        pool = top if len(top) >= 2 else sorted((a for a in members if a.timed), key=lambda a: a.candidate_ms or 0.0)
        return Plan("crossover", island, parents=(pool[0], rng.choice(pool[1:])))
    if choice == "retrieval":
        return Plan("retrieval", island, current=top[0], stones=tuple(stones))
    return Plan("repair", island, current=failures[-1])


def _buckets(attempts: Sequence[Attempt], rng: random.Random) -> list[Attempt]:
    """CONTRASTIVE_VARIANTS attempts from different performance buckets, slowest first
    (prompts.pick_contrastive decides; this maps its choice back to attempts)."""
    by_id = {a.id: a for a in attempts if a.source is not None and a.status}
    variants = [Variant(a.source or "", a.status or "", a.speedup if a.timed else None, candidate_id=a.id)
                for a in by_id.values()]
    return [by_id[v.candidate_id] for v in pick_contrastive(variants, CONTRASTIVE_VARIANTS, rng)
            if v.candidate_id is not None]
