"""`warpforge model export` on the tiny Llama and A/A kernels of test_model_apply: the package's
files are written with the archive's evidence; imported from its folder in a fresh process (no
warpforge imported), its `apply(model)` gives warpforge.apply's patched outputs, counts a fallback
at an unverified shape, and a torch.export'ed patched model runs where only the package is
imported (the weights are op inputs); Hugging Face `kernels` loads its layout; in the slow lane it
installs with pip into a fresh venv and does the same there, plus torch.compile(fullgraph=True).
Bad input is one clear error."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import venv
from pathlib import Path
from typing import Any

import pytest

from warpforge.archive import Archive
from warpforge.errors import UsageError

pytest.importorskip("transformers")

from test_model_apply import IMPORTED_ONLY, VERIFIED, setup  # noqa: E402,F401  (tiny Llama, A/A kernels)

from warpforge.cli.model_export import add_export_parser, cmd_export  # noqa: E402
from warpforge.model.apply import choose  # noqa: E402
from warpforge.model.export import export  # noqa: E402

# the whole-model chain (each module builds a tiny Llama and evaluates its seams, 20-90 s): the slow
# lane, which CI runs after the default lane (.ci/run); `bash scripts/test.sh -m slow tests/test_model_*.py`
pytestmark = pytest.mark.slow

PACKAGE = "tiny_llama_kernels"

# Run in a fresh process with the package importable: imports it before anything of warpforge (and
# checks that it pulled none in), then builds the model with warpforge and compares with warpforge.apply.
CHECK = textwrap.dedent('''
    import json, sys
    import torch
    import {package} as pkg
    assert not [m for m in sys.modules if m.split(".")[0] == "warpforge"], "the package imported warpforge"
    import warpforge
    from warpforge.model import build as builder
    from warpforge.model.spec import Regime, load_spec

    spec = load_spec({spec!r})

    def model_and_inputs(S):
        built = builder.build(spec)
        return built.model, builder.inputs(built, Regime("t", {{"B": 1, "S": S}}), "cpu", seed=7)[1]

    def logits(model, kwargs):
        with torch.no_grad():
            return model(**kwargs).logits

    ours, kwargs = model_and_inputs(8)
    theirs, _ = model_and_inputs(8)
    warpforge.apply(theirs, {db!r}, {seams!r})
    _, report = pkg.apply(ours)
    torch.testing.assert_close(logits(ours, kwargs), logits(theirs, kwargs), rtol=1e-6, atol=1e-6)
    out = {{"served": {{s.seam: [s.served, s.fallbacks] for s in report.seams}}}}
    odd, odd_kwargs = model_and_inputs(5)  # S = 5 is no preset of the tasks
    _, odd_report = pkg.apply(odd)
    logits(odd, odd_kwargs)
    out["odd"] = {{s.seam: [s.served, s.fallbacks, s.first_fallback] for s in odd_report.seams}}
    with torch.no_grad():
        program = torch.export.export(ours, (), kwargs, strict=False)
    out["exported_ops"] = sorted({{str(n.target) for n in program.graph.nodes if pkg.NAMESPACE in str(n.target)}})
    torch.export.save(program, {saved!r})
    torch.save([kwargs, logits(theirs, kwargs)], {saved!r} + ".inputs")
    if {compile}:  # torch.compile(fullgraph=True) traces the guarded forwards and the ops into one graph
        seen = []

        def backend(gm, example_inputs):
            seen.extend(str(n.target) for n in gm.graph.nodes if pkg.NAMESPACE in str(n.target))
            return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

        compiled = torch.compile(ours, fullgraph=True, backend=backend)
        torch.testing.assert_close(logits(compiled, kwargs), logits(theirs, kwargs), rtol=1e-5, atol=1e-5)
        out["compiled_ops"] = seen
    print(json.dumps(out))
''')

# A process that imports only the package, torch and transformers (whose output class the saved
# program returns) loads the saved program and runs it: no apply, no warpforge.
LOAD = textwrap.dedent('''
    import sys
    import torch
    import transformers.modeling_outputs
    import {package} as pkg
    program = torch.export.load({saved!r})
    kwargs, want = torch.load({saved!r} + ".inputs")
    with torch.no_grad():
        torch.testing.assert_close(program.module()(**kwargs).logits, want, rtol=1e-6, atol=1e-6)
    assert not [m for m in sys.modules if m.split(".")[0] == "warpforge"]
    print("loaded")
''')


@pytest.fixture(scope="module")
def exported(setup: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    out = tmp_path_factory.mktemp("export") / "out"
    result = export(setup["spec"], setup["db"], setup["seams"], out, name=PACKAGE, hf_kernels=True)
    return {"out": out, "result": result, "manifest": json.loads((out / "manifest.json").read_text())}


def test_export_writes_the_package_with_the_archives_evidence(setup: dict[str, Any], exported: dict[str, Any]) -> None:  # noqa: F811
    out, manifest = exported["out"], exported["manifest"]
    pkg = out / PACKAGE
    for rel in ("pyproject.toml", "manifest.json", "VERIFICATION.md", f"{PACKAGE}/__init__.py", f"{PACKAGE}/_guard.py",
                f"{PACKAGE}/layers.py", f"{PACKAGE}/_seams.json", f"{PACKAGE}/manifest.json", f"{PACKAGE}/VERIFICATION.md"):
        assert (out / rel).is_file(), rel
    assert manifest["requires"] == ["torch"] and manifest["requires_warpforge"] is False
    assert {k["seam"] for k in manifest["kernels"]} == set(VERIFIED)
    assert [s["seam"] for s in manifest["skipped"]] == [IMPORTED_ONLY] and "no verified kernel" in manifest["skipped"][0]["reason"]
    with Archive(setup["db"], read_only=True) as archive:
        for k in manifest["kernels"]:
            attempt = choose(archive, k["task"])
            assert attempt is not None and k["attempt_id"] == attempt.id and k["evaluation_id"] == attempt.evaluation_id
            assert (pkg / k["kernel"]).read_text() == attempt.source  # the very program that was verified
            assert (pkg / k["reference"]).read_text() == archive.task_source(k["task"])
            assert k["hardware"] == attempt.hardware and k["hardware"]["torch"]
            assert k["verdict"]["status"] == "correct" and k["verdict"]["correct"] is True
            assert k["speed"]["verdict"] == "not_timed" and k["timings_ms"]["candidate"] == attempt.candidate_ms
            assert k["verified"]["device"] == "cpu" and k["verified"]["dtypes"][0] == "float32"
            assert len(k["verified"]["shapes"]) == 3  # the task's size presets (cpu, prefill, decode)
    norm = next(k for k in manifest["kernels"] if k["seam"] == "LlamaRMSNorm")
    assert [w["name"] for w in norm["verified"]["weights"]] == ["weight"]  # the weight is an op input, not a constant
    verification = (out / "VERIFICATION.md").read_text()
    assert "## Not checked" in verification and "LlamaRMSNorm" in verification and IMPORTED_ONLY in verification
    for path in pkg.glob("*.py"):  # the package needs torch, not warpforge
        assert not [line for line in path.read_text().splitlines() if line.startswith(("import warpforge", "from warpforge"))]
    hf = out / "hf_kernels" / "build" / "torch-universal"
    assert (hf / "__init__.py").is_file() and (hf / PACKAGE / "layers.py").is_file()
    assert json.loads((hf / "metadata.json").read_text())["id"] == exported["result"].namespace


def _run(code: str, python: str, path: Path | None = None) -> str:
    env_path = [str(path)] if path else []
    script = "import sys\nsys.path[:0] = " + repr(env_path) + "\n" + code
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]


def _check(setup: dict[str, Any], python: str, path: Path | None, saved: Path, compile: bool = False) -> None:  # noqa: F811
    got = json.loads(_run(CHECK.format(package=PACKAGE, spec=str(setup["spec_file"]), db=str(setup["db"]),
                                       seams=str(setup["seams"]), saved=str(saved), compile=compile), python, path))
    if compile:
        assert sum("llama_rms_norm" in op for op in got["compiled_ops"]) == 5
    assert got["served"]["LlamaRMSNorm"] == [5, 0] and got["served"]["LlamaAttention"] == [2, 0]
    assert got["odd"]["LlamaRMSNorm"] == [0, 5, "its input shapes or dtypes are no verified preset"]
    assert got["odd"]["LlamaAttention"][:2] == [0, 2]
    assert any("llama_rms_norm" in op for op in got["exported_ops"])
    assert _run(LOAD.format(package=PACKAGE, saved=str(saved)), python, path) == "loaded"


def test_the_package_reproduces_apply_from_its_folder(setup: dict[str, Any], exported: dict[str, Any],  # noqa: F811
                                                      tmp_path: Path) -> None:
    _check(setup, sys.executable, exported["out"], tmp_path / "patched.pt2")


def test_kernelize_loads_the_hugging_face_layout(setup: dict[str, Any], exported: dict[str, Any]) -> None:  # noqa: F811
    pytest.importorskip("kernels")
    code = textwrap.dedent(f'''
        import json
        from pathlib import Path
        import torch
        from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_mapping
        from warpforge.model import build as builder
        from warpforge.model.spec import Regime, load_spec

        built = builder.build(load_spec({str(setup["spec_file"])!r}))
        model = built.model
        _, kwargs = builder.inputs(built, Regime("t", {{"B": 1, "S": 8}}), "cpu", seed=7)
        with torch.no_grad():
            want = model(**kwargs).logits
        norm = type(model.get_submodule({setup["rows"]["LlamaRMSNorm"]["paths"][0]!r}))
        repo = LocalLayerRepository(Path({str(exported["out"] / "hf_kernels")!r}), layer_name="LlamaRMSNorm")
        with use_kernel_mapping({{getattr(norm, "kernel_layer_name", "LlamaRMSNorm"): {{"cpu": repo}}}}, inherit_mapping=False):
            kernelize(model, mode=Mode.INFERENCE, device="cpu")
        with torch.no_grad():
            torch.testing.assert_close(model(**kwargs).logits, want, rtol=1e-6, atol=1e-6)
            one = model.get_submodule({setup["rows"]["LlamaRMSNorm"]["paths"][0]!r})
            x = torch.randn(1, 8, 64)
            torch.testing.assert_close(one(hidden_states=x), one(x))  # by keyword or position: the same call
        import sys
        pkg = sys.modules[{exported["result"].namespace!r}]  # `kernels` imports it under its build's id
        print(json.dumps({{s.seam: [s.served, s.fallbacks] for s in pkg.KERNELIZED.seams}}))
    ''')
    got = json.loads(_run(code, sys.executable))
    assert got["LlamaRMSNorm"] == [7, 0]


@pytest.mark.slow
def test_the_package_installs_with_pip_into_a_fresh_venv(setup: dict[str, Any], exported: dict[str, Any],  # noqa: F811
                                                         tmp_path: Path) -> None:
    import site
    import sysconfig

    env = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env)
    python = str(env / "bin" / "python")
    # this interpreter's packages (torch, transformers, pip, setuptools, and warpforge to build the model)
    # for the venv too, whatever venv this one is: nothing is downloaded. No pip of the venv's own:
    # ensurepip's older setuptools would shadow the one that builds wheels
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    done = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True)
    # as site dirs, so that their own .pth files (warpforge's editable install) count too
    dirs = "; ".join(f"site.addsitedir({p!r})" for p in sorted(paths))
    (Path(done.stdout.strip()) / "outer.pth").write_text(f"import site; {dirs}\n")
    pip = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                          str(exported["out"])], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-4000:]
    where = _run(f"import {PACKAGE}; print({PACKAGE}.__file__)", python)
    assert where.startswith(str(env)) and (Path(where).parent / "kernels").is_dir()  # installed, with its data
    _check(setup, python, None, tmp_path / "patched.pt2", compile=True)


def test_bad_input_is_one_clear_error(setup: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    only_mlp = json.loads(Path(setup["seams"]).read_text())
    only_mlp["tasks"] = [r for r in only_mlp["tasks"] if r["seam"] == IMPORTED_ONLY]
    seams = Path(setup["seams"]).with_name("only_mlp.json")
    seams.write_text(json.dumps(only_mlp))
    with pytest.raises(UsageError, match="nothing to export: no seam has a verified kernel.*LlamaMLP: no verified kernel"):
        export(setup["spec"], setup["db"], seams, tmp_path / "out")
    with pytest.raises(UsageError, match="no archive at"):
        export(setup["spec"], tmp_path / "nope.db", setup["seams"], tmp_path / "out")
    parser = argparse.ArgumentParser()
    add_export_parser(parser.add_subparsers(dest="model_command"))
    args = parser.parse_args(["export", str(tmp_path / "missing.toml"), "--archive", str(setup["db"]),
                              "--seams", str(setup["seams"]), "--out", str(tmp_path / "out")])
    with pytest.raises(UsageError, match="missing.toml"):
        cmd_export(args)
    assert not (tmp_path / "out").exists()


def test_the_command_writes_the_package(setup: dict[str, Any], tmp_path: Path,  # noqa: F811
                                        capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_export_parser(parser.add_subparsers(dest="model_command"))
    args = parser.parse_args(["export", str(setup["spec_file"]), "--archive", str(setup["db"]),
                              "--seams", str(setup["seams"]), "--out", str(tmp_path / "out"), "--json"])
    assert cmd_export(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["package"] == "warpforge_kernels_tiny_llama" and {k["seam"] for k in data["kernels"]} == set(VERIFIED)
    assert (tmp_path / "out" / "warpforge_kernels_tiny_llama" / "__init__.py").is_file() and data["hf_kernels"] is None
    assert cmd_export(args) == 0  # a second export into the same folder replaces the first


def test_the_build_flags_and_the_architecture_are_recorded() -> None:
    from warpforge.archive import Attempt
    from warpforge.model.export import _build

    source = ("from torch.utils.cpp_extension import load_inline\n"
              "ext = load_inline(name='k', cpp_sources='', cuda_sources='', functions=['f'],\n"
              "                  extra_cuda_cflags=['-O3', '--use_fast_math'], extra_cflags=FLAGS)\n")
    attempt = Attempt(id=1, run_id="r", task="t", step=0, source=source, language="cuda",
                      hardware={"device": "cuda", "target": "sm_90a"})
    assert _build(attempt) == {"language": "cuda", "env": {"TORCH_CUDA_ARCH_LIST": "9.0a"},
                               "load_inline": {"extra_cuda_cflags": ["-O3", "--use_fast_math"], "extra_cflags": "FLAGS"}}
