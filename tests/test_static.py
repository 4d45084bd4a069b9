"""static.py: the policy refuses forbidden APIs before anything runs, and names kernels; and the
worker's run-time thread check tells torch.compile's threads from a candidate's own."""

import importlib.util
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from warpforge.evaluate.static import check_source

HEADER = "import torch\nimport torch.nn as nn\n"
MODEL = "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
CANDIDATES = Path(__file__).parent / "fixtures" / "candidates"
ROOT = Path(__file__).resolve().parents[1]


def refused(snippet: str) -> str:
    report = check_source(HEADER + snippet + MODEL)
    assert report.syntax_error is None, report.syntax_error
    assert report.rejected is not None, f"accepted: {snippet!r}"
    return report.rejected


def accepted(source: str) -> None:
    report = check_source(source)
    assert report.syntax_error is None and report.rejected is None, (report.syntax_error, report.rejected)


@pytest.mark.parametrize("snippet, why", [
    ("import threading", "thread check"),
    ("import _thread", "thread check"),
    ("from concurrent.futures import ProcessPoolExecutor", "other processes"),
    ("from concurrent.futures import ThreadPoolExecutor\np = ThreadPoolExecutor(1)\nt = next(iter(p._threads))", "Thread"),
    ("import ctypes\nctypes.memmove(0, 1, 8)", "any address"),
    ("import gc", "garbage"),
    ("import os\nos._exit(0)", "exiting"),
    ("import sys\nf = sys._getframe()", "imports sys"),
    ("import io\nf = io.open('/proc/self/environ')", "imports io"),
    ("import os\nos.execv('/bin/sh', [])", "only os."),
    ("x = getattr(torch, 'lo' + 'ad')", "computed attribute"),
    ("m = vars(torch)", "namespaces"),
    ("b = __builtins__['__import__']", "builtins"),
    ("c = torch.Tensor.__subclasses__()", "introspection"),
    ("s = torch.cuda.Stream()", "side streams"),
    ("from torch.cuda import Stream as S\ns = S()", "side streams"),
    ("import cupy\ns = cupy.cuda.ExternalStream(0)", "side streams"),
    ("x = eval('1')", "dynamic code"),
    ("m = __import__('threading')", "dynamic imports"),
    ("data = open('/tmp/x').read()", "files"),
    ("t = torch.load('/tmp/ref.pt')", "reading files"),
    ("src = '__global__ void k() {}  cudaStreamCreate(&s);'", "side streams"),
    ("src = '#include <thread>\\nvoid f() { std::thread t(g); }'", "threads"),
])
def test_forbidden_source_is_rejected(snippet, why):
    assert why in refused(snippet)


# --- bypasses of the policy as it was (issue 18, Why §1): each class refused -------------------
@pytest.mark.parametrize("snippet, reached", [
    ("import torch.utils.cpp_extension as ce\nce.subprocess.run(['id'])", "subprocess"),
    ("from torch.utils.cpp_extension import subprocess", "subprocess"),
    ("from torch.utils import cpp_extension\ncpp_extension.shutil.rmtree('/data')", "shutil"),
    ("names = torch.utils.cpp_extension.glob.glob('/*')", "glob"),
    ("torch.utils.cpp_extension.os.system('id')", "os.system"),
    ("torch.utils.cpp_extension.os.execv('/bin/sh', [])", "os.execv"),
    ("m = torch.utils.cpp_extension.sys.modules", "sys"),
    ("m = torch.utils.cpp_extension.importlib.import_module('io')", "importlib"),
    ("p = torch.utils.cpp_extension.sysconfig.get_paths()", "sysconfig"),
    ("sp = getattr(torch.utils.cpp_extension, 'subprocess')", "subprocess"),
    ("def run(x):\n    return x.subprocess.run(['id'])", "subprocess"),
    ("def run(x):\n    return x()._thread.start_new_thread(print, ())", "_thread"),
])
def test_module_reached_through_an_attribute_chain_is_refused(snippet, reached):
    assert f"{reached}" in refused(snippet).split(":")[0]


@pytest.mark.parametrize("snippet", [
    "r = torch.hub.urlopen('http://127.0.0.1:8000/')",
    "torch.hub.download_url_to_file('http://127.0.0.1:8000/k', 'k')",
    "from torch.hub import urlopen",
    "import torch.hub as hub\nm = hub.load('a/b', 'c')",
    "sd = torch.utils.model_zoo.load_url('http://127.0.0.1:8000/w.pt')",
])
def test_torch_hub_network_access_is_refused(snippet):
    assert "network" in refused(snippet)


@pytest.mark.parametrize("snippet", [
    "import numpy as np\nnp.savetxt('/tmp/out.txt', [1.0])",
    "import numpy as np\na = np.genfromtxt('/tmp/ref.txt')",
    "import numpy as np\na = np.fromregex('/tmp/ref.txt', r'(\\d+)', [('x', int)])",
    "import numpy as np\nnp.savez('/tmp/out', a=1)",
    "import numpy as np\nnp.savez_compressed('/tmp/out', a=1)",
    "from numpy import savetxt",
    "import numpy as np\nnp.lib.npyio.savetxt('/tmp/out.txt', [1.0])",
    "import numpy as np\nnp.zeros(3).tofile('/tmp/out.bin')",
    "import numpy as np\nnp.zeros(3).dump('/tmp/out.pkl')",
    "s = torch.UntypedStorage.from_file('/tmp/ref.bin', True, 16)",
    "t = torch.serialization.load('/tmp/ref.pt')",
    "torch.jit.save(torch.jit.script(torch.nn.ReLU()), '/tmp/m.pt')",
])
def test_numpy_and_torch_file_io_is_refused(snippet):
    assert "files" in refused(snippet)


@pytest.mark.parametrize("cpp, why", [
    ('#include <cstdio>\\nvoid f(const char* p) { FILE* h = fopen(p, "r"); }', "files"),
    ('void f(const char* path) { int fd = open(path, 0); }', "files"),
    ('#include <torch/extension.h>\\nvoid f(std::string p) { std::ifstream in(p); }', "files"),
    ('#include <torch/extension.h>\\nvoid f(std::string p) { std::ofstream out(p); }', "files"),
    ('#include <torch/extension.h>\\nvoid f(std::string p) { std::fstream io(p); }', "files"),
    ('#include <torch/extension.h>\\nvoid f(std::string p) { std::basic_ifstream<char> in(p); }', "files"),
    ('#include <cstdio>\\nvoid f() { FILE* p = popen("id", "r"); }', "processes"),
    ('#include <dlfcn.h>\\nvoid f() { void* h = dlopen("libc.so.6", 1); }', "libraries"),
    ('#include <sys/socket.h>\\nvoid f() { int s = socket(2, 1, 0); }', "network"),
    ('void f(int s, void* a) { connect(s, a, 16); }', "network"),  # no #include: a C string all the same
])
def test_cpp_file_process_and_network_apis_are_refused(cpp, why):
    assert why in refused(f"src = '{cpp}'")


@pytest.mark.parametrize("snippet", [
    "import ctypes\nctypes.memmove(1, 2, 3)",
    "import ctypes\nctypes.memset(1, 0, 8)",
    "import ctypes\nb = ctypes.string_at(1, 8)",
    "import ctypes\nf = ctypes.pythonapi.PyObject_GetAttr",
    "import ctypes\no = ctypes.py_object(1)",
    "import ctypes\nlibc = ctypes.CDLL('libc.so.6')",
    "import ctypes\nlibc = ctypes.cdll.LoadLibrary('libc.so.6')",
    "import ctypes\nlib = ctypes.PyDLL(None)",
    "import ctypes\nproto = ctypes.CFUNCTYPE(ctypes.c_int)",
    "import ctypes\no = ctypes.cast(1, ctypes.py_object)",
    "import ctypes\np = ctypes.cast(1, ctypes.POINTER(ctypes.c_long))",
    "import ctypes\np = ctypes.POINTER(ctypes.c_long)(ctypes.c_long(1))",
    "import ctypes\nv = ctypes.c_long.from_address(1)",
    "from ctypes import memmove",
    "from ctypes import *",
    "import ctypes.util",
])
def test_ctypes_raw_memory_and_c_calls_are_refused(snippet):
    assert refused(snippet)


@pytest.mark.parametrize("snippet", [
    "line = input()",
    "read = input\nline = read()",
    "input = None\ndef g():\n    return input()",  # a module-level name can be deleted: still the builtin
    "def g():\n    global input\n    input = print\ndef h():\n    return input()",
    "class A:\n    line = input()",
])
def test_the_builtin_input_is_refused(snippet):
    assert "standard input" in refused(snippet)


@pytest.mark.parametrize("snippet", [
    "import cupy\ns = cupy.cuda.ExternalStream(12345)",
    "import cupy\ndef f(handle):\n    return cupy.cuda.ExternalStream(handle)",
    "import cupy\nh = torch.cuda.current_stream().cuda_stream\nfor h in [1]:\n    s = cupy.cuda.ExternalStream(h)",
    "import cupy\ns = cupy.cuda.ExternalStream(torch.cuda.Stream().cuda_stream)",
    "import cupy\ns = cupy.cuda.Stream(non_blocking=True)",
    "s = torch.cuda.ExternalStream(12345)",
])
def test_side_streams_are_still_refused(snippet):
    assert "side streams" in refused(snippet)


@pytest.mark.parametrize("snippet", [
    "torch.backends.cudnn.allow_tf32 = True",
    "torch.backends.cuda.matmul.allow_tf32 = True",
    "torch.set_float32_matmul_precision('high')",
    "torch.backends.cuda.matmul.fp32_precision = 'tf32'",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True",
])
def test_precision_flags_are_not_refused(snippet):
    """Issue 40: 16 of the 25 CUDA-L1 kernels refused "for TF32" only set flags that changed nothing
    for their task. A flag changes only the candidate's own process; its error decides
    (tests/test_precision_policy.py runs such candidates)."""
    accepted(HEADER + snippet + MODEL)


def test_a_joined_thread_pool_is_not_refused():
    """Its workers are stdlib threads the run-time check sees (tests/test_exploits.py runs a joined
    and an un-joined pool)."""
    accepted(HEADER + """from concurrent.futures import ThreadPoolExecutor


class ModelNew(nn.Module):
    def forward(self, x):
        with ThreadPoolExecutor(2) as pool:
            halves = list(pool.map(torch.relu, x.chunk(2)))
        return torch.cat(halves)
""")


# --- legitimate patterns the sandbox contains: accepted ------------------------------------------
def test_cupy_on_torchs_current_stream_is_accepted():
    accepted(HEADER + '''import cupy
import numpy as np

_relu = cupy.RawKernel(r"""
extern "C" __global__ void relu(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}""", "relu")


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            _relu(((n + 255) // 256,), (256,), (x.data_ptr(), y.data_ptr(), np.int64(n)))
        stream = torch.cuda.current_stream(x.device)
        handle = stream.cuda_stream
        with cupy.cuda.ExternalStream(handle):
            pass
        return y
''')


def test_torch_compile_inside_a_candidate_is_accepted():
    accepted(HEADER + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fused = torch.compile(self._body, mode="max-autotune-no-cudagraphs", dynamic=False)

    def _body(self, x):
        return torch.nn.functional.gelu(x) * 2

    def forward(self, x):
        return self.fused(x)
''')


def test_a_parameter_named_input_is_accepted():
    accepted(HEADER + '''import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, input, target):
        input = input.float()
        return F.cross_entropy(input, target)


def rows(input):
    return [row for row in input]
''')


def test_a_build_folder_made_with_os_is_accepted():
    accepted(HEADER + '''import os
from torch.utils.cpp_extension import load_inline

BUILD = os.path.join(os.getcwd(), "build", f"relu_ext_{os.getpid()}")
os.makedirs(BUILD, exist_ok=True)
ARCH = os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0")
_ext = load_inline(name="relu_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                   cuda_sources=r"""
#include <torch/extension.h>
__global__ void relu_k(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}""", functions=["relu"], build_directory=BUILD)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.relu(x)
''')


def test_ctypes_for_pointers_is_accepted():
    accepted(HEADER + '''import ctypes
from ctypes import c_void_p, sizeof


class Params(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("n", ctypes.c_int), ("alpha", ctypes.c_float)]


class ModelNew(nn.Module):
    def forward(self, x):
        n = ctypes.c_int(x.numel())
        ptr = c_void_p(x.data_ptr())
        args = (c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(n))
        packed = ctypes.cast(args, ctypes.c_void_p)
        ref = ctypes.byref(n)
        float_ptr = ctypes.POINTER(ctypes.c_float)
        size = sizeof(Params) + ctypes.sizeof(ctypes.c_void_p)
        return x * 2
''')


@pytest.mark.parametrize("path", ["tests/fixtures/gpu_exploits/illegal_address.py", "tests/fixtures/gpu_exploits/device_hang.py",
                                  "examples/gpu/relu__nvrtc_stream.py", "examples/gpu/relu__compile.py"])
def test_gpu_faults_and_legitimate_gpu_candidates_pass_the_static_check(path):
    """The faults must run, so their real run-time status (runtime_error, timeout) is reported;
    the candidates use the legitimate patterns above on a GPU."""
    accepted((ROOT / path).read_text())


def test_honest_source_passes_and_names_its_kernels():
    source = HEADER + (
        "import triton\nimport triton.language as tl\n"
        "@triton.jit\ndef add_kernel(x, y, n, B: tl.constexpr):\n    pass\n"
        "cuda_src = '__global__ void scale_rows(const float* x, float* y, int n) {}'\n"
        "more = 'extern \"C\" __global__ void __launch_bounds__(256) relu_k(const float* x) {}'\n"
        "import os\nos.environ.setdefault('A', 'b')\n"
    ) + MODEL
    report = check_source(source)
    assert report.rejected is None and report.syntax_error is None
    assert set(report.kernel_names) == {"add_kernel", "scale_rows", "relu_k"}
    assert "triton" in report.languages


def test_syntax_error_and_missing_modelnew():
    assert check_source("def broken(:\n").syntax_error
    assert "ModelNew" in check_source(HEADER + "x = 1\n").syntax_error


# --- the worker's thread check: torch.compile's machinery passes, the candidate's threads do not --
def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"candidate_{name}", CANDIDATES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function_in(path: str, source: str, name: str):
    """A function whose code lives in `path`, as a module of that package would have it."""
    namespace: dict = {"threading": threading}
    exec(compile(source, path, "exec"), namespace)
    return namespace[name]


def test_the_background_thread_fixtures_are_still_refused_at_run_time():
    from warpforge.evaluate.worker import _new_threads

    before = set(threading.enumerate())
    _load("background_thread_obfuscated").ModelNew()(torch.randn(8, 8), torch.randn(8, 8))
    assert "background threads" in (_new_threads(before) or "")
    before = set(threading.enumerate())
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # so the fixture's torch.matmul thread is still running when checked
    try:
        a = torch.randn(1536, 1536)
        _load("background_thread").ModelNew()(a, a)
        assert "matmul" in (_new_threads(before) or "")
    finally:
        torch.set_num_threads(torch_threads)


def test_threads_of_torch_compile_machinery_are_ignored_and_the_candidates_are_not():
    from warpforge.evaluate.worker import _MACHINERY_CODE, _new_threads

    stop = threading.Event()
    loop = "def loop(stop):\n    stop.wait()\n"
    inductor = _function_in(os.path.join(_MACHINERY_CODE[0], "compile_worker", "subproc_pool.py"), loop, "loop")
    monitor = _function_in(os.path.join(_MACHINERY_CODE[-1], "_monitor.py"),
                           "class TMonitor(threading.Thread):\n    def run(self):\n        self.stop.wait()\n", "TMonitor")
    own = _function_in("/work/candidate.py", loop, "loop")
    before = set(threading.enumerate())
    pool = ThreadPoolExecutor(1)
    try:
        threading.Thread(target=inductor, args=(stop,), name="InductorSubproc", daemon=True).start()
        tqdm_like = monitor(daemon=True)
        tqdm_like.stop = stop
        tqdm_like.start()
        pool.submit(time.sleep, 0).result()  # an idle pool worker holds nothing of the candidate's
        time.sleep(0.05)
        assert _new_threads(before) is None
        pool.submit(stop.wait)  # a worker running the candidate's job is the candidate's thread
        time.sleep(0.05)
        assert "ThreadPoolExecutor" in (_new_threads(before) or "")
        stop.set()
        pool.shutdown(wait=True)
        stop.clear()
        threading.Thread(target=own, args=(stop,), name="InductorSubproc", daemon=True).start()  # a borrowed name
        assert "InductorSubproc" in (_new_threads(before) or "")
    finally:
        stop.set()
        pool.shutdown(wait=True)


CUDA_WITH_COMMENTS = '''
__global__ void __launch_bounds__(THREADS, 2)   // 64-register budget, 8 loads in flight
huber_fused_kernel(const float* __restrict__ p, double* partials) {}
__global__ /* a block comment: x-y */ void
scale(float* y) {}
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(NT, 3)
l1norm_cluster_kernel(const float* x, float* y) {}
__global__ void __attribute__((noinline)) __maxnreg__(64) tail_k(float* y) {}
__global__ void __launch_bounds__(MAX(NT, min(256, 4 * 32))) __attribute__((visibility("default")))
nested_k(float* y) {}
'''


def test_kernel_names_are_found_past_comments():
    """A comment between the launch bounds and the name (KernelBench level1/96's best in issue 22's
    campaign: `__launch_bounds__(THREADS, 2)   // 64-register budget ...`) hid the kernel, and the
    profile then called the candidate a PyTorch rewrite. So did a cluster kernel's attribute, read
    as its name (level1/38's best: `__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(NT, 3)`)."""
    report = check_source(HEADER + f"cuda_src = {CUDA_WITH_COMMENTS!r}\n" + MODEL)
    assert report.rejected is None
    assert set(report.kernel_names) == {"huber_fused_kernel", "scale", "l1norm_cluster_kernel", "tail_k", "nested_k"}
