"""The kernel-language registry and targets (issue 41, part 1): one classifier for every stage, each
built-in language recognising its own example, targets that parse and print back, compile cache
keys as before; and a toy language added in one module (toy_language.py) plus one registry entry
that the static check, the build's environment, the prompts, the features and the archive take
like any other, evaluated end to end on the CPU."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import toy_language as toy
from warpforge import Candidate, EvalConfig, languages, load_task
from warpforge.archive import Archive
from warpforge.errors import ConfigError, UsageError
from warpforge.evaluate import compile as compile_mod, evaluate
from warpforge.evaluate.static import check_source
from warpforge.propose import Proposal
from warpforge.propose.prompts import PromptContext, render
from warpforge.search.features import features_of, language_of
from warpforge.target import CPU, Target

ROOT = Path(__file__).resolve().parents[1]
RELU = ROOT / "src" / "warpforge" / "tasks" / "level1" / "relu.py"
TOY_SOURCE = (ROOT / toy.LANGUAGE.example).read_text()


@pytest.fixture
def registered() -> Iterator[toy.Toy]:
    """The toy language, registered the way a new one is: one more registry entry."""
    languages.register(toy.LANGUAGE)
    try:
        yield toy.LANGUAGE
    finally:
        languages.unregister(toy.LANGUAGE.name)


# -- the built-in languages -------------------------------------------------------------------

@pytest.mark.parametrize("language", languages.ALL, ids=lambda lang: lang.name)
def test_each_language_recognises_its_own_example(language: languages.Language) -> None:
    source = (ROOT / language.example).read_text()
    report = check_source(source)
    assert report.rejected is None and report.syntax_error is None, report
    assert languages.detect(source) is language and language_of(source) == language.name
    assert report.languages == (language.name,)


SOURCES = {
    "a Triton kernel beside a helper extension": ("import triton\n@triton.jit\ndef k(x): pass\n"
                                                  "from torch.utils.cpp_extension import load_inline\n", "triton"),
    "a RawModule beside an extension": ("import cupy\nm = cupy.RawModule(code=c)\nload_inline(cpp_sources=s)\n", "nvrtc"),
    "load_inline with CUDA sources": ("load_inline(name='k', cpp_sources='', cuda_sources=s)\n", "cuda"),
    "load_inline, C++ only": ("from torch.utils.cpp_extension import load_inline\nload_inline(cpp_sources=s)\n", "cpp"),
    "no kernel of its own": ("import torch\nx = torch.relu(y)\n", "pytorch"),
}


@pytest.mark.parametrize("source,expected", SOURCES.values(), ids=list(SOURCES))
def test_one_classifier_for_static_features_and_the_registry(source: str, expected: str) -> None:
    """Once two classifiers disagreed (static.py called triton any source that named it and
    cuda_cpp what features.py called cuda); now every stage asks languages.detect."""
    assert languages.detect(source).name == language_of(source) == features_of(source).language == expected
    assert expected in [lang.name for lang in languages.detect_all(source)]


def test_needs_build_is_the_extension_builders_only() -> None:
    assert languages.needs_build(SOURCES["load_inline with CUDA sources"][0])
    assert languages.needs_build(SOURCES["a Triton kernel beside a helper extension"][0])  # it builds one too
    assert not languages.needs_build((ROOT / languages.get("triton").example).read_text())
    assert not languages.needs_build((ROOT / languages.get("nvrtc").example).read_text())


def test_unknown_names_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown kernel language 'rust'"):
        languages.get("rust")
    with pytest.raises(ConfigError, match="registered already"):
        languages.register(languages.get("triton"))


# -- targets ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,kind,arch,arch_list", [
    ("cpu", "cpu", "", ""), ("cuda", "cuda", "", ""), ("sm_90a", "cuda", "sm_90a", "9.0a"),
    ("sm_80", "cuda", "sm_80", "8.0"), ("sm_100a", "cuda", "sm_100a", "10.0a"), ("gfx942", "rocm", "gfx942", ""),
    ("9.0a", "cuda", "sm_90a", "9.0a"), ("8.0;9.0", "cuda", "8.0;9.0", "8.0;9.0"),
])
def test_a_target_parses_and_prints_back(text: str, kind: str, arch: str, arch_list: str) -> None:
    target = Target.parse(text)
    assert (target.kind, target.arch, target.arch_list) == (kind, arch, arch_list)
    assert Target.parse(str(target)) == target


def test_targets_of_devices_and_of_recorded_hardware() -> None:
    assert Target.from_capability(9, 0) == Target.parse("sm_90a") and str(Target.from_capability(8, 6)) == "sm_86"
    assert Target.from_hardware({"target": "sm_100a"}) == Target("cuda", "sm_100a")
    # rows recorded before targets were: read from what they hold
    assert Target.from_hardware({"device": "cuda", "gpu": "NVIDIA H100", "capability": "9.0"}) == Target("cuda", "sm_90a")
    assert Target.from_hardware({"device": "cpu", "cpu": "x"}) == CPU and Target.from_hardware({}) is None
    assert Target.from_hardware({"target": "tpu_v5"}) is None  # an archive from elsewhere: not trusted to parse
    with pytest.raises(ConfigError, match="unknown target"):
        Target.parse("tpu_v5")


def test_cache_keys_and_the_build_environment_are_as_before() -> None:
    """The key is sha256(source, toolchain versions, TORCH_CUDA_ARCH_LIST) as it was with an arch
    string, so the compile caches written before the registry stay warm."""
    old = hashlib.sha256(f"src\0{compile_mod.toolchain_fingerprint()}\0{'9.0a'}".encode()).hexdigest()[:20]
    assert compile_mod.cache_key("src", Target.parse("sm_90a")) == old
    assert compile_mod.cache_key("src", CPU) == compile_mod.cache_key("src", Target("cuda"))  # no arch named
    env = compile_mod.private_env("/c", Target.parse("sm_90a"))
    assert {k: env[k] for k in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "CUPY_CACHE_DIR", "TORCH_CUDA_ARCH_LIST")} \
        == {"TORCH_EXTENSIONS_DIR": "/c/torch_extensions", "TRITON_CACHE_DIR": "/c/triton", "CUPY_CACHE_DIR": "/c/cupy",
            "TORCH_CUDA_ARCH_LIST": "9.0a"}
    assert "TORCH_CUDA_ARCH_LIST" not in compile_mod.private_env("/c", CPU)
    assert languages.env(CPU) == {"TRITON_INTERPRET": "1"} and languages.env(Target("cuda", "sm_90a")) == {}


# -- a language added in one module -----------------------------------------------------------

def test_a_registered_language_reaches_every_stage(registered: toy.Toy, tmp_path: Path) -> None:
    report = check_source(TOY_SOURCE)
    assert report.rejected is None and report.languages == ("toy",) and report.kernel_names == ("relu_toy",)
    rounding = TOY_SOURCE.replace("ZERO = Fraction(0, 1)", "ZERO = Fraction.limit_denominator(Fraction(0, 1), 10)")
    assert "rounding a constant" in str(check_source(rounding).rejected)
    features = features_of(TOY_SOURCE)
    assert (features.language, features.kernels) == ("toy", 1)
    assert compile_mod.private_env("/c", CPU)["TOY_CACHE_DIR"] == "/c/toy" and languages.env(CPU)["TOY_MODE"]
    assert "toyc 0.1" in compile_mod.toolchain_fingerprint()
    system = render("translate", PromptContext("t", "class Model: pass", "cpu", language="toy"))[0]["content"]
    assert "- Language: toy expression kernels: one `toy-kernel NAME: OP ARG`" in system
    anything = render("translate", PromptContext("t", "class Model: pass", "cpu"))[0]["content"]
    assert ", toy expression kernels (`toy-kernel NAME: OP ARG`), or plain PyTorch" in anything
    assert "Toy kernels run interpreted" in anything and "(`load_inline`, `toy-kernel`)" in anything
    with pytest.raises(ConfigError, match="need a CPU device"):
        render("translate", PromptContext("t", "class Model: pass", "cuda", language="toy"))
    with Archive(tmp_path / "a.db") as archive:
        run = archive.start_run({}, seed=0)
        archive.add_candidate(run, Proposal(task="t", strategy="translate", model="m"), 0, language="toy")
    languages.unregister("toy")
    with Archive(tmp_path / "a.db") as archive, pytest.raises(UsageError, match="not one of"):
        archive.add_candidate(run, Proposal(task="t", strategy="translate", model="m"), 1, language="toy")
    with pytest.raises(ConfigError, match="unknown kernel language"):
        render("translate", PromptContext("t", "class Model: pass", "cpu", language="toy"))


def test_a_candidate_in_a_registered_language_is_evaluated_on_the_cpu(tmp_path: Path) -> None:
    """Unregistered, the toy program is refused (its import is not allowed); registered, the
    evaluator builds it with the toy toolchain's folder and CPU mode in its process (the program
    checks both) and finds it correct; the toy's own static rule refuses a variant."""
    task, config = load_task(RELU), EvalConfig.of(device="cpu", bench=False, trials=2, cache_dir=str(tmp_path))
    refused = evaluate(task, Candidate(source=TOY_SOURCE), config)
    assert refused.status == "rejected" and "imports fractions" in refused.reason
    languages.register(toy.LANGUAGE)
    try:
        result = evaluate(task, Candidate(source=TOY_SOURCE), config)
        assert result.correct, (result.reason, result.output_tail)
        assert result.hardware["target"] == "cpu"
        rounding = TOY_SOURCE.replace("ZERO = Fraction(0, 1)", "ZERO = Fraction.limit_denominator(Fraction(0, 1), 10)")
        assert evaluate(task, Candidate(source=rounding), config).status == "rejected"
    finally:
        languages.unregister(toy.LANGUAGE.name)
