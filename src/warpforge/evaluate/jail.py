"""The OS sandbox around every process that runs candidate code (bubblewrap, `bwrap`).

`Jail` says what one child may see and touch; `command(jail)` is the `bwrap` prefix that makes
it so: its own user, PID, IPC, UTS and network namespaces (loopback only), a new session, a
root holding only the system folders and the Python installation read-only, the candidate's
work folder read-write, private size-capped /tmp and /dev/shm, a fresh /proc that shows only
the sandbox's processes, a minimal /dev plus the NVIDIA device nodes, and no capabilities.
`environment()` is the allow-listed environment every child gets (no keys or tokens).
What this does NOT contain: the GPU itself (a kernel can still read stale device memory or
time other work through side channels), the kernel's own attack surface, and a malicious task
file of the operator's own (the reference process runs the operator's task files unsandboxed;
one that arrived from elsewhere, or any with --sandbox-reference, runs in a `Jail` too) — see
docs/evaluation.md.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from warpforge.errors import ConfigError

# Where a candidate's private compile cache appears inside its sandbox. A fixed path, so a build
# made in one sandbox (the CPU compile pool) is up to date in another: torch's extension builds
# write absolute paths into build.ninja, and ninja rebuilds when they change.
CACHE_MOUNT = "/warpforge-cache"
# System folders shown read-only; everything else of the host (home folders, /work, /mnt, /srv,
# /run, /var, the archive, the caches) is absent unless named by the Python installation.
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
# Environment variables a child keeps (exact names, then prefixes); everything else is dropped,
# and a kept name that looks like a secret is dropped all the same.
ENV_NAMES = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED",
             "CC", "CXX", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "MAX_JOBS", "OMP_NUM_THREADS",
             "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
             "WARPFORGE_DEBUG", "WARPFORGE_REFERENCE_TIMEOUT"}
ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "CUPY_", "KMP_", "MKL_",
                "CUBLAS_", "CUDNN_", "NCCL_")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)


@dataclass(frozen=True)
class Jail:
    """What one sandboxed child may see and touch."""

    workdir: str
    """Read-write, at its own path: the harness's files for this child and its outputs."""
    cache: str = ""
    """A private compile-cache folder shown read-write at CACHE_MOUNT ("" = none)."""
    hidden: tuple[str, ...] = ()
    """Host paths covered by an empty folder should a read-only path contain them (the caches)."""
    tmp_bytes: int = 2 << 30
    """Size of the private /tmp and of the private /dev/shm, each."""


def command(jail: Jail, env: dict[str, str]) -> list[str]:
    """The `bwrap ...` argument list to put before the child's own command, run with `env`."""
    args = [bwrap_path(), "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "warpforge-sandbox"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for node in sorted(glob.glob("/dev/nvidia*")):  # the GPU's device nodes (nvidiactl, nvidia0, nvidia-uvm, caps)
        args += ["--dev-bind", node, node]
    # the private /tmp and /dev/shm first: a read-only folder inside the host's /tmp (a checkout
    # or a virtual environment there) is then bound into the private one, not hidden by it
    args += ["--size", str(jail.tmp_bytes), "--tmpfs", "/tmp", "--size", str(jail.tmp_bytes), "--tmpfs", "/dev/shm"]
    readable = _readable(jail, env.get("PYTHONPATH", ""))
    for path in readable:
        if os.path.islink(path) and os.path.dirname(path) == "/":  # /lib -> usr/lib on merged-/usr systems
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            args += ["--ro-bind", path, path]
    for path in jail.hidden:
        if any(_inside(path, r) for r in readable) and os.path.isdir(path):
            args += ["--tmpfs", path]
    args += ["--bind", jail.workdir, jail.workdir]
    if jail.cache:
        args += ["--bind", jail.cache, CACHE_MOUNT]
    return [*args, "--chdir", jail.workdir, "--"]


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment of a child: toolchain and locale settings, never keys or
    tokens; HOME and TMPDIR point at the sandbox's private /tmp."""
    base = dict(os.environ) if base is None else base
    env = {name: value for name, value in base.items()
           if (name in ENV_NAMES or name.startswith(ENV_PREFIXES)) and not SECRET_NAME.search(name)}
    env.update(HOME="/tmp", TMPDIR="/tmp", USER="warpforge", LOGNAME="warpforge")
    env.setdefault("PATH", os.defpath)
    return env


def _readable(jail: Jail, pythonpath: str) -> list[str]:
    """System folders, the Python installation, the folders a child's Python imports from and the
    warpforge package's folder; parents first, so bwrap mounts a folder before what is inside."""
    import warpforge

    paths = {*SYSTEM_DIRS, sys.prefix, sys.base_prefix, sys.exec_prefix, *_import_paths(pythonpath),
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
             os.path.dirname(os.path.dirname(os.path.abspath(warpforge.__file__)))}
    paths.update(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and os.path.isdir(p))
    if os.environ.get("CUDA_HOME"):
        paths.add(os.environ["CUDA_HOME"])
    resolved = {os.path.abspath(p) for p in paths} | {os.path.realpath(p) for p in paths if os.path.exists(p)}
    if "/" in resolved:
        raise ConfigError("the sandbox cannot show the whole filesystem: remove '/' from PYTHONPATH")
    # a path inside another one is shown through its parent already, unless the parent is a symlink
    kept = [p for p in resolved if not any(_inside(p, q) and q != p and not os.path.islink(q) for q in resolved)]
    return sorted(kept, key=lambda p: (p.count("/"), p))


@functools.lru_cache(maxsize=8)
def _import_paths(pythonpath: str) -> tuple[str, ...]:
    """The folders a child's Python imports from (its sys.path: PYTHONPATH, the standard library,
    site-packages and what their .pth files add), not the parent's working folder."""
    # an empty PYTHONPATH entry means the working folder: the child's is its own work folder
    pythonpath = os.pathsep.join(os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p)
    env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": pythonpath}
    out = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
                         capture_output=True, text=True, timeout=60, env=env, cwd="/")
    try:
        return tuple(p for p in json.loads(out.stdout) if p and os.path.isdir(p))
    except ValueError:
        return tuple(p for p in sys.path if p and os.path.isdir(p))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def bwrap_path() -> str:
    """The bubblewrap binary: $WARPFORGE_BWRAP (an unpacked .deb on an offline machine), else PATH."""
    return os.environ.get("WARPFORGE_BWRAP") or shutil.which("bwrap") or "bwrap"


@functools.lru_cache(maxsize=1)
def problem() -> str | None:
    """Why the sandbox cannot start on this machine (one sentence), or None when it can."""
    path = bwrap_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return ("the sandbox needs bubblewrap, which is not installed: install it (Debian/Ubuntu: apt-get install "
                "bubblewrap; or set WARPFORGE_BWRAP to a bwrap binary), or pass --no-sandbox to run candidates "
                "unsandboxed")
    workdir = os.path.realpath(os.getcwd()) if os.access(os.getcwd(), os.W_OK) else "/tmp"
    try:
        env = environment()
        done = subprocess.run([*command(Jail(workdir), env), sys.executable, "-c", "pass"], capture_output=True,
                              text=True, timeout=60, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the sandbox (bubblewrap at {path}) cannot start: {exc}; pass --no-sandbox to run candidates unsandboxed"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return (f"the sandbox (bubblewrap at {path}) cannot start here ({why}); enable unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1, or user.max_user_namespaces > 0) or pass --no-sandbox "
                "to run candidates unsandboxed")
    return None


def require() -> None:
    """Raise ConfigError with `problem()`'s sentence when the sandbox cannot start."""
    why = problem()
    if why:
        raise ConfigError(why)
