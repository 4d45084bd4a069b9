"""The model spec (model/spec.py): what a good spec reads as, and that every mistake in one is a
ConfigError of one sentence naming the key (exit 2 from the command line, never a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from warpforge.cli import main
from warpforge.errors import ConfigError, UsageError
from warpforge.model.spec import CPU_AXIS_CAP, load_spec

TINY_LLAMA = """
name = "tiny-llama"

[model]
source = "transformers:LlamaForCausalLM"
config = { hidden_size = 64, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, intermediate_size = 128, vocab_size = 128 }
dtype = "float32"
seed = 0

[[inputs]]
name = "input_ids"
dtype = "int64"
shape = ["B", "S"]
range = [0, 128]

[regimes]
prefill = { B = 2, S = 32 }
decode = { B = 1, S = 64 }

[checks]
compile = true
export = true
"""


def _spec(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_transformers_spec_reads_as_written(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, TINY_LLAMA))
    assert (spec.name, spec.kind, spec.target, spec.dtype, spec.seed) == ("tiny-llama", "transformers",
                                                                          "LlamaForCausalLM", "float32", 0)
    assert spec.config["hidden_size"] == 64 and spec.keep_compile and spec.keep_export
    (ids,) = spec.inputs
    assert (ids.name, ids.dtype, ids.shape, ids.low, ids.high) == ("input_ids", "int64", ("B", "S"), 0, 128)
    assert [(r.name, r.axes) for r in spec.regimes] == [("prefill", {"B": 2, "S": 32}), ("decode", {"B": 1, "S": 64})]
    assert ids.sizes(spec.regimes[0]) == (2, 32)
    # no cpu regime given: the smallest served one, each axis capped, is the tasks' "cpu" preset
    assert spec.cpu_regime.axes == {"B": 2, "S": min(32, CPU_AXIS_CAP)}


def test_a_python_file_spec_needs_no_inputs_or_regimes(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("x = 1\n")
    spec = load_spec(_spec(tmp_path, '[model]\nsource = "model.py"\n'))
    assert spec.kind == "file" and spec.target == str((tmp_path / "model.py").resolve())
    assert [r.name for r in spec.regimes] == ["default"] and spec.cpu_regime.axes == {} and spec.inputs == ()


@pytest.mark.parametrize("change, words", [
    (lambda t: t.replace("[model]", "[modle]"), "unknown key 'modle'"),
    (lambda t: t.replace('source = "transformers:LlamaForCausalLM"', 'source = "llama"'), "neither transformers:ClassName nor a .py file"),
    (lambda t: t.replace('source = "transformers:LlamaForCausalLM"', 'source = "missing.py"'), "does not exist"),
    (lambda t: t.replace("seed = 0", "sed = 0"), "unknown key 'sed' in [model]"),
    (lambda t: t.replace('dtype = "float32"', 'dtype = "fp8"'), "[model] dtype must be one of"),
    (lambda t: t.replace("range = [0, 128]", ""), "give range = [low, high)"),
    (lambda t: t.replace("range = [0, 128]", "range = [128, 0]"), "give range = [low, high)"),
    (lambda t: t.replace('shape = ["B", "S"]', 'shape = ["B", 0]'), "shape must be a list of positive sizes"),
    (lambda t: t.replace("decode = { B = 1, S = 64 }", "decode = { B = 1 }"), "does not size the axis S"),
    (lambda t: t.replace("decode = { B = 1, S = 64 }", "decode = { B = 1, S = 64, T = 2 }"), "sets T, which no input"),
    (lambda t: t.replace("decode = { B = 1, S = 64 }", "decode = { B = 1, S = -4 }"), "sizes must be positive integers"),
    (lambda t: t.replace("seed = 0", 'state_dict = "weights.pt"'), "state_dict 'weights.pt'"),
    (lambda t: t.replace("seed = 0", 'config_file = "config.json"'), "config_file"),
    (lambda t: t.replace("export = true", "export = 1"), "[checks] export must be true or false"),
    (lambda t: t.split("[[inputs]]")[0], "a transformers model needs [[inputs]]"),
    (lambda t: t + "\n[model.extra\n", "is not valid TOML"),
])
def test_a_bad_spec_is_one_sentence_naming_the_key(tmp_path: Path, change, words: str) -> None:
    path = _spec(tmp_path, change(TINY_LLAMA))
    with pytest.raises(ConfigError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert words in message and "\n" not in message and str(path) in message


def test_a_missing_spec_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_spec(tmp_path / "nope.toml")


def test_the_command_line_says_one_sentence_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _spec(tmp_path, TINY_LLAMA.replace("range = [0, 128]", ""))
    assert main(["model", "profile", str(path), "--out", str(tmp_path / "out"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("warpforge: ") and "range = [low, high)" in err and "Traceback" not in err


def test_a_class_transformers_does_not_have_is_a_config_error(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from warpforge.model.build import build

    spec = load_spec(_spec(tmp_path, TINY_LLAMA.replace("LlamaForCausalLM", "NoSuchModelForCausalLM")))
    with pytest.raises(ConfigError, match="has no model class 'NoSuchModelForCausalLM'"):
        build(spec)
    spec = load_spec(_spec(tmp_path, TINY_LLAMA.replace("vocab_size = 128", "vocab_size = 128, hidden_act = \"no_such_activation\"")))
    with pytest.raises(ConfigError, match="could not be built from its config"):
        build(spec)
