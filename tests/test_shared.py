"""evaluate/shared.py: GPU tensors as CUDA IPC handles between the evaluator's processes.

On the CPU only what needs no GPU: a descriptor the candidate's process wrote is checked before
any driver call (tests/test_gpu.py opens real handles, across processes and the sandbox)."""

import pytest

from warpforge.evaluate import shared

GOOD = {"cuda_ipc": "00" * 64, "shape": [4, 8], "dtype": "float32", "nbytes": 128}


def test_a_descriptor_is_told_from_a_tensor_or_a_number():
    import torch

    assert shared.is_descriptor(GOOD)
    assert not shared.is_descriptor(torch.zeros(2)) and not shared.is_descriptor(3) and not shared.is_descriptor({})


@pytest.mark.parametrize("bad, fragment", [
    ({**GOOD, "cuda_ipc": "00" * 63}, "malformed"),           # a handle is 64 bytes
    ({**GOOD, "cuda_ipc": "zz" * 64}, "malformed"),           # not hex
    ({**GOOD, "dtype": "no_such_dtype"}, "malformed"),
    ({**GOOD, "dtype": "Tensor"}, "malformed"),               # a torch attribute that is no dtype
    ({**GOOD, "shape": [4, -8]}, "malformed"),
    ({**GOOD, "shape": "4x8"}, "malformed"),
    ({k: v for k, v in GOOD.items() if k != "nbytes"}, "malformed"),
    ({**GOOD, "nbytes": 4096}, "do not make 4096 bytes"),     # a size the shape does not have
])
def test_a_malformed_descriptor_is_refused_before_any_driver_call(bad, fragment):
    opened = shared.Opened([])
    with pytest.raises(shared.SharingError, match=fragment):
        shared.open_descriptor(bad, opened)
    assert opened.pointers == []


def test_nothing_to_free_or_close_needs_no_gpu():
    shared.Exported([]).free()
    shared.Opened([]).close()


def test_a_handle_keeps_all_64_bytes_through_its_descriptor():
    """A CUDA IPC handle holds NUL bytes; ctypes reads a char array's field as bytes cut at the
    first NUL, which once made every descriptor 'malformed' on the GPU."""
    raw = bytes([0, 1, 0, 2] * 16)
    handle = shared._handle_from(raw)
    assert shared._handle_bytes(handle) == raw
    assert len(bytes.fromhex(shared._handle_bytes(handle).hex())) == 64
