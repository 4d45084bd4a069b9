"""The built-in suite's tasks by the bytes of one input set at a size preset (default gpu), largest
first, worked out on torch's meta device (no memory is taken): issue 21's memory target is the
reference + candidate footprint of the largest suite task.

    python lab/largest_task.py [--preset gpu] [--top 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from warpforge.task import import_task_module, tasks_named  # noqa: E402


def input_bytes(task, preset: str) -> int:
    module = import_task_module(task, task.sizes(preset))
    with torch.device("meta"):
        inputs = module.get_inputs()
    return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpu")
    ap.add_argument("--top", type=int, default=1)
    args = ap.parse_args()
    sizes = sorted(((input_bytes(t, args.preset), t.name) for level in ("level1", "level2", "level3")
                    for t in tasks_named(level)), reverse=True)
    for nbytes, name in sizes[:args.top]:
        print(f"{name} {nbytes / 2**30:.3f}")  # the task, and one input set's GiB


if __name__ == "__main__":
    main()
