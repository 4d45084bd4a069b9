"""Issue 21's first question: how can GPU-sized input sets and outputs cross between the
reference process and a sandboxed candidate process faster than a file on tmpfs?

Four measurements on one GPU, each printed and saved:
  files    what the evaluator does today for one 256 MiB fp32 tensor x 5 (the relu task's
           output sets): GPU -> host -> torch.save to /dev/shm -> torch.load -> GPU, against a
           raw path (pinned host buffer, raw bytes to /dev/shm, read back into pinned memory);
  ipc      CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, through CuPy) across the
           bubblewrap sandbox (its own PID and IPC namespaces), in both directions: a handle the
           trusted process exports opened in the sandbox, and one the sandbox exports opened by
           the trusted process; with the time to open and read;
  draw     whether two processes (the sandboxed one among them) draw bit-identical inputs on the
           GPU from the same seeds through the reference's own draw (reference._draw_trials);
  compare  a float64 comparison of 5 x 64 Mi outputs on the GPU (the verify stage's arithmetic).

    python lab/transfer_probe.py --out DIR

writes DIR/transfer_probe_<date>.json. Needs a GPU, CuPy and bubblewrap (benchmarks/_gpu_env.sh).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import warpforge  # noqa: F401
except ImportError:
    _src = str(Path(__file__).resolve().parents[1] / "src")
    sys.path.insert(0, _src)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_src, os.environ.get("PYTHONPATH")]))

import torch  # noqa: E402

from warpforge.evaluate import jail  # noqa: E402

NUMEL = 64 << 20  # 256 MiB of fp32
SETS = 5

CHILD = r'''
import hashlib, json, pickle, sys, time
import torch
mode, work = sys.argv[1], sys.argv[2]
out = {}
if mode == "open":  # open the trusted process's export and read it
    import cupy
    t0 = time.perf_counter()
    handle, nbytes = pickle.load(open(f"{work}/handle.pkl", "rb"))
    ptr = cupy.cuda.runtime.ipcOpenMemHandle(handle)
    mem = cupy.cuda.UnownedMemory(ptr, nbytes, None)
    arr = cupy.ndarray((nbytes // 4,), cupy.float32, cupy.cuda.MemoryPointer(mem, 0))
    t = torch.from_dlpack(arr)
    total = float(t.double().sum())
    torch.cuda.synchronize()
    out.update(opened=True, sum=total, open_read_s=time.perf_counter() - t0)
    t[:8] = 7.0  # can the sandbox write into the trusted process's memory? (it can: the parent checks)
    torch.cuda.synchronize()
elif mode == "export":  # export own memory for the trusted process to read
    import cupy
    x = cupy.random.default_rng(5).standard_normal(1 << 20, dtype=cupy.float32)
    handle = cupy.cuda.runtime.ipcGetMemHandle(x.data.ptr)
    pickle.dump((handle, x.nbytes, float(x.astype(cupy.float64).sum())), open(f"{work}/child_handle.pkl.tmp", "wb"))
    import os
    os.rename(f"{work}/child_handle.pkl.tmp", f"{work}/child_handle.pkl")
    for _ in range(600):
        if os.path.exists(f"{work}/done"):
            break
        time.sleep(0.05)
    out.update(exported=True)
elif mode == "draw":
    sys.path.insert(0, sys.argv[3])
    from warpforge.evaluate.reference import _draw_trials
    import importlib.util
    spec = importlib.util.spec_from_file_location("task", sys.argv[4])
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    for k, v in json.loads(sys.argv[5]).items():
        setattr(module, k, v)
    seeds = json.loads(sys.argv[6])
    t0 = time.perf_counter()
    sets = _draw_trials(module, getattr(module, "WARPFORGE", {}), seeds, "cuda")
    torch.cuda.synchronize()
    out["draw_s"] = time.perf_counter() - t0
    out["digests"] = [[hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest()[:16] for x in s] for s in sets]
json.dump(out, open(f"{work}/child_{mode}.json", "w"))
'''


def sandboxed(work: str, *args: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    env = jail.environment()
    cmd = [*jail.command(jail.Jail(work), env), sys.executable, f"{work}/child.py", *args]
    if not wait:
        return subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=300)


def timed(fn, n: int = 3) -> float:
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def files() -> dict:
    outs = [torch.randn(NUMEL, device="cuda") for _ in range(SETS)]
    path = "/dev/shm/warpforge_probe.pt"

    def torch_files() -> None:
        torch.save([o.cpu() for o in outs], path)
        back = torch.load(path)
        [b.cuda() for b in back]

    pinned = [torch.empty(NUMEL, pin_memory=True) for _ in range(SETS)]

    def raw_files() -> None:
        with open(path, "wb") as f:
            for o, p in zip(outs, pinned):
                p.copy_(o)
                f.write(memoryview(p.numpy()).cast("B"))
        with open(path, "rb") as f:
            for p in pinned:
                f.readinto(memoryview(p.numpy()).cast("B"))
        [p.cuda(non_blocking=True) for p in pinned]

    def d2h_only() -> None:
        for o, p in zip(outs, pinned):
            p.copy_(o)

    result = {"bytes": SETS * NUMEL * 4, "torch_save_load_s": timed(torch_files), "raw_pinned_s": timed(raw_files),
              "d2h_pinned_only_s": timed(d2h_only)}
    os.unlink(path)
    return result


def ipc(work: str) -> dict:
    import cupy
    result: dict = {}
    x = cupy.random.default_rng(3).standard_normal(NUMEL, dtype=cupy.float32)
    expected = float(x.astype(cupy.float64).sum())
    handle = cupy.cuda.runtime.ipcGetMemHandle(x.data.ptr)
    pickle.dump((handle, x.nbytes), open(f"{work}/handle.pkl", "wb"))
    done = sandboxed(work, "open", work)
    child = json.load(open(f"{work}/child_open.json")) if os.path.exists(f"{work}/child_open.json") else {}
    result["parent_to_sandbox"] = {"rc": done.returncode, "tail": (done.stdout + done.stderr)[-1500:], **child,
                                   "sum_matches": abs(child.get("sum", 1e30) - expected) < 1e-3 * abs(expected) + 1,
                                   "sandbox_wrote_into_parent": bool(float(x[0]) == 7.0)}
    proc = sandboxed(work, "export", work, wait=False)
    for _ in range(1200):
        if os.path.exists(f"{work}/child_handle.pkl") or proc.poll() is not None:
            break
        time.sleep(0.05)
    try:
        handle, nbytes, child_sum = pickle.load(open(f"{work}/child_handle.pkl", "rb"))
        t0 = time.perf_counter()
        ptr = cupy.cuda.runtime.ipcOpenMemHandle(handle)
        mem = cupy.cuda.UnownedMemory(ptr, nbytes, None)
        arr = cupy.ndarray((nbytes // 4,), cupy.float32, cupy.cuda.MemoryPointer(mem, 0))
        total = float(torch.from_dlpack(arr).double().sum())
        result["sandbox_to_parent"] = {"opened": True, "open_read_s": time.perf_counter() - t0,
                                       "sum_matches": abs(total - child_sum) < 1e-3 * abs(child_sum) + 1}
        cupy.cuda.runtime.ipcCloseMemHandle(ptr)
    except Exception as exc:  # noqa: BLE001 - a probe: report whatever failed
        result["sandbox_to_parent"] = {"opened": False, "error": f"{type(exc).__name__}: {exc}"}
    Path(f"{work}/done").touch()
    out, _ = proc.communicate(timeout=120)
    result["sandbox_to_parent"]["child_rc"], result["sandbox_to_parent"]["tail"] = proc.returncode, out[-1500:]
    return result


def draw(work: str) -> dict:
    from warpforge.evaluate.reference import _draw_trials
    import importlib.util
    root = Path(__file__).resolve().parents[1]
    rows = {}
    for name, path, sizes in (("matmul", root / "tests/fixtures/tasks/matmul.py", {"M": 4096, "K": 4096, "N": 4096}),
                              ("relu", root / "src/warpforge/tasks/level1/relu.py", {"BATCH": 4096, "DIM": 16384})):
        if not path.exists():
            rows[name] = {"error": f"{path} not found"}
            continue
        spec = importlib.util.spec_from_file_location("task", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for k, v in sizes.items():
            setattr(module, k, v)
        seeds = [11, 22, 33, 44, 55, 66, 77, 88]
        t0 = time.perf_counter()
        sets = _draw_trials(module, getattr(module, "WARPFORGE", {}), seeds, "cuda")
        torch.cuda.synchronize()
        mine = [[hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest()[:16] for x in s] for s in sets]
        done = sandboxed(work, "draw", work, str(root / "src"), str(path), json.dumps(sizes), json.dumps(seeds))
        child = json.load(open(f"{work}/child_draw.json")) if os.path.exists(f"{work}/child_draw.json") else {}
        rows[name] = {"parent_draw_s": time.perf_counter() - t0, "child_draw_s": child.get("draw_s"),
                      "identical": child.get("digests") == mine, "rc": done.returncode,
                      "tail": (done.stdout + done.stderr)[-800:] if done.returncode else ""}
        if os.path.exists(f"{work}/child_draw.json"):
            os.unlink(f"{work}/child_draw.json")
    return rows


def compare() -> dict:
    ref = [torch.randn(NUMEL, device="cuda", dtype=torch.float64) for _ in range(SETS)]
    got = [r.float() for r in ref]

    def one() -> None:
        for r, g in zip(ref, got):
            d = g.double() - r
            torch.linalg.vector_norm(d).item()
            d.abs().max().item()
    return {"float64_compare_5x64Mi_s": timed(one)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "date": datetime.date.today().isoformat(), "sandbox_problem": jail.problem()}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as work:
        Path(work, "child.py").write_text(CHILD)
        os.chmod(work, 0o777)
        for name, fn in (("files", files), ("ipc", lambda: ipc(work)), ("draw", lambda: draw(work)),
                         ("compare", compare)):
            try:
                result[name] = fn()
            except Exception as exc:  # noqa: BLE001 - a probe: report whatever failed and go on
                result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(name, json.dumps(result[name], indent=1)[:3000], flush=True)
            torch.cuda.empty_cache()
    path = out / f"transfer_probe_{result['date']}.json"
    path.write_text(json.dumps(result, indent=1))
    print("wrote", path)


if __name__ == "__main__":
    main()
