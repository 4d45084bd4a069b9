"""GPU tensors handed between the evaluator's processes without a trip through host memory.

The reference process's input sets reach a candidate's process, and the candidate's verified
outputs reach the reference process, as CUDA IPC handles (the driver API's cuIpcGetMemHandle /
cuIpcOpenMemHandle, through ctypes) instead of files on tmpfs. Measured on an H100 through the
bubblewrap sandbox (lab/transfer_probe.py): 5 x 256 MiB of outputs crossed as files in
3.17 s (GPU -> host, torch.save, torch.load, host -> GPU); a handle opened and read in 0.05 s.

What makes it safe:
- Every exported tensor is a *copy* in an allocation of its own (cuMemAlloc, not PyTorch's
  caching allocator, in whole 2 MiB pages). A handle maps its whole allocation into the other process, writable: an
  allocation shared with anything else (the reference's float64 outputs, its own input sets,
  which paired timing uses) would show that to the candidate, or let it change it.
- The importer checks each handle's allocation covers the bytes the descriptor claims before
  it reads a byte (cuMemGetAddressRange), so a forged descriptor cannot make the reference
  process read out of bounds; a handle that fails to open is the candidate's failure.
- A process cannot open its own handles (the driver refuses), so a candidate cannot hand the
  reference process a handle of the reference's own memory to compare with itself: the only
  memory the reference opens is the candidate's.
- Copies are snapshots, as the files were: an output changed after it was handed over does not
  change what is compared.

`available()` says whether this process can use it (CUDA, and the driver library found);
callers fall back to files otherwise (the CPU, and sets too big for the GPU).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

import torch

_HANDLE_BYTES = 64
_PAGE = 2 << 20
_LAZY_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, the only flag cuIpcOpenMemHandle takes


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _HANDLE_BYTES)]


def _handle_bytes(handle: _Handle) -> bytes:
    """All 64 bytes (the field itself reads as bytes cut at the first NUL)."""
    return ctypes.string_at(ctypes.addressof(handle), _HANDLE_BYTES)


def _handle_from(raw: bytes) -> _Handle:
    handle = _Handle()
    ctypes.memmove(ctypes.addressof(handle), raw, _HANDLE_BYTES)
    return handle


class SharingError(RuntimeError):
    """A handle could not be made or opened."""


@functools.lru_cache(maxsize=1)
def _driver() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
    # (drivers before CUDA 11 name it without the suffix)
    opener = getattr(lib, "cuIpcOpenMemHandle_v2", None) or lib.cuIpcOpenMemHandle
    opener.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
    setattr(lib, "cuIpcOpenMemHandle_v2", opener)
    lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
    lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                            ctypes.c_uint64]
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def available() -> bool:
    """Whether this process can share GPU tensors (CUDA initialised, the driver library found)."""
    return torch.cuda.is_available() and _driver() is not None


@functools.lru_cache(maxsize=1)
def _context() -> None:
    """Make PyTorch create its CUDA context on this device (the driver calls below run in it; in a
    process that has not touched the GPU yet they fail with CUDA_ERROR_NOT_INITIALIZED)."""
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()


def _call(name: str, *args: Any) -> None:
    lib = _driver()
    assert lib is not None
    _context()
    code = getattr(lib, name)(*args)
    if code != 0:
        text = ctypes.c_char_p()
        lib.cuGetErrorName(code, ctypes.byref(text))
        raise SharingError(f"{name} failed: {(text.value or b'?').decode()} ({code})")


class _CudaArray:
    """Device memory presented to torch.as_tensor through __cuda_array_interface__ (no copy)."""

    def __init__(self, pointer: int, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        typestr = torch.empty(0, dtype=dtype).numpy().dtype.str if dtype != torch.bfloat16 else "<V2"
        self.__cuda_array_interface__ = {"data": (pointer, False), "shape": shape, "typestr": typestr,
                                         "version": 2}


def _view(pointer: int, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    """A tensor over `pointer` (whose memory it does not own)."""
    numel = 1
    for n in shape:
        numel *= n
    if dtype == torch.bfloat16:  # no NumPy type string: a 16-bit integer view, reinterpreted
        flat = torch.as_tensor(_CudaArray(pointer, (numel,), torch.int16), device="cuda").view(torch.bfloat16)
    elif dtype == torch.bool:
        flat = torch.as_tensor(_CudaArray(pointer, (numel,), torch.uint8), device="cuda").view(torch.bool)
    else:
        flat = torch.as_tensor(_CudaArray(pointer, (numel,), dtype), device="cuda")
    return flat.view(shape)


@dataclass
class Exported:
    """Allocations this process made for other processes to open; `free()` them once the other
    side is done (their memory is not PyTorch's, so nothing else frees it)."""

    pointers: list[int]

    def free(self) -> None:
        if not self.pointers:
            return
        torch.cuda.synchronize()
        for pointer in self.pointers:
            _call("cuMemFree_v2", ctypes.c_uint64(pointer))
        self.pointers.clear()


def export(tensors: list[Any], exported: Exported) -> list[Any]:
    """Each CUDA tensor in `tensors` as a descriptor (a copy of it in an allocation of its own,
    whose handle another process can open); anything else (numbers, CPU tensors) as it is. The
    copies' allocations are added to `exported`."""
    out: list[Any] = []
    for t in tensors:
        if not (isinstance(t, torch.Tensor) and t.is_cuda and t.numel()):
            out.append(t)
            continue
        nbytes = t.numel() * t.element_size()
        pointer = ctypes.c_uint64()
        # whole 2 MiB pages, so no other allocation can share a page with it (the driver may pack
        # small allocations together)
        _call("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(-(-nbytes // _PAGE) * _PAGE))
        exported.pointers.append(pointer.value)
        _view(pointer.value, list(t.shape), t.dtype).copy_(t.detach())
        handle = _Handle()
        _call("cuIpcGetMemHandle", ctypes.byref(handle), pointer)
        out.append({"cuda_ipc": _handle_bytes(handle).hex(), "shape": list(t.shape),
                    "dtype": str(t.dtype).removeprefix("torch."), "nbytes": nbytes})
    torch.cuda.synchronize()  # the copies are complete before anyone opens them
    return out


def is_descriptor(value: Any) -> bool:
    return isinstance(value, dict) and "cuda_ipc" in value


@dataclass
class Opened:
    """Handles this process opened; `close()` them when done with the tensors over them."""

    pointers: list[int]

    def close(self) -> None:
        if not self.pointers:
            return
        torch.cuda.synchronize()
        for pointer in self.pointers:
            _call("cuIpcCloseMemHandle", ctypes.c_uint64(pointer))
        self.pointers.clear()


def open_descriptor(value: dict[str, Any], opened: Opened) -> torch.Tensor:
    """The tensor another process exported (`export`), over its memory (no copy). Raises
    SharingError for a descriptor that does not describe an allocation the handle opens."""
    try:
        raw = bytes.fromhex(str(value["cuda_ipc"]))
        shape = [int(n) for n in value["shape"]]
        dtype = getattr(torch, str(value["dtype"]))
        nbytes = int(value["nbytes"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SharingError(f"a malformed shared-tensor descriptor ({type(exc).__name__})") from None
    if len(raw) != _HANDLE_BYTES or not isinstance(dtype, torch.dtype) or min(shape, default=1) < 0:
        raise SharingError("a malformed shared-tensor descriptor")
    numel = 1
    for n in shape:
        numel *= n
    if numel * dtype.itemsize != nbytes:
        raise SharingError(f"a shared tensor's shape {shape} and dtype {dtype} do not make {nbytes} bytes")
    handle = _handle_from(raw)
    pointer = ctypes.c_uint64()
    _call("cuIpcOpenMemHandle_v2", ctypes.byref(pointer), handle, ctypes.c_uint(_LAZY_PEER_ACCESS))
    opened.pointers.append(pointer.value)
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _call("cuMemGetAddressRange_v2", ctypes.byref(base), ctypes.byref(size), pointer)
    if base.value + size.value < pointer.value + nbytes:
        raise SharingError(f"a shared tensor claims {nbytes} bytes of an allocation of {size.value}")
    return _view(pointer.value, shape, dtype)
