"""Evaluation settings from defaults, a --config TOML file, WARPFORGE_<KEY> and flags (config_sources.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from warpforge.cli import main
from warpforge.config import GROUP_TYPES, GROUPS, EvalConfig, flat
from warpforge.config_sources import FIELD_TYPES, env_name, load_config
from warpforge.errors import ConfigError

RELU = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"


def test_every_setting_is_in_exactly_one_group() -> None:
    """The file's sections are EvalConfig's groups: its own fields ([run]) and one object per group."""
    grouped = [key for keys in GROUPS.values() for key in keys]
    own = [f.name for f in dataclasses.fields(EvalConfig) if f.name not in GROUP_TYPES]
    in_groups = [f.name for cls in GROUP_TYPES.values() for f in dataclasses.fields(cls)]
    assert sorted(grouped) == sorted(own + in_groups) and len(set(grouped)) == len(grouped)
    assert GROUPS["run"] == tuple(own) and set(FIELD_TYPES) == set(grouped)


def test_the_grouped_config_reads_back_from_json_and_from_flat_records() -> None:
    config = EvalConfig.of(device="cpu", rep_ms=20.0, server_gap_ms=(2.0, 3.0), sandbox=False, cuda_ipc=False)
    assert (config.timing.rep_ms, config.safety.sandbox, config.transport.cuda_ipc) == (20.0, False, False)
    assert EvalConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert EvalConfig.from_dict(flat(config.to_dict())) == config  # a verdict written before the groups
    assert config.replace(timeout_s=3.0).limits.timeout_s == 3.0 and config.limits.timeout_s == 600.0
    with pytest.raises(ConfigError, match="no field rep_msec"):
        EvalConfig.of(rep_msec=5)


def test_a_later_source_wins_file_then_environment_then_flags(tmp_path: Path) -> None:
    file = tmp_path / "eval.toml"
    file.write_text("[run]\ntrials = 2\nbench = false\n\n[timing]\nrep_ms = 50\nserver_gap_ms = [2, 9]\n\n"
                    "[safety]\nstrict_fp32 = true\n\n[limits]\ntimeout_s = 30\n")
    config = load_config(file, env={})
    assert (config.trials, config.bench, config.timing.rep_ms, config.timing.server_gap_ms, config.safety.strict_fp32, config.limits.timeout_s) \
        == (2, False, 50.0, (2.0, 9.0), True, 30.0)
    env = {"WARPFORGE_TRIALS": "3", "WARPFORGE_CACHE": "/tmp/c", "WARPFORGE_SETS_MEMORY_GB": "1.5",
           "WARPFORGE_CUDA_IPC": "off"}
    config = load_config(file, env=env)
    assert (config.trials, config.transport.cache_dir, config.limits.sets_memory_gb, config.transport.cuda_ipc) == (3, "/tmp/c", 1.5, False)
    assert load_config(file, {"trials": 7}, env=env).trials == 7
    assert load_config(env={}) == EvalConfig()
    assert env_name("rep_ms") == "WARPFORGE_REP_MS" and env_name("reference_timeout_s") == "WARPFORGE_REFERENCE_TIMEOUT"


@pytest.mark.parametrize("text, words", [
    ("[timings]\nrep_ms = 5\n", "'timings' is not a section"),
    ("[timing]\ntrials = 5\n", "it belongs in [run]"),
    ("[timing]\nrepms = 5\n", "[timing]'s keys are mode, warmup_ms"),
    ("[run]\ntrials = 'five'\n", "trials must be a whole number"),
    ("[run]\ndevice = 'tpu'\n", "device must be 'cpu' or 'cuda' or none"),
    ("[safety]\nsandbox = 1\n", "sandbox must be true or false"),
    ("[run\n", "is not valid TOML"),
    ("rep_ms = 5\n", "'rep_ms' is not a section"),
])
def test_a_bad_config_file_is_one_sentence_naming_the_file_and_the_fix(tmp_path: Path, text: str, words: str) -> None:
    file = tmp_path / "eval.toml"
    file.write_text(text)
    with pytest.raises(ConfigError, match=None) as info:
        load_config(file, env={})
    assert words in str(info.value) and str(file) in str(info.value)


def test_a_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"\$WARPFORGE_PAIRED_ROUNDS is 'many'"):
        load_config(env={"WARPFORGE_PAIRED_ROUNDS": "many"})
    with pytest.raises(ConfigError, match="paired_rounds must be 0"):  # EvalConfig's own checks still apply
        load_config(env={"WARPFORGE_PAIRED_ROUNDS": "1"})


def test_eval_reads_the_config_file_and_its_flags_win(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file, cand = tmp_path / "eval.toml", tmp_path / "cand.py"
    file.write_text("[run]\ntrials = 2\nbench = false\n")
    cand.write_text(RELU)
    assert main(["eval", "level1/relu", str(cand), "--device", "cpu", "--config", str(file), "--json"]) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert config["trials"] == 2 and config["bench"] is False
    assert main(["eval", "level1/relu", str(cand), "--device", "cpu", "--config", str(file), "--trials", "3",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["trials"] == 3
    file.write_text("[run]\ntrials = 'x'\n")
    assert main(["eval", "level1/relu", str(cand), "--config", str(file)]) == 2
    err = capsys.readouterr().err
    assert "trials must be a whole number" in err and "Traceback" not in err
    assert main(["eval", "level1/relu", str(cand), "--config", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read the config file" in capsys.readouterr().err
