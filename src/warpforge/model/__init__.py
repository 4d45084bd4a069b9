"""Whole models: a spec file says how to build a model and what it serves; the stages,
in the order they run, are its modules:

    spec.py      the TOML model spec, checked (no code runs)
    build.py     the model and its inputs, downloading nothing; constructor calls recorded
    capture.py   one forward, module by module (hooks), and torch.export's op lists
    timing.py    each module's share of a forward (torch.profiler ranges)
    seams.py     the units a patch can rebind, grouped and ranked (share x roofline headroom)
    profile.py   `warpforge model profile`: the above per regime; report.py shows it
    inline.py    a module instance written as torch-only source
    taskfile.py  the KernelBench-format task text around it
    extract.py   `warpforge model extract`: checked tasks, seams.json, gemm_shapes.json
    apply.py     `warpforge.apply` / `warpforge model apply`: verified kernels as guarded custom ops
    proof.py     `warpforge model prove`: the patched model against float64, engaged, compiled, exported
    optimize.py  `warpforge model optimize`: all of the above as one resumable command
    export.py    `warpforge model export`: the verified kernels as an installable package (export_template/)

Nothing here is imported by `import warpforge` (`warpforge.apply` loads apply.py on first use);
transformers only when a spec names it.
"""
