"""`warpforge model export`: the archive's verified kernels of a model's seams as an installable
package (model/export.py, docs/export.md). `add_export_parser(verbs)` adds the verb to the
`model` command's subparsers; `cmd_export(args)` runs it (exit 0 when a package was written,
2 for a usage error, such as no verified kernel to export)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_export_parser(verbs: Any) -> None:
    ex = verbs.add_parser("export", help="write the verified kernels as an installable package (ops, apply, evidence)",
                          description="Write the archive's best verified kernel of each seam in seams.json (the ones "
                                      "`model apply` would patch in) as an installable Python package that needs "
                                      "only torch: importing it registers one torch.library custom op per seam "
                                      "(activations and the module's weights as inputs), its apply(model) makes the "
                                      "same guarded per-instance swaps, and manifest.json and VERIFICATION.md say "
                                      "what was verified, where, and what was not.")
    ex.add_argument("spec", help="the model spec (.toml)")
    ex.add_argument("--archive", required=True, metavar="DB", help="the archive holding the verified kernels")
    ex.add_argument("--seams", required=True, metavar="SEAMS_JSON", help="the seams.json that `model extract` wrote")
    ex.add_argument("--out", required=True, metavar="DIR",
                    help="folder for pyproject.toml, the package, manifest.json and VERIFICATION.md (created if missing)")
    ex.add_argument("--name", help="the package's import name (default: warpforge_kernels_<model>)")
    ex.add_argument("--hf-kernels", action="store_true",
                    help="also write the Hugging Face `kernels` local-repository layout (DIR/hf_kernels) for kernelize")
    ex.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")


def cmd_export(args: argparse.Namespace) -> int:
    from warpforge.model.export import export
    from warpforge.model.spec import load_spec

    spec = load_spec(args.spec)
    result = export(spec, args.archive, args.seams, args.out, name=args.name, hf_kernels=args.hf_kernels)
    for k in result.kernels:
        print(f"{k['seam']}: kernel #{k['attempt_id']} ({k['speed']['words']}, {k['verified']['device']}) as "
              f"{result.namespace}::{k['op']} at {len(k['paths'])} modules", file=sys.stderr)
    for s in result.skipped:
        print(f"{s['seam']}: not exported: {s['reason']}", file=sys.stderr)
    print(f"wrote {result.out / result.package} with {result.out / 'pyproject.toml'}, manifest.json and VERIFICATION.md"
          + (f"; the Hugging Face kernels layout in {result.hf_kernels}" if result.hf_kernels else "")
          + f"; install it with: pip install {result.out}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict()))
    return 0
