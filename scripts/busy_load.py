"""Keep a machine's cores busy, as a user's other work does: `python scripts/busy_load.py SECONDS
[steady|bursty|mixed] [PER_2_CORES]` starts PER_2_CORES load processes for every 2 cores (default
2) and stops them after SECONDS (or on Ctrl-C / SIGTERM).

steady: a busy loop. bursty: busy 5-50 ms (copying 8 MiB of memory at a time), then idle 5-50 ms:
load that comes and goes, as builds, installs and other evaluations do. mixed: half of each. Each
exposes what the other does not (steady loops alone did not reproduce issue 39's test failures;
bursty load did). `scripts/test_busy.sh` and `benchmarks/busy_machine.py` use it.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sys
import time


def busy(kind: str, stop_at: float) -> None:
    """One load process (at most one core) until `stop_at` (time.time())."""
    rng = random.Random(os.getpid())
    buf = bytearray(32 << 20)
    while time.time() < stop_at:
        if kind == "steady":
            continue
        until = time.time() + rng.uniform(0.005, 0.05)
        while time.time() < until:
            bytes(buf[: 8 << 20])
        time.sleep(rng.uniform(0.005, 0.05))


class Load:
    """`per_2_cores` load processes for each 2 cores of this machine while inside the `with`."""

    def __init__(self, kind: str, per_2_cores: int = 2, seconds: float = 6 * 3600) -> None:
        if kind not in ("steady", "bursty", "mixed"):
            raise SystemExit(f"load kind {kind!r}: use steady, bursty or mixed")
        self.n = max(1, per_2_cores * (os.cpu_count() or 2) // 2)
        self.kinds = [("steady", "bursty")[i % 2] if kind == "mixed" else kind for i in range(self.n)]
        self.seconds = seconds
        self.procs: list[multiprocessing.Process] = []

    def __enter__(self) -> Load:
        stop_at = time.time() + self.seconds  # the processes stop by themselves: never outlive a forgotten run
        self.procs = [multiprocessing.Process(target=busy, args=(k, stop_at), daemon=True) for k in self.kinds]
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.join()


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    seconds = float(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "mixed"
    per_2_cores = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Load(kind, per_2_cores, seconds):
        try:
            time.sleep(seconds)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
