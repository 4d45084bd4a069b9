"""Search strategies, the acceptance rule and kernel features, on hand-made attempts (no evaluator)."""

from __future__ import annotations

from warpforge.archive import Attempt
from warpforge.search.best_of_n import best_of_n
from warpforge.search.evolve import ISLANDS, MIGRATE_EVERY, _island, elites, evolve
from warpforge.search.features import features_of, language_of
from warpforge.search.plan import beats, incumbent
from warpforge.search.retrieval import similarity

TRITON = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x, BLOCK: tl.constexpr = 128):\n    tl.dot(a, b)\n"
CUDA = 'from torch.utils.cpp_extension import load_inline\ncuda_src = "__global__ void k() { __shared__ float t[32]; }"\n' \
       'load_inline(name="k", cpp_sources="", cuda_sources=cuda_src)\n'
TORCH = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"


def attempt(id: int, step: int, ms: float | None, iqr: float = 0.01, source: str = TORCH, island: int = 0,
            status: str | None = "correct") -> Attempt:
    timed = status == "correct" and ms is not None
    return Attempt(id=id, run_id="r", task="t", step=step, source=source, source_hash=f"h{id}", island=island,
                   status=status, correct=status == "correct" if status else None, candidate_ms=ms if timed else None,
                   candidate_iqr_ms=iqr if timed else None, speedup=(1.0 / ms) if timed and ms else None,
                   evaluation_id=id if status else None)


def test_beats_needs_a_win_beyond_the_measured_spread() -> None:
    old = attempt(1, 0, 1.0, iqr=0.2)
    assert beats(attempt(2, 1, 0.7, iqr=0.2), old)  # 0.3 > (0.2 + 0.2) / 2
    assert not beats(attempt(3, 1, 0.85, iqr=0.2), old)  # inside the noise: the incumbent stays
    assert not beats(attempt(4, 1, 0.1, status="incorrect"), old)  # wrong programs never win
    assert beats(attempt(5, 1, 5.0), None)  # anything correct beats nothing


def test_the_incumbent_is_replayed_in_step_order() -> None:
    attempts = [attempt(3, 2, 0.95, iqr=0.2), attempt(1, 0, 1.0, iqr=0.2), attempt(2, 1, 0.5, iqr=0.05)]
    assert incumbent(attempts).id == 2  # type: ignore[union-attr]
    assert incumbent([attempt(1, 0, None, status="compile_error")]) is None


def test_best_of_n_only_translates() -> None:
    plans = best_of_n([attempt(1, 0, 1.0)], [], 3, 1, 0)
    assert [p.strategy for p in plans] == ["translate"] * 3


def test_evolve_translates_or_repairs_until_something_is_correct() -> None:
    failed = attempt(1, 0, None, status="compile_error")
    for seed in range(20):
        plans = evolve([failed], [], 4, 1, seed)
        assert {p.strategy for p in plans} <= {"translate", "repair"}
        for p in plans:
            if p.strategy == "repair":
                assert p.current is failed and p.parent_ids == (1,)
    assert [p.island for p in evolve([], [], 4, 0, 0)] == [i % ISLANDS for i in range(4)]


def test_evolve_uses_every_operator_and_is_deterministic_for_a_seed() -> None:
    attempts = [attempt(1, 0, 1.0), attempt(2, 1, 0.5, source=TRITON), attempt(3, 2, 0.8, source=CUDA),
                attempt(4, 3, None, status="runtime_error"), attempt(5, 4, 0.6, island=1)]
    stones = [attempt(9, 0, 0.2)]
    seen = set()
    for seed in range(40):
        plans = evolve(attempts, stones, 4, 1, seed)
        assert [(p.strategy, p.parent_ids) for p in plans] == [(p.strategy, p.parent_ids)
                                                                for p in evolve(attempts, stones, 4, 1, seed)]
        seen |= {p.strategy for p in plans}
        for p in plans:
            if p.strategy == "contrastive":
                assert len(p.variants) >= 2
                times = [v.candidate_ms for v in p.variants if v.timed]
                assert times == sorted(times, reverse=True)  # slowest first, from different buckets
            if p.strategy == "crossover":
                assert len(set(p.parent_ids)) == 2
            if p.strategy == "optimise":
                assert p.current is not None and p.current.timed
    assert seen == {"optimise", "contrastive", "crossover", "retrieval", "repair"}


def test_elites_keep_the_fastest_of_each_kind_and_islands_meet_on_migration() -> None:
    attempts = [attempt(1, 0, 1.0), attempt(2, 1, 0.9, source=TORCH + "#2"), attempt(3, 2, 2.0, source=TRITON)]
    assert [a.id for a in elites(attempts)] == [2, 3]  # a slower Triton kernel survives beside the PyTorch one
    lone = [attempt(1, 0, 1.0, island=0), attempt(2, 1, 0.3, island=1)]
    assert [a.id for a in _island(lone, 0, MIGRATE_EVERY - 1)] == [1]  # islands evolve apart ...
    assert [a.id for a in _island(lone, 0, MIGRATE_EVERY)] == [1, 2]  # ... and meet the neighbour's best


def test_features_read_the_kernel_kind() -> None:
    t, c, p = features_of(TRITON), features_of(CUDA), features_of(TORCH)
    assert (t.language, t.tensor_cores, t.kernels, t.tile) == ("triton", True, 1, "BLOCK=128")
    assert (c.language, c.shared_memory, c.kernels) == ("cuda", True, 1)
    assert (p.language, p.kernels, p.cell) == ("pytorch", 0, ("pytorch", False, False, False))
    assert language_of("from cupy import RawKernel") == "nvrtc"
    assert language_of("from torch.utils.cpp_extension import load_inline\nload_inline(cpp_sources=s)") == "cpp"


def test_retrieval_similarity_prefers_tasks_using_the_same_ops() -> None:
    softmax = "def forward(self, x): return torch.softmax(x, dim=-1)"
    masked = "def forward(self, s): return torch.softmax(s.masked_fill(m, 0), dim=-1)"
    conv = "def forward(self, x): return self.conv(x)"
    assert similarity(softmax, masked) > similarity(softmax, conv)
