"""Static checks on a candidate's source before any of it runs (parse only, in the parent).

Behaviour decides: the OS sandbox contains file, network and process access, run-time checks catch
tampering with the harness and the timer and work left running after forward() returns, and the
measured error decides precision (a precision flag changes only the candidate's own process). These
rules are only a cheap pre-filter, each with its why: for what behaviour cannot see (rewriting the
harness's memory in-process, threads that the run-time check cannot list or that answer its
questions themselves) or as early, readable refusals of what the sandbox stops anyway; obfuscated
code slips past them. Also names languages and kernels. Each kernel language (languages/) adds its
own rules: the modules its candidates import, attributes and patterns in its C++ code refused."""

from __future__ import annotations

import ast
import functools
import re
import symtable
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from warpforge import languages, pysource

# An allow-list: a candidate may import only what kernels are written with. Anything else
# (io, runpy, sys, time, ...) is refused, which is what stops obfuscated file reads, process
# tricks and harness introspection; FORBIDDEN_MODULES below gives the reason for common ones.
# The kernel languages add the modules their candidates import (torch, triton, cupy, ...): see
# allowed_imports().
ALLOWED_IMPORTS = {
    "numpy", "math", "functools", "itertools", "typing",
    "dataclasses", "collections", "operator", "os", "enum", "abc", "__future__", "warnings", "numbers",
    "ctypes",  # for pointers and sizes; its raw-memory parts are refused by CTYPES_FORBIDDEN
    # thread pools: a worker still running the candidate's job when forward() returns is caught at
    # run time (worker._new_threads), so a pool joined before the return (`with ThreadPoolExecutor()`,
    # `pool.map`, `.result()`) runs; its process and interpreter pools are refused in FORBIDDEN_ATTRS
    "concurrent",
}
# what of os a kernel needs (settings, a build folder, a per-process extension name: CUDA-L1's
# level1/96 kernel names its build `f"huber_loss_cuda_{os.getpid()}"`); the rest starts processes,
# changes files or exits
OS_ALLOWED = {"environ", "path", "getenv", "cpu_count", "sep", "makedirs", "getcwd", "getpid"}
DUNDERS_ALLOWED = {"__init__", "__name__", "__doc__"}
# module -> why it is refused, whether imported or reached as an attribute of another module
# (torch.utils.cpp_extension re-exports subprocess, shutil, glob, os, sys, importlib, sysconfig)
FORBIDDEN_MODULES = {
    # The run-time thread check lists threading.Thread objects and asks each one (is_alive, run, its
    # target): a Thread subclass answers for itself, in-process, and threading's settrace/setprofile
    # hooks reach the harness's frames; _thread's threads have no Thread object to list at all.
    # Behaviour sees neither. A concurrent.futures.ThreadPoolExecutor's stdlib workers it does see.
    "threading": "its Thread subclasses answer the run-time thread check themselves and its trace hooks reach "
                 "the harness (use concurrent.futures.ThreadPoolExecutor and finish its work before returning)",
    "_thread": "its threads are invisible to the run-time thread check",
    # another process's work is outside the run-time thread check and the output fingerprints' timing
    "multiprocessing": "other processes can hide work from the timer",
    # in-process: these reach the harness's objects, frames, imports or control flow in the process it
    # shares with the candidate, which no run-time check can see
    "signal": "a signal handler interrupts the harness's own code",
    "gc": "walking the garbage collector reaches harness objects",
    "inspect": "frame inspection reaches harness objects",
    "traceback": "walking the stack reaches harness frames",
    "importlib": "dynamic imports bypass these checks",
    "builtins": "patching builtins tampers with the harness",
    "sys": "the interpreter's state (modules, frames, exit) reaches the harness",
    "warpforge": "candidates may not import the evaluator",
    "pickle": "unpickling runs arbitrary code",
    # the sandbox contains these (no network, a read-only filesystem, its own PID namespace): refused
    # early, with a reason a model can act on
    "subprocess": "candidates may not start processes",
    "socket": "candidates may not use the network",
    "urllib": "candidates may not use the network",
    "http": "candidates may not use the network",
    "glob": "candidates may not search the filesystem",
    "shutil": "candidates may not manipulate files",
    "pathlib": "candidates may not read files",
    "io": "candidates may not read files",
    "tempfile": "candidates may not write files",
    "sysconfig": "it locates the interpreter's files, for process and file tricks",
    "setuptools": "build tools start processes",
}
# builtins: dynamic code hides what it does from this pre-filter; the introspection and patching ones
# reach the harness's objects in-process, and input() reads the harness's command pipe (stdin), which
# behaviour cannot see; open() the sandbox contains, refused early
FORBIDDEN_CALLS = {
    "exec": "dynamic code execution", "eval": "dynamic code execution", "compile": "dynamic code execution",
    "__import__": "dynamic imports", "open": "reading or writing files", "globals": "harness introspection",
    "breakpoint": "debugger hooks", "setattr": "patching objects by name", "delattr": "patching objects by name",
    "vars": "reaching into namespaces", "locals": "harness introspection", "__builtins__": "reaching the builtins",
    "input": "reading standard input (the harness's command pipe)", "memoryview": "raw memory access",
}
# attribute chains (matched as whole segments anywhere in the resolved chain) -> why
# os and sys: processes, files and exits the sandbox contains or the parent sees (refused early); raw
# writes to a file descriptor (the harness's channel), frames and tracing are in-process, unseen
FORBIDDEN_ATTRS = {
    "os._exit": "exiting the process early", "os.fork": "starting processes", "os.kill": "signalling processes",
    "os.system": "starting processes", "os.popen": "starting processes", "os.write": "writing raw file descriptors",
    "os.listdir": "searching the filesystem", "os.walk": "searching the filesystem", "os.scandir": "searching the filesystem",
    "sys._getframe": "frame inspection", "sys.modules": "reaching into loaded modules", "sys.exit": "exiting early",
    "sys.settrace": "tracing the harness", "sys.setprofile": "tracing the harness",
    # bench.time_calls syncs the whole device before its end event, and the worker fingerprints outputs
    # at return and after a sync, so a side stream's work is counted or caught, except what fits in the
    # sync round trip taken off each call (up to 30 us + 1 % of it, bench.py): behaviour cannot see that
    "torch.cuda.Stream": "side streams hide work from the timer", "torch.cuda.stream": "side streams hide work from the timer",
    "torch.cuda.set_stream": "side streams hide work from the timer",
    "torch.cuda.ExternalStream": "side streams hide work from the timer",
    # Inductor's compile pools run whatever is submitted to them, off the timed call, in processes that
    # the run-time thread check does not see
    "torch._inductor.async_compile": "compile pools hide work from the timer",
    "torch._inductor.compile_worker": "process pools hide work from the timer",
    # the Thread class reached through another module, or through a pool's own Thread objects
    # (`pool._threads`, the module's registry of them), can be subclassed (see "threading" above)
    "Thread": "a Thread subclass answers the run-time thread check itself",
    "_threads": "a pool's Thread objects give the Thread class, whose subclasses answer the run-time thread "
                "check themselves",
    "concurrent.futures.thread": "its registry of pools' Thread objects gives the Thread class, whose subclasses "
                                 "answer the run-time thread check themselves (import from concurrent.futures)",
    # other processes' and interpreters' work is outside the run-time thread check
    "ProcessPoolExecutor": "other processes can hide work from the timer",
    "concurrent.futures.process": "other processes can hide work from the timer",
    "InterpreterPoolExecutor": "other interpreters' threads can hide work from the timer",
    "concurrent.interpreters": "other interpreters' threads can hide work from the timer",
    # files and the network: the sandbox contains them (read-only filesystem, no network, the harness's
    # files absent or deleted before candidate code runs); refused early, with a reason a model can act on
    "torch.load": "reading files", "torch.save": "writing files", "torch.from_file": "reading files",
    "torch.serialization": "reading and writing files", "torch.jit.load": "reading files", "torch.jit.save": "writing files",
    "torch.export.load": "reading files", "torch.export.save": "writing files", "torch.package": "reading and writing files",
    "torch.hub": "downloading from the network (urlopen, download_url_to_file, load)",
    "torch.utils.model_zoo": "downloading from the network", "torch.distributed": "using the network",
    "numpy.load": "reading files", "numpy.save": "writing files", "numpy.fromfile": "reading files",
    "numpy.memmap": "reading files", "numpy.loadtxt": "reading files", "numpy.genfromtxt": "reading files",
    "numpy.fromregex": "reading files", "numpy.savetxt": "writing files", "numpy.savez": "writing files",
    "numpy.savez_compressed": "writing files", "numpy.DataSource": "reading files and URLs",
    "numpy.lib.npyio": "reading and writing files", "numpy.lib.format": "reading and writing files",
    "numpy.lib._datasource": "reading files and URLs", "numpy.f2py": "running a compiler",
    "numpy.ctypeslib": "loading libraries and wrapping any address as an array",
    # the kernel languages add theirs (CuPy's file functions, ...): see forbidden_attrs()
}
# No rule on precision flags (allow_tf32, set_float32_matmul_precision, reduced-precision reductions):
# a flag changes only the candidate's own process (the reference runs in another, clean one), and its
# outputs are measured against float64 like any other's. A flag that changes nothing changes no error;
# one that lowers precision below the reference's shows in the error (docs/evaluation.md, "Precision").
# attribute names refused on any object (arrays, storages, ctypes types) -> why: files and the network
# (the sandbox contains them; refused early); raw addresses (in-process, unseen by behaviour)
FORBIDDEN_METHODS = {
    "tofile": "writing files (ndarray.tofile)", "dump": "writing pickles to files (ndarray.dump)",
    "from_file": "mapping files (Storage.from_file)", "urlopen": "using the network",
    "urlretrieve": "using the network", "download_url_to_file": "using the network",
    "load_state_dict_from_url": "using the network",
    "from_address": "a ctypes object over any address rewrites the harness's memory in-process",
    "in_dll": "reading a loaded library's memory",
}
# What of ctypes is refused: the parts that read or write any address of this process, or call C
# functions. The harness shares this process, so the sandbox cannot contain them.
CTYPES_FORBIDDEN = {
    "memmove": "it copies to any address", "memset": "it writes any address",
    "string_at": "it reads any address", "wstring_at": "it reads any address",
    "c_char_p": "it reads the string at any address", "c_wchar_p": "it reads the string at any address",
    "pointer": "its pointers index past their object", "py_object": "it turns any address into a Python object",
    "pythonapi": "it calls the interpreter's C API", "CDLL": "it calls C functions (libc among them)",
    "cdll": "it calls C functions (libc among them)", "PyDLL": "it calls C functions",
    "pydll": "it calls C functions", "LibraryLoader": "it calls C functions", "CFUNCTYPE": "it calls C functions",
    "PYFUNCTYPE": "it calls C functions", "util": "it finds libraries to load",
}
# The C and C++ code in a candidate's strings has its own rules (languages/native.py: threads,
# processes, files, the network, raw system calls, pinning L2), added by the languages written in it.


def allowed_imports() -> frozenset[str]:
    """ALLOWED_IMPORTS and the modules every kernel language's candidates import."""
    return _with_languages(languages.ALL)[0]


def forbidden_attrs() -> Mapping[str, str]:
    """FORBIDDEN_ATTRS and every kernel language's own."""
    return _with_languages(languages.ALL)[1]


@functools.lru_cache(maxsize=4)
def _with_languages(registered: tuple[languages.Language, ...]) -> tuple[frozenset[str], Mapping[str, str]]:
    rules = languages.rules()
    return frozenset(ALLOWED_IMPORTS | rules.imports), MappingProxyType({**FORBIDDEN_ATTRS, **rules.attrs})


@dataclass(frozen=True)
class StaticReport:
    rejected: str | None = None
    syntax_error: str | None = None
    languages: tuple[str, ...] = ()
    kernel_names: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def check_source(source: str) -> StaticReport:
    """Parse and vet a candidate; never executes it."""
    try:
        tree = pysource.parse(source)
        scopes = symtable.symtable(source, "<candidate>", "exec")
    except SyntaxError as exc:
        return StaticReport(syntax_error=f"line {exc.lineno}: {exc.msg}")
    view = languages.SourceView(source, tree)
    problem = _python_problem(tree, _builtin_reads(scopes)) or _native_problem(view.native)
    if "ModelNew" not in {n.name for n in tree.body if isinstance(n, ast.ClassDef)} and not any(
            isinstance(n, (ast.Assign, ast.ImportFrom)) and "ModelNew" in ast.dump(n) for n in tree.body):
        return StaticReport(syntax_error="the candidate does not define class ModelNew")
    return StaticReport(rejected=problem, languages=tuple(lang.name for lang in languages.detect_all(source)),
                        kernel_names=tuple(sorted(languages.kernel_names(view))))


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _resolve(node: ast.AST, aliases: dict[str, str]) -> str:
    """The attribute chain with its first name replaced by what it was imported as; a chain on
    anything but a name (a call, a subscript) starts with "<expr>"."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    head = aliases.get(node.id, node.id) if isinstance(node, ast.Name) else "<expr>"
    return ".".join([head, *reversed(parts)])


def _aliases(tree: ast.Module) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                aliases[alias.asname or root] = alias.name if alias.asname else root
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _python_problem(tree: ast.Module, builtins: set[str]) -> str | None:
    aliases = _aliases(tree)
    on_current_stream = _current_stream_wrappers(tree, aliases)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            problem = _import_problem(node)
        elif isinstance(node, ast.Call):
            problem = _call_problem(node, aliases)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("__") \
                and node.value.endswith("__") and node.value not in DUNDERS_ALLOWED and len(node.value) > 4:
            problem = f"names {node.value!r}: introspection is not allowed"
        elif isinstance(node, ast.Name) and node.id in builtins:
            problem = f"uses {node.id}(): {FORBIDDEN_CALLS[node.id]} is not allowed"
        elif isinstance(node, ast.Name) and node.id in aliases:
            problem = _chain_problem(aliases[node.id])
        elif isinstance(node, ast.Attribute) and id(node) not in on_current_stream:
            problem = _attribute_problem(node, aliases)
        else:
            problem = None
        if problem:
            return problem
    return None


def _import_problem(node: ast.Import | ast.ImportFrom) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.level:
        return None  # relative: the candidate's own package
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif any(a.name == "*" for a in node.names):
        return f"imports * from {node.module}: a star import hides which names the candidate uses"
    else:
        names = [f"{node.module}.{a.name}" for a in node.names]
    for name in names:
        root = name.split(".")[0]
        if root in FORBIDDEN_MODULES:
            return f"imports {name}: {FORBIDDEN_MODULES[root]}"
        allowed = allowed_imports()
        if root not in allowed:
            return f"imports {name}: only {', '.join(sorted(allowed))} may be imported"
        problem = _chain_problem(name)
        if problem:
            return problem
    return None


def _attribute_problem(node: ast.Attribute, aliases: dict[str, str]) -> str | None:
    if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in DUNDERS_ALLOWED:
        return f"touches {node.attr}: introspection is not allowed"
    return _chain_problem(_resolve(node, aliases))


def _call_problem(node: ast.Call, aliases: dict[str, str]) -> str | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr"):
        if len(node.args) < 2 or not (isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            return f"uses {func.id}() with a computed attribute name, which hides what it reaches"
        # getattr(x, "name") reaches what x.name does
        return _chain_problem(f"{_resolve(node.args[0], aliases)}.{node.args[1].value}")
    if isinstance(func, ast.Call) and _resolve(func.func, aliases) == "ctypes.POINTER":
        return "makes a ctypes pointer object: indexing it reads and writes past its target, the harness's memory"
    if _resolve(func, aliases) == "ctypes.cast" and not _scalar_ctype(_argument(node, 1, "typ"), aliases):
        return ("uses ctypes.cast to a pointer or object type: it reads and writes any address, the harness's "
                "memory among them (cast to c_void_p, c_int, ... instead)")
    return None


def _argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _scalar_ctype(node: ast.AST | None, aliases: dict[str, str]) -> bool:
    if node is None:
        return False
    name = _resolve(node, aliases)
    return name.startswith("ctypes.c_") and name.count(".") == 1 and name.split(".")[1] not in CTYPES_FORBIDDEN


def _chain_problem(dotted: str) -> str | None:
    """Judge a resolved attribute chain: its rules, then every segment that names a module."""
    problem = _attr_problem(dotted)
    if problem:
        return problem
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if i and part in FORBIDDEN_MODULES:
            return f"uses {dotted}: it reaches {part}, and {FORBIDDEN_MODULES[part]}"
        if i and part in FORBIDDEN_METHODS:
            return f"uses {dotted}: {FORBIDDEN_METHODS[part]} is not allowed"
        if part == "os" and len(parts) > i + 1 and parts[i + 1] not in OS_ALLOWED:
            return (f"uses {dotted}: only os.{', os.'.join(sorted(OS_ALLOWED))} are allowed (the rest of os "
                    "starts processes, changes files or exits)")
        if part == "ctypes" and len(parts) > i + 1 and _ctypes_problem(parts[i + 1]):
            return f"uses {dotted}: {_ctypes_problem(parts[i + 1])}"
    return None


def _ctypes_problem(name: str) -> str | None:
    if name in CTYPES_FORBIDDEN:
        return f"{CTYPES_FORBIDDEN[name]}, which the sandbox cannot contain in the harness's own process"
    if name.startswith("_"):
        return "ctypes' internals reach raw memory and C functions"
    return None


def _attr_problem(dotted: str) -> str | None:
    padded = f".{dotted}."
    for pattern, why in forbidden_attrs().items():
        if f".{pattern}." in padded:
            return f"uses {dotted}: {why} is not allowed"
    return None


def _current_stream_wrappers(tree: ast.Module, aliases: dict[str, str]) -> set[int]:
    """The `ExternalStream` attributes of calls that wrap torch's current stream (CuPy's documented
    way to launch on it): its work is ordered with torch's and the timer's device-wide sync counts it
    anyway. ExternalStreams of any other handle stay refused with the side streams."""
    assigned: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                assigned.setdefault(_dotted(target), []).append(node.value)
    # a name also bound another way (a parameter, a loop, unpacking) may hold any handle
    stores = Counter(_dotted(n) for n in ast.walk(tree) if isinstance(getattr(n, "ctx", None), ast.Store))
    stores.update(a.arg for a in ast.walk(tree) if isinstance(a, ast.arg))
    assigned = {name: values for name, values in assigned.items() if len(values) == stores[name]}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "ExternalStream":
            handle = _argument(node, 0, "ptr")
            if handle is not None and _is_current_stream(handle, assigned, aliases, "cuda_stream"):
                found.add(id(node.func))
    return found


def _is_current_stream(expr: ast.AST, assigned: dict[str, list[ast.AST]], aliases: dict[str, str], want: str,
                       depth: int = 0) -> bool:
    """`want` is "cuda_stream" for the stream's handle, "" for the stream object."""
    if depth > 4:
        return False
    if want and isinstance(expr, ast.Attribute) and expr.attr == want:
        return _is_current_stream(expr.value, assigned, aliases, "", depth + 1)
    if not want and isinstance(expr, ast.Call):
        return _resolve(expr.func, aliases) == "torch.cuda.current_stream"
    name = _dotted(expr)
    values = assigned.get(name, []) if name else []
    return bool(values) and all(_is_current_stream(v, assigned, aliases, want, depth + 1) for v in values)


def _builtin_reads(table: symtable.SymbolTable) -> set[str]:
    """The forbidden builtins read somewhere. A name that a function binds (a parameter such as
    `input`, an assignment) is that function's own and never the builtin; at module or class
    level a binding may be skipped or deleted, so a read there may still reach the builtin."""
    found = {sym.get_name() for sym in table.get_symbols() if sym.get_name() in FORBIDDEN_CALLS
             and sym.is_referenced() and not _bound_in_function(table, sym)}
    for child in table.get_children():
        found |= _builtin_reads(child)
    return found


def _bound_in_function(table: symtable.SymbolTable, sym: symtable.Symbol) -> bool:
    if sym.is_free():  # a local of an enclosing function
        return True
    return table.get_type() == "function" and sym.is_local() and not sym.is_global()


def _native_problem(native: str) -> str | None:
    for pattern, why in languages.rules().native.items():
        match = re.search(pattern, native)
        if match:
            return f"its C++/CUDA source uses {match.group(0).strip()}: {why} is not allowed"
    return None
