"""jail.py: the allow-listed environment, the bwrap command, and what happens without a sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from warpforge.evaluate import jail
from warpforge.evaluate.sandbox import Child

FIXTURES = Path(__file__).parent / "fixtures"
needs_sandbox = pytest.mark.skipif(jail.problem() is not None, reason=f"no sandbox here: {jail.problem()}")


def test_environment_keeps_toolchain_settings_and_drops_secrets() -> None:
    env = jail.environment({"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "TRITON_INTERPRET": "1",
                            "OPENAI_API_KEY": "sk-x", "ANTHROPIC_API_KEY": "sk-ant-x", "HF_TOKEN": "hf_x",
                            "TORCH_HUB_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "a", "HOME": "/root", "SSH_AUTH_SOCK": "/s"})
    assert env["PATH"] == "/usr/bin" and env["CUDA_VISIBLE_DEVICES"] == "0" and env["TRITON_INTERPRET"] == "1"
    assert not {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "TORCH_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY",
                "SSH_AUTH_SOCK"} & env.keys()
    assert env["HOME"] == "/tmp"


def test_command_isolates_every_namespace_and_hides_the_caches(tmp_path: Path) -> None:
    work, cache = tmp_path / "work", tmp_path / "cache"
    inside = os.path.realpath(os.path.dirname(os.__file__))  # a folder within a read-only one, as a cache might be
    args = jail.command(jail.Jail(str(work), cache=str(cache), hidden=(inside,)), {"PYTHONPATH": ""})
    pairs = list(zip(args, args[1:]))
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--new-session",
                 "--die-with-parent", "--proc"):
        assert flag in args
    assert ("--tmpfs", "/tmp") in pairs and ("--tmpfs", "/dev/shm") in pairs and ("--tmpfs", inside) in pairs
    assert ("--bind", str(work)) in pairs and ("--bind", str(cache)) in pairs
    assert args[args.index(str(cache)) + 1] == jail.CACHE_MOUNT
    shown = {b for a, b in pairs if a == "--ro-bind"}
    assert not {"/root", "/home", "/work", "/mnt", "/srv", "/var", "/run", "/"} & shown  # only what Python needs


@needs_sandbox
def test_a_sandboxed_child_sees_only_its_own_processes_and_folders(tmp_path: Path) -> None:
    # the module lives in a folder of the host's /tmp apart from the work folder, as a checkout in
    # /tmp does: it must be importable, not hidden by the private /tmp
    lib, work = tmp_path / "lib", tmp_path / "work"
    lib.mkdir()
    work.mkdir()
    (lib / "probe.py").write_text(
        "import json, os, sys\nfrom warpforge.evaluate.sandbox import Channel\n"
        "Channel().send('seen', procs=len([p for p in os.listdir('/proc') if p.isdigit()]), env=sorted(os.environ),"
        " cwd=os.getcwd(), parent_home=os.path.exists(sys.argv[1]), neighbour=os.path.exists(sys.argv[2]))\n")
    env = {**jail.environment(), "PYTHONPATH": str(lib)}
    neighbour = tmp_path / "neighbour"  # the host's /tmp beside the work folder
    neighbour.mkdir(exist_ok=True)
    child = Child("probe", [os.path.expanduser("~/.cache"), str(neighbour)], env=env, cwd=str(work),
                  jail=jail.Jail(str(work)))
    outcome = child.wait(timeout_s=60, mem_limit_mb=4096)
    seen = next((m for m in outcome.messages if m["type"] == "seen"), None)
    assert seen is not None, outcome.output
    assert seen["procs"] <= 2 and seen["cwd"] == str(work) and not seen["parent_home"]
    assert not seen["neighbour"]


def test_without_bubblewrap_the_cli_says_how_to_enable_it_in_one_sentence(tmp_path: Path) -> None:
    env = {**os.environ, "WARPFORGE_BWRAP": str(tmp_path / "no-bwrap")}
    done = subprocess.run([sys.executable, "-m", "warpforge.cli", "eval", str(FIXTURES / "tasks" / "matmul.py"),
                           str(FIXTURES / "candidates" / "honest_matmul.py"), "--device", "cpu", "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and done.stdout == ""
    message = done.stderr.strip()
    assert len(message.splitlines()) == 1 and "bubblewrap" in message and "--no-sandbox" in message, message


def test_no_sandbox_runs_and_says_unsandboxed_in_the_result(tmp_path: Path) -> None:
    env = {**os.environ, "WARPFORGE_BWRAP": str(tmp_path / "no-bwrap")}
    done = subprocess.run([sys.executable, "-m", "warpforge.cli", "eval", str(FIXTURES / "tasks" / "matmul.py"),
                           str(FIXTURES / "candidates" / "honest_matmul.py"), "--device", "cpu", "--json",
                           "--no-bench", "--no-sandbox"], capture_output=True, text=True, timeout=300, env=env)
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["correct"], result["reason"]
    assert result["config"]["safety"]["sandbox"] is False
    assert any(w.startswith("unsandboxed") for w in result["warnings"]) and "unsandboxed" in done.stderr
