"""static.py: the policy refuses forbidden APIs before anything runs, and names kernels."""

import pytest

from warpforge.evaluate.static import check_source

HEADER = "import torch\nimport torch.nn as nn\n"
MODEL = "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2\n"


@pytest.mark.parametrize("snippet, why", [
    ("import threading", "threads"),
    ("from concurrent.futures import ThreadPoolExecutor", "thread"),
    ("import ctypes", "raw memory"),
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
    ("torch.backends.cuda.matmul.allow_tf32 = True", "precision"),
    ("x = eval('1')", "dynamic code"),
    ("m = __import__('threading')", "dynamic imports"),
    ("data = open('/tmp/x').read()", "files"),
    ("t = torch.load('/tmp/ref.pt')", "reading files"),
    ("src = '__global__ void k() {}  cudaStreamCreate(&s);'", "side streams"),
    ("src = '#include <thread>\\nvoid f() { std::thread t(g); }'", "threads"),
])
def test_forbidden_source_is_rejected(snippet, why):
    report = check_source(HEADER + snippet + MODEL)
    assert report.rejected is not None and why in report.rejected


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


def test_tf32_allowed_when_opted_in():
    source = HEADER + "torch.backends.cuda.matmul.allow_tf32 = True" + MODEL
    assert check_source(source, allow_tf32=True).rejected is None


def test_syntax_error_and_missing_modelnew():
    assert check_source("def broken(:\n").syntax_error
    assert "ModelNew" in check_source(HEADER + "x = 1\n").syntax_error
