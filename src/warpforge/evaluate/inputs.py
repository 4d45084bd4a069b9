"""Input distributions for the correctness trials, fresh content for timed calls, and output fingerprints.

Each trial draws the task's own `get_inputs()` under a fresh seed and then reshapes the
floating-point tensors' values with one distribution; integer and boolean tensors are never
touched (they are indices, targets, masks). The default transforms keep every element's
sign, so tasks that need positive inputs stay valid; a task can name its own list in
WARPFORGE["input_dists"]. `fresh_variant` makes the never-seen inputs that counted timed calls
run on (bench.time_calls). Fingerprints are cheap summaries of an output (its float64 norm
and values at fixed random positions) used to check timed calls without copying them out;
`output_problem` checks an output's structure before anything indexes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

# bound now: the candidate's process makes its timed calls' inputs with these, and its Guard
# watches this module's names (a candidate that replaced torch.where could otherwise make every
# "fresh" input a copy of a set it has seen)
_where = torch.where
_Generator = torch.Generator
_bernoulli = torch.Tensor.bernoulli_
_empty = torch.empty
_empty_like = torch.empty_like
_equal = torch.equal
_flip = torch.flip
_triu = torch.triu
_transpose = torch.transpose
_logical_or = torch.logical_or

DEFAULT_DISTS = ("task", "heavy_tailed", "scaled_up", "task", "scaled_down")
KNOWN_DISTS = ("task", "heavy_tailed", "scaled_up", "scaled_down", "normal", "uniform")


def apply_distribution(inputs: list[Any], dist: str, generator: torch.Generator) -> list[Any]:
    """Transform the floating-point tensors of `inputs` in place of a copy; others pass through."""
    if dist not in KNOWN_DISTS:
        raise ValueError(f"unknown input distribution {dist!r}; known: {', '.join(KNOWN_DISTS)}")
    return [_transform(x, dist, generator) if _is_float_tensor(x) else x for x in inputs]


def _is_float_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0


def _transform(x: torch.Tensor, dist: str, gen: torch.Generator) -> torch.Tensor:
    if dist == "task":
        return x
    work = x.to(torch.float64)
    if dist == "heavy_tailed":
        # log-normal magnitudes per element (sigma 1): a few elements 10-30x larger than the rest
        factor = torch.exp(torch.randn(work.shape, generator=gen, dtype=torch.float64, device=work.device))
        work = work * factor
    elif dist == "scaled_up":
        work = work * 8.0
    elif dist == "scaled_down":
        work = work / 8.0
    elif dist == "normal":
        work = torch.randn(work.shape, generator=gen, dtype=torch.float64, device=work.device)
    elif dist == "uniform":
        work = torch.rand(work.shape, generator=gen, dtype=torch.float64, device=work.device) * 2 - 1
    return work.to(x.dtype)


def mix_partners(n_sets: int, dists: Sequence[str]) -> list[list[int]]:
    """For each of `n_sets` input sets (set i drawn with `dists[i % len(dists)]`, as the reference
    process draws them), the other sets a fresh variant of it may take elements from: those drawn
    with the same distribution, else every other set."""
    label = [dists[i % len(dists)] for i in range(n_sets)]
    others = [[j for j in range(n_sets) if j != i] for i in range(n_sets)]
    return [[j for j in others[i] if label[j] == label[i]] or others[i] or [i] for i in range(n_sets)]


def checked_partners(given: Any, n_sets: int) -> list[list[int]]:
    """`given` (the partners in the draw's file, which the candidate's import could rewrite) when it
    is well formed for `n_sets` sets (other sets only, in range), else `mix_partners` with the
    default distributions. A rewritten list buys nothing: the parent's checks of fresh calls make
    their inputs again from the reference process's own partners."""
    if isinstance(given, list) and len(given) == n_sets and all(
            isinstance(q, list) and q and all(type(j) is int and 0 <= j < n_sets and j != i for j in q)
            for i, q in enumerate(given)):
        return given
    return mix_partners(n_sets, DEFAULT_DISTS)


def partner_of(index: int, seed: int, partners: list[list[int]]) -> int:
    """The set whose elements the variant of set `index` under `seed` takes (`fresh_variant`)."""
    options = partners[index] if 0 <= index < len(partners) and partners[index] else [index]
    return options[seed % len(options)]


def fresh_variant(base: list[Any], other: list[Any], seed: int) -> list[Any]:
    """Inputs no call has seen, from input set `base` and a partner set `other` (`partner_of`):
    each element of a floating-point tensor comes, at random (from `seed`), from `base` or from the
    same tensor of `other`. Every element is then still one the task's own draw gave that position,
    so ranges, signs and zeros hold: a triangular or sparse input stays so, and a symmetric matrix
    stays symmetric (its mask is made symmetric). Constraints across elements (rows that sum to 1,
    sorted values) do not hold. A tensor of `other` of another shape or dtype is replaced by the
    base's reversed. Integer and boolean tensors and numbers stay `base`'s (indices, targets,
    masks). Layouts (strides) are the base's. Pure: the same arguments give the same bits on the
    same device, so the reference process can make a timed call's inputs again to check its output."""
    return list(iter_variant(base, other, seed))


def iter_variant(base: list[Any], other: list[Any], seed: int) -> Iterator[Any]:
    """`fresh_variant`'s items one at a time: a check against it (inputs_changed) holds one
    tensor's copy at a time, not a second copy of the whole set."""
    for k, x in enumerate(base):
        if not _is_float_tensor(x):
            yield x.clone() if isinstance(x, torch.Tensor) else x
            continue
        y = other[k] if k < len(other) else None
        if not (isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == x.dtype and y.device == x.device):
            y = _flip(x, list(range(x.dim())))
        gen = _Generator(device=x.device).manual_seed((seed ^ (k * 0x9E3779B97F4A7C15)) % 2**63)
        take = _bernoulli(_empty(x.shape, dtype=torch.bool, device=x.device), 0.5, generator=gen)
        if _symmetric(x) and _symmetric(y):
            take = _logical_or(_triu(take), _transpose(_triu(take, 1), -1, -2))
        yield _where(take, x, y, out=_empty_like(x))


def has_float_content(inputs: list[Any]) -> bool:
    """Whether `fresh_variant` can make new content from this set (a floating-point tensor)."""
    return any(_is_float_tensor(x) for x in inputs)


def _symmetric(x: torch.Tensor) -> bool:
    return x.dim() >= 2 and x.shape[-1] == x.shape[-2] and x.shape[-1] > 1 and _equal(x, _transpose(x, -1, -2))


def fingerprint_positions(numel: int, count: int, seed: int) -> torch.Tensor:
    """`count` random flat positions (with the first and last element) for an output of `numel`."""
    if numel == 0:
        return torch.zeros(0, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, numel, (max(count - 2, 0),), generator=gen)
    return torch.cat([torch.tensor([0, numel - 1]), picks]).unique()


NORM_CHUNK = 1 << 24
"""Elements a fingerprint's norm converts to float64 at a time: a whole 1.6e9-element output
would need a 12 GiB float64 copy, which ran an 80 GB GPU out of memory beside the sets."""


def fingerprint(out: torch.Tensor, positions: torch.Tensor) -> dict[str, Any]:
    """float64 L2 norm and the values at `positions`; computed on the output's own device, the
    norm from float64 sums of squares over NORM_CHUNK elements at a time."""
    flat = out.detach().reshape(-1)
    values = flat[positions.to(flat.device)].to(torch.float64).cpu()
    squares = torch.zeros((), dtype=torch.float64, device=flat.device)
    for start in range(0, flat.numel(), NORM_CHUNK):
        squares += flat[start:start + NORM_CHUNK].to(torch.float64).square().sum()
    return {"norm": float(squares.sqrt()), "values": [float(v) for v in values]}


def fast_serialization() -> None:
    """Skip the zip checksum in this process's torch.save: GPU-sized tensors cross between the
    evaluator's processes as files in tmpfs, and the checksum costs more than the copy. The
    readers use weights_only (and mmap), which never trusted the checksum for safety anyway.
    `import torch` does not import the config module; without importing it here this did nothing."""
    try:
        from torch.utils.serialization import config
    except ImportError:  # a torch older than the setting (2.5): it keeps its checksum
        return
    save = getattr(config, "save", None)
    if save is not None and hasattr(save, "compute_crc32"):
        save.compute_crc32 = False


def inputs_changed(before: Iterable[Any], after: list[Any]) -> bool:
    """Whether any tensor of `after` differs from its counterpart in `before`, byte for byte (so
    NaN inputs compare equal to themselves). The candidate's process runs it after every timed
    call (a forward() that modifies its inputs is rejected); the reference process runs it too,
    only to do the same work between calls: reading two copies of the inputs slows the next call
    (on the CPU, with it on the candidate's side only, A/A relu read 0.80-0.91x, softmax 0.80-0.91x)."""
    for b, a in zip(before, after):
        if isinstance(b, torch.Tensor):
            if b.shape != a.shape or b.dtype != a.dtype:
                return True
            if not torch.equal(_raw(b), _raw(a)):
                return True
    return False


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def split_outputs(out: Any) -> list[Any]:
    """A forward may return one tensor or a tuple/list of them; always work with a list."""
    return list(out) if isinstance(out, (tuple, list)) else [out]


def output_problem(outs: list[Any], expected: list[tuple[list[int], str]] | None, least: list[int]) -> str | None:
    """Why one forward's outputs (as split_outputs lists them) cannot be the reference's, else None:
    their count, an output that is no tensor, its shape or dtype (`expected`: the reference's
    [shape, dtype] per output; None where unknown), or too few elements for `least` (one more than
    the largest secret fingerprint position of each output: the harness indexes the outputs there,
    so this check comes before anything touches them)."""
    if len(outs) != len(least):
        return f"forward() returned {_count(len(outs))}; the reference returns {_count(len(least))}"
    for j, (o, need) in enumerate(zip(outs, least)):
        label = "the output" if len(least) == 1 else f"output {j}"
        if not isinstance(o, torch.Tensor):
            return f"{label} is a {type(o).__name__}, not a tensor"
        if expected is not None and j < len(expected):
            shape, dtype = tuple(expected[j][0]), str(expected[j][1])
            if tuple(o.shape) != shape:
                return f"{label} has shape {tuple(o.shape)}; the reference's is {shape}"
            if str(o.dtype) != dtype:
                return f"{label} has dtype {o.dtype}; the reference's is {dtype}"
        if o.numel() < need:
            return f"{label} has {o.numel()} elements, fewer than the reference's"
    return None


def _count(n: int) -> str:
    return f"{n} output" if n == 1 else f"{n} outputs"


def output_structure(outs: list[torch.Tensor], dtypes: list[torch.dtype]) -> list[tuple[list[int], str]]:
    """Each reference output's [shape, dtype] (the task's own dtype, not float64's), as
    `output_problem` reads them."""
    return [(list(o.shape), str(d)) for o, d in zip(outs, dtypes)]
