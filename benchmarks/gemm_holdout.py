"""Offline: how would a choice for shapes the tuner never measured do?

Leave-one-out over the committed tune records (`gemm tune` writes, per shape, the screen time of
every candidate it tried: the Triton families' configurations, the mma kernels, torch.matmul,
cuBLASLt's heuristic list). For each tuned shape H, a rule picks a choice from the *other*
shapes' records only, and the pick is scored by H's own screen time of that choice against H's
screen time of torch.matmul (the same few-call screen for both, so noisy per shape but unbiased
between rules). A choice that H's record does not hold (not screened there) counts as
torch.matmul, 1.0x. Portable choices transfer: Triton, mma and CUTLASS configurations by name.
A cuBLASLt choice `cublaslt:<i>[/variant]` names the i-th algorithm of each problem's own heuristic
list; the `+lt` rules transfer it as that, re-resolved for H (H's i-th algorithm with the same
reconfiguration), which the tune records hold since the tuner screens every heuristic algorithm.

Rules:
  torch        always torch.matmul (1.0x by definition)
  dispatcher   today's: the nearest tuned shape within 2x in each of M, N, K (log space) whose
               table choice the dispatcher hands on (dispatch.transferred: Triton, mma, padding;
               not CUTLASS since 2026-11-27); else torch
  dispatcher+cutlass
               the same, handing CUTLASS choices on too (the dispatcher's rule before 2026-11-27)
  nearest      the nearest tuned shape at any distance whose table choice is portable
  knn-K        the K nearest tuned shapes vote: each proposes its fastest portable configuration;
               the configuration with the best mean time relative to torch over the neighbours
               that screened it wins if that mean is below 0.97, else torch
  model        a small regression over shape features: per configuration that is the fastest on at
               least 3 other shapes, least squares of log(its time / torch's) on the quadratic
               terms of log M, log N, log K over the other shapes that screened it; H takes the
               configuration with the lowest prediction if that is below log(0.97), else torch
  oracle       H's own fastest portable configuration or torch (what tuning H itself finds)
  dispatcher+lt, knn-5+lt, model+lt, oracle+lt
               the same, with cuBLASLt choices transferring as re-resolved heuristic positions

    python benchmarks/gemm_holdout.py --out DIR TUNE.jsonl [TUNE.jsonl ...]

prints a table and writes DIR/gemm_holdout_<date>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from warpforge.gemm.dispatch import transferred

PORTABLE = ("triton_", "mma_", "cutlass_")
RERESOLVED = PORTABLE + ("cublaslt:",)


def _prefixed(*prefixes: str) -> Callable[[str], bool]:
    return lambda choice: choice.startswith(prefixes)


HANDED_ON: dict[str, Callable[[str], bool]] = {
    "dispatcher": transferred, "dispatcher+cutlass": _prefixed(*PORTABLE),
    "dispatcher+lt": lambda choice: transferred(choice) or choice.startswith("cublaslt:")}


def load(path: Path) -> list[dict]:
    shapes = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        times = {c["name"]: (c.get("screen") or c["prescreen"])["ms"] for c in r.get("candidates", [])
                 if c.get("status") == "ok" and (c.get("screen") or c.get("prescreen") or {}).get("ms")}
        if "torch" not in times:
            continue
        portable = {n: t for n, t in times.items() if n.startswith(PORTABLE)}
        with_lt = {n: t for n, t in times.items() if n.startswith(RERESOLVED)}
        shapes.append({"shape": (int(r["M"]), int(r["N"]), int(r["K"])), "layout": r["layout"], "dtype": r["dtype"],
                       "choice": str(r.get("choice", "torch")), "torch": times["torch"], "times": times,
                       "best_portable": min(portable, key=portable.get) if portable else None,
                       "best_portable+lt": min(with_lt, key=with_lt.get) if with_lt else None})
    return shapes


def distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    return math.sqrt(sum(math.log(x / y) ** 2 for x, y in zip(a, b)))


def within_2x(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return all(0.5 <= x / y <= 2 for x, y in zip(a, b))


def pick(rule: str, h: dict, others: list[dict]) -> str:
    handed_on = HANDED_ON.get(rule)
    if handed_on:
        rule = "dispatcher"
    rule, lt = rule.removesuffix("+lt"), rule.endswith("+lt")
    portable, best_key = (RERESOLVED, "best_portable+lt") if lt else (PORTABLE, "best_portable")
    same = sorted((o for o in others if o["layout"] == h["layout"] and o["dtype"] == h["dtype"]),
                  key=lambda o: distance(o["shape"], h["shape"]))
    if rule == "torch":
        return "torch"
    if rule == "oracle":
        best = h[best_key]
        return best if best and h["times"][best] < h["torch"] else "torch"
    if rule == "model":
        return pick_model(h, others, best_key)
    if rule in ("dispatcher", "nearest"):
        for o in same:
            if rule == "dispatcher" and not within_2x(o["shape"], h["shape"]):
                continue
            if (handed_on or _prefixed(*portable))(o["choice"]):
                return o["choice"]
            if rule == "dispatcher":
                return "torch"  # the nearest bucket's choice is not portable: today's dispatcher stops here
        return "torch"
    k = int(rule.split("-")[1])
    neighbours = same[:k]
    proposals = {o[best_key] for o in neighbours if o[best_key]}
    scored = []
    for name in proposals:
        ratios = [o["times"][name] / o["torch"] for o in neighbours if name in o["times"]]
        if ratios:
            scored.append((statistics.fmean(ratios), name))
    if not scored:
        return "torch"
    mean, name = min(scored)
    return name if mean < 0.97 else "torch"


def features(shape: tuple[int, int, int]) -> list[float]:
    x, y, z = (math.log(v) for v in shape)
    return [1.0, x, y, z, x * x, y * y, z * z, x * y, x * z, y * z]


def pick_model(h: dict, others: list[dict], best_key: str) -> str:
    """The `model` rule: per configuration, a least-squares fit of log(time / torch) over the other
    shapes' features, predicted at H."""
    import numpy as np

    same = [o for o in others if o["layout"] == h["layout"] and o["dtype"] == h["dtype"]]
    wins: dict[str, int] = {}
    for o in same:
        if o[best_key] and o["times"][o[best_key]] < o["torch"]:
            wins[o[best_key]] = wins.get(o[best_key], 0) + 1
    best, best_pred = "torch", math.log(0.97)
    at = np.array(features(h["shape"]))
    for name in (n for n, c in wins.items() if c >= 3 and n in h["times"]):  # H's own candidates: the tuner's
        # pruning is a function of the shape alone (triton_gemm.candidate_configs), known without timing H
        rows = [(features(o["shape"]), math.log(o["times"][name] / o["torch"])) for o in same if name in o["times"]]
        if len(rows) < 20:
            continue
        x = np.array([f for f, _ in rows])
        y = np.array([t for _, t in rows])
        coef = np.linalg.solve(x.T @ x + 1e-3 * np.eye(x.shape[1]), x.T @ y)  # a little ridge: few shapes a config
        pred = float(at @ coef)
        if pred < best_pred:
            best, best_pred = name, pred
    return best


def score(h: dict, choice: str) -> float:
    return h["torch"] / h["times"][choice] if choice in h["times"] else 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path,
                    help="tune records (`gemm tune` writes OUT/tune.jsonl; the H100 grid's are in git history, benchmarks/results/README.md says where)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rules = ["torch", "dispatcher", "dispatcher+cutlass", "nearest", "knn-3", "knn-5", "knn-9", "model", "oracle", "dispatcher+lt",
             "knn-5+lt", "model+lt", "oracle+lt"]
    report: dict = {"date": datetime.date.today().isoformat(), "method": "leave-one-out on screen times", "sets": {}}
    for path in args.files:
        shapes = load(path)
        rows = {}
        for rule in rules:
            speedups, unknown = [], 0
            for i, h in enumerate(shapes):
                choice = pick(rule, h, shapes[:i] + shapes[i + 1:])
                if choice != "torch" and choice not in h["times"]:
                    unknown += 1
                speedups.append(score(h, choice))
            rows[rule] = {"geomean": round(math.exp(statistics.fmean(math.log(s) for s in speedups)), 4),
                          "below_0.99": sum(1 for s in speedups if s < 0.99), "worst": round(min(speedups), 3),
                          "not_screened_there": unknown, "n": len(speedups)}
        report["sets"][path.name] = rows
        print(f"\n{path.name}: {len(shapes)} tuned shapes, leave-one-out (screen times)")
        print(f"{'rule':18s} {'geomean':>8s} {'<0.99x':>7s} {'worst':>7s} {'unscreened':>10s}")
        for rule, r in rows.items():
            print(f"{rule:18s} {r['geomean']:8.4f} {r['below_0.99']:7d} {r['worst']:7.3f} {r['not_screened_there']:10d}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gemm_holdout_{report['date']}.json"
    path.write_text(json.dumps(report, indent=1))
    print("wrote", path)


if __name__ == "__main__":
    main()
