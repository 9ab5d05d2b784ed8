"""zero's memory as torch tensors (python/zero/_tensors.py): DLPack views in every dtype that
share the memory both ways, descriptors torch and a GPU would read, and each freed with its
tensor. One process, no engine: the views are over memory this test owns.
"""

import ctypes
import gc

import pytest
import torch

from zero import ZeroError, _tensors

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Odd sizes and ranks, the shapes parameters have.
SHAPES = [(1,), (7,), (3, 5), (2, 3, 7), (1, 1, 13)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_view_shares_the_memory_both_ways(dtype, shape):
    owner = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)
    view = _tensors.view(owner.data_ptr(), shape, dtype, torch.device("cpu"))
    assert view.dtype == dtype and tuple(view.shape) == shape and view.is_contiguous()
    assert view.data_ptr() == owner.data_ptr(), "a view must not copy"
    assert torch.equal(view, owner)
    last = (...,) + (shape[-1] - 1,)
    view[last] = 3.0
    assert torch.all(owner[last] == 3.0), "a write through the view must reach the memory"
    owner.view(-1)[0] = -5.0
    assert view.view(-1)[0].item() == -5.0, "a write to the memory must show in the view"


def test_bf16_is_bfloat_not_reinterpreted_integers():
    owner = torch.tensor([1.5, -2.25, 1e30], dtype=torch.bfloat16)
    view = _tensors.view(owner.data_ptr(), (3,), torch.bfloat16, torch.device("cpu"))
    assert view.dtype == torch.bfloat16
    assert view.tolist() == owner.tolist()
    assert (view * 2).tolist() == [3.0, -4.5, owner[2].item() * 2]


def describe(capsule, versioned):
    """The DLPack structure a capsule holds (without consuming it)."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    name = b"dltensor_versioned" if versioned else b"dltensor"
    kind = _tensors.DLManagedTensorVersioned if versioned else _tensors.DLManagedTensor
    return kind.from_address(get_pointer(capsule, name))


def release(managed):
    """Calls the structure's deleter, as a consumer would."""
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(managed.deleter)(ctypes.addressof(managed))


@pytest.mark.parametrize("versioned", [True, False], ids=["dlpack-1.0", "legacy"])
def test_a_gpu_view_is_described_with_its_device_dtype_and_shape(versioned):
    """What a CUDA consumer reads, checked without a GPU: the device is DLPack's CUDA with the
    GPU's index, bf16 is DLPack's bfloat, the shape is the parameter's, compact."""
    memory = _tensors.Memory(0x7F0000001000, (5, 3), torch.bfloat16, torch.device("cuda", 3))
    assert memory.__dlpack_device__() == (_tensors.KDL_CUDA, 3)
    capsule = memory.__dlpack__(stream=7, max_version=(1, 2) if versioned else None)
    managed = describe(capsule, versioned)
    if versioned:
        assert (managed.version.major, managed.version.minor) == (1, 0)
        assert managed.flags == 0, "the memory is writable: no read-only flag"
    tensor = managed.dl_tensor
    assert tensor.data == 0x7F0000001000 and tensor.byte_offset == 0
    assert (tensor.device.device_type, tensor.device.device_id) == (_tensors.KDL_CUDA, 3)
    assert (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == (4, 16, 1)
    assert tensor.ndim == 2 and [tensor.shape[0], tensor.shape[1]] == [5, 3]
    assert not tensor.strides, "compact row-major: strides NULL"
    release(managed)


def test_the_legacy_capsule_is_what_torch_reads_too():
    owner = torch.arange(12, dtype=torch.float16)
    memory = _tensors.Memory(owner.data_ptr(), (4, 3), torch.float16, torch.device("cpu"))
    view = torch.utils.dlpack.from_dlpack(memory.__dlpack__())
    assert view.data_ptr() == owner.data_ptr() and torch.equal(view, owner.view(4, 3))


def test_each_descriptor_is_freed_with_its_tensor(monkeypatch):
    """The deleter torch calls when the last tensor over a view goes is a free of the
    descriptor's one block: counted here through a wrapper around libc's free."""
    libc = ctypes.CDLL(None)
    freed = []

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def counting_free(block):
        freed.append(block)
        libc.free(ctypes.c_void_p(block))

    monkeypatch.setattr(_tensors, "_FREE", ctypes.cast(counting_free, ctypes.c_void_p).value)
    owner = torch.zeros(10)
    views = [_tensors.view(owner.data_ptr(), (2, 5), torch.float32, torch.device("cpu"))
             for _ in range(3)]
    alias = views[0].view(10)
    assert freed == []
    del views[1:]
    gc.collect()
    assert len(freed) == 2, "two views dropped: two descriptors freed"
    del views
    assert len(freed) == 2, "a tensor over the first view still holds its descriptor"
    del alias
    gc.collect()
    assert len(freed) == 3 and len(set(freed)) == 3


def test_empty_null_and_misuse():
    empty = _tensors.view(None, (0, 4), torch.float32, torch.device("cpu"))
    assert tuple(empty.shape) == (0, 4)
    with pytest.raises(ZeroError, match="null address"):
        _tensors.view(0, (4,), torch.float32, torch.device("cpu"))
    memory = _tensors.Memory(0x1000, (4,), torch.float32, torch.device("cpu"))
    with pytest.raises(BufferError, match="never a copy"):
        memory.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="not"):
        memory.__dlpack__(dl_device=(_tensors.KDL_CUDA, 0))
    with pytest.raises(ZeroError, match="meta device"):
        _tensors.dl_device(torch.device("meta"))
