"""Static checks on a candidate's source, before any of it runs (parse only, in the parent).

Rejects what the policy forbids outright — harness introspection, raw process/thread/stream
control, dynamic code execution, file reads — and notes what the candidate is made of
(CUDA C++, NVRTC, Triton, C++) and the names of its kernels, so the profile stage can tell
custom kernels from library calls. This is the first line of defence only: obfuscated code
can slip past an AST walk, which is why every property is also checked at run time.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from warpforge import pysource

# An allow-list: a candidate may import only what kernels are written with. Anything else
# (io, runpy, sys, time, ...) is refused, which is what stops obfuscated file reads, process
# tricks and harness introspection; FORBIDDEN_IMPORTS below gives the reason for common ones.
ALLOWED_IMPORTS = {
    "torch", "triton", "cupy", "cupyx", "numpy", "cuda", "math", "functools", "itertools", "typing",
    "dataclasses", "collections", "operator", "os", "enum", "abc", "__future__", "warnings", "numbers",
}
OS_ALLOWED = {"environ", "path", "getenv", "cpu_count", "sep"}
DUNDERS_ALLOWED = {"__init__", "__name__", "__doc__"}
# module -> why importing it is refused
FORBIDDEN_IMPORTS = {
    "threading": "background threads can hide work from the timer",
    "_thread": "background threads can hide work from the timer",
    "concurrent": "thread and process pools can hide work from the timer",
    "multiprocessing": "other processes can hide work from the timer",
    "subprocess": "candidates may not start processes",
    "signal": "candidates may not handle signals",
    "ctypes": "raw memory access can rewrite the harness",
    "gc": "walking the garbage collector reaches harness objects",
    "inspect": "frame inspection reaches harness objects",
    "importlib": "dynamic imports bypass these checks",
    "builtins": "patching builtins tampers with the harness",
    "warpforge": "candidates may not import the evaluator",
    "pickle": "candidates may not load pickled data",
    "socket": "candidates may not use the network",
    "glob": "candidates may not search the filesystem",
    "shutil": "candidates may not manipulate files",
    "pathlib": "candidates may not read files",
}
FORBIDDEN_CALLS = {
    "exec": "dynamic code execution", "eval": "dynamic code execution", "compile": "dynamic code execution",
    "__import__": "dynamic imports", "open": "reading or writing files", "globals": "harness introspection",
    "breakpoint": "debugger hooks", "setattr": "patching objects by name", "delattr": "patching objects by name",
    "vars": "reaching into namespaces", "locals": "harness introspection", "__builtins__": "reaching the builtins",
    "input": "reading standard input", "memoryview": "raw memory access",
}
# attribute chains (suffix match) -> why
FORBIDDEN_ATTRS = {
    "os._exit": "exiting the process early", "os.fork": "starting processes", "os.kill": "signalling processes",
    "os.system": "starting processes", "os.popen": "starting processes", "os.write": "writing raw file descriptors",
    "os.listdir": "searching the filesystem", "os.walk": "searching the filesystem", "os.scandir": "searching the filesystem",
    "sys._getframe": "frame inspection", "sys.modules": "reaching into loaded modules", "sys.exit": "exiting early",
    "sys.settrace": "tracing the harness", "sys.setprofile": "tracing the harness",
    "torch.cuda.Stream": "side streams hide work from the timer", "torch.cuda.stream": "side streams hide work from the timer",
    "torch.cuda.set_stream": "side streams hide work from the timer",
    "torch.cuda.ExternalStream": "side streams hide work from the timer",
    "cuda.Stream": "side streams hide work from the timer", "cuda.ExternalStream": "side streams hide work from the timer",
    "torch.load": "reading files", "torch.save": "writing files", "torch.from_file": "reading files",
    "numpy.load": "reading files", "numpy.save": "writing files", "numpy.fromfile": "reading files",
    "numpy.memmap": "reading files", "numpy.loadtxt": "reading files", "cupy.load": "reading files",
    "torch.set_float32_matmul_precision": "changing the task's precision",
    "allow_tf32": "changing the task's precision", "allow_fp16_reduced_precision_reduction": "changing the task's precision",
    "allow_bf16_reduced_precision_reduction": "changing the task's precision",
}
FORBIDDEN_NATIVE = {
    r"\bcudaStreamCreate": "side streams hide work from the timer",
    r"\bcuStreamCreate": "side streams hide work from the timer",
    r"\bstd::thread\b|\bpthread_create\b|\bstd::async\b": "background threads can hide work from the timer",
    r"\bfork\s*\(|\bexecv|\bsystem\s*\(": "starting processes",
    r"\bfopen\s*\(|\bifstream\b|\bopen\s*\(\s*\"": "reading files",
    r"\bcudaCtxResetPersistingL2Cache|cudaLimitPersistingL2CacheSize|accessPolicyWindow": "pinning data in L2 defeats the cache flush",
}
GLOBAL_KERNEL = re.compile(r"__global__\s+\w[\w\s:<>,*]*?\b(\w+)\s*\(")
LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")


@dataclass(frozen=True)
class StaticReport:
    rejected: str | None = None
    syntax_error: str | None = None
    languages: tuple[str, ...] = ()
    kernel_names: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def check_source(source: str, allow_tf32: bool = False) -> StaticReport:
    """Parse and vet a candidate; never executes it."""
    try:
        tree = pysource.parse(source)
    except SyntaxError as exc:
        return StaticReport(syntax_error=f"line {exc.lineno}: {exc.msg}")
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    native = "\n".join(s for s in strings if "__global__" in s or "#include" in s or "PYBIND11" in s or "torch::" in s)
    problem = _python_problem(tree, allow_tf32) or _native_problem(native)
    if "ModelNew" not in {n.name for n in tree.body if isinstance(n, ast.ClassDef)} and not any(
            isinstance(n, (ast.Assign, ast.ImportFrom)) and "ModelNew" in ast.dump(n) for n in tree.body):
        return StaticReport(syntax_error="the candidate does not define class ModelNew")
    kernels = set(GLOBAL_KERNEL.findall(LAUNCH_BOUNDS.sub(" ", native)))
    kernels |= _triton_kernels(tree)
    return StaticReport(rejected=problem, languages=_languages(source), kernel_names=tuple(sorted(kernels)))


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _python_problem(tree: ast.Module, allow_tf32: bool) -> str | None:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                root = name.split(".")[0]
                if root in FORBIDDEN_IMPORTS:
                    return f"imports {name}: {FORBIDDEN_IMPORTS[root]}"
                if root not in ALLOWED_IMPORTS and not (isinstance(node, ast.ImportFrom) and node.level):
                    return (f"imports {name}: only {', '.join(sorted(ALLOWED_IMPORTS))} may be imported")
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            else:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_CALLS:
            return f"uses {node.id}(): {FORBIDDEN_CALLS[node.id]} is not allowed"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and (len(node.args) < 2 or not isinstance(node.args[1], ast.Constant))):
            return f"uses {node.func.id}() with a computed attribute name, which hides what it reaches"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("__") \
                and node.value.endswith("__") and node.value not in DUNDERS_ALLOWED and len(node.value) > 4:
            return f"names {node.value!r}: introspection is not allowed"
        elif isinstance(node, ast.Name) and node.id in aliases:
            problem = _attr_problem(aliases[node.id], allow_tf32)
            if problem:
                return problem
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            head, _, rest = dotted.partition(".")
            full = f"{aliases.get(head, head)}.{rest}" if rest else aliases.get(head, head)
            problem = _attr_problem(full, allow_tf32)
            if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in DUNDERS_ALLOWED:
                problem = f"touches {node.attr}: introspection is not allowed"
            elif problem is None and full.startswith("os.") and full.split(".")[1] not in OS_ALLOWED:
                problem = f"uses {full}: only os.{', os.'.join(sorted(OS_ALLOWED))} are allowed"
            if problem:
                return problem
    return None


def _attr_problem(dotted: str, allow_tf32: bool) -> str | None:
    for pattern, why in FORBIDDEN_ATTRS.items():
        if dotted == pattern or dotted.endswith("." + pattern) or (pattern == "allow_tf32" and dotted.endswith("allow_tf32")):
            if allow_tf32 and ("tf32" in pattern or "float32_matmul" in pattern):
                continue
            return f"uses {dotted}: {why} is not allowed"
    return None


def _native_problem(native: str) -> str | None:
    for pattern, why in FORBIDDEN_NATIVE.items():
        match = re.search(pattern, native)
        if match:
            return f"its C++/CUDA source uses {match.group(0).strip()}: {why} is not allowed"
    return None


def _triton_kernels(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if _dotted(target).endswith("jit") or _dotted(target).endswith("autotune"):
                    names.add(node.name)
    return names


def _languages(source: str) -> tuple[str, ...]:
    found = []
    if "load_inline" in source or "cpp_extension" in source:
        found.append("cuda_cpp" if "cuda_sources" in source or "__global__" in source else "cpp")
    if "RawKernel" in source or "RawModule" in source or "nvrtc" in source.lower() or "cuda.core" in source:
        found.append("nvrtc")
    if "triton" in source:
        found.append("triton")
    return tuple(found) or ("pytorch",)
