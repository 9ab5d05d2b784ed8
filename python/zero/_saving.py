"""The trained weights written by streaming: a tensor at a time from zero's partitions, so that
no rank holds more than the largest tensor (rank 0 writing, every rank reading each
parameter's full value with it, zero_read_param being collective).

save_pretrained: rank 0 runs the module's own transformers save_pretrained over stand-ins (meta
tensors of the parameters' shapes and the dtype asked for; the buffers themselves), with
transformers' safetensors writer replaced by one that records each shard's name, tensors and
metadata: transformers decides the names (tied weights, its weight conversions), the sharding
(max_shard_size), the index and config files, and writes the latter. The plan is broadcast; then
every rank reads each shard's parameters in turn, and rank 0 writes them into the shard's file
(_safetensors.StreamWriter, the safetensors library's layout). The files are the bytes the
whole-model route writes.

save_16bit_model: the weights in the compute dtype into one file by rank 0, streamed where the
file is .safetensors, else torch.save'd from the values rank 0 gathers a tensor at a time (the
others hold none).

Owns nothing past the calls.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TYPE_CHECKING

import torch

from ._library import ZeroError, call
from ._safetensors import StreamWriter

if TYPE_CHECKING:
    from .engine import ZeroEngine


def _sources(engine: ZeroEngine) -> dict[str, Any]:
    """{state-dict name: the parameter's index, or the buffer tensor} for the module."""
    own = {id(p.param): p.index for p in engine._params}
    with engine._hooks.copies.allow_state_dict():
        state = engine.module.state_dict(keep_vars=True)
    return {name: own.get(id(tensor), tensor) for name, tensor in state.items()}


def full_value(engine: ZeroEngine, source: Any, dtype: torch.dtype) -> torch.Tensor:
    """Collective for a parameter (its index): its full value on the CPU in `dtype`; a buffer
    as it is."""
    if not isinstance(source, int):
        return source.detach().to("cpu")
    p = engine._params[source]
    out = torch.empty(p.shape, dtype=torch.float32)
    call("zero_read_param", engine._handle, p.index,
         ctypes.cast(out.data_ptr(), ctypes.POINTER(ctypes.c_float)), out.numel())
    return out.to(dtype)


def _broadcast_json(engine: ZeroEngine, value: Any) -> Any:
    """Rank 0's JSON value on every rank."""
    data = json.dumps(value).encode() if engine.global_rank == 0 else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    call("zero_broadcast", engine._handle, ctypes.c_void_p(size.data_ptr()), 8, 0)
    blob = torch.zeros(int(size.item()), dtype=torch.uint8)
    if engine.global_rank == 0 and data:
        blob.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    if blob.numel():
        call("zero_broadcast", engine._handle, ctypes.c_void_p(blob.data_ptr()), blob.numel(), 0)
    return json.loads(bytes(blob.tolist()).decode()) if blob.numel() else None


@contextlib.contextmanager
def _recording_writer(shards: list[dict[str, Any]]) -> Iterator[None]:
    """transformers' safetensors writer replaced, for the block, by one that appends each
    shard's file name, tensors (name, dtype, shape, in its order) and metadata to `shards`."""
    modeling = sys.modules["transformers.modeling_utils"]
    original = modeling.safe_save_file

    def record(tensors: dict[str, torch.Tensor], filename: str,
               metadata: dict[str, str] | None = None) -> None:
        shards.append({"file": os.path.basename(filename), "metadata": metadata,
                       "tensors": [[name, str(t.dtype).removeprefix("torch."), list(t.shape)]
                                   for name, t in tensors.items()]})

    modeling.safe_save_file = record
    try:
        yield
    finally:
        modeling.safe_save_file = original


def _plan(engine: ZeroEngine, save_dir: Path, sources: dict[str, Any], dtype: torch.dtype,
          kwargs: dict[str, Any]) -> dict[str, Any]:
    """Rank 0: transformers' save_pretrained over stand-ins, its config and index files
    written, its shards recorded."""
    stand_ins = {name: (torch.empty(engine._params[s].shape, dtype=dtype, device="meta")
                        if isinstance(s, int) else s.detach().to("cpu"))
                 for name, s in sources.items()}
    shards: list[dict[str, Any]] = []
    try:
        with _recording_writer(shards), engine._hooks.copies.allow_state_dict():
            engine.module.save_pretrained(save_dir, state_dict=stand_ins, **kwargs)
    except Exception as error:  # noqa: BLE001 - said to every rank below, then raised
        return {"error": f"{type(error).__name__}: {error}"}
    unknown = [t[0] for shard in shards for t in shard["tensors"] if t[0] not in sources]
    if unknown:
        return {"error": f"transformers writes {unknown[0]}, which is not one of the module's "
                         "state-dict names (a weight conversion on save); pass "
                         "save_original_format=False"}
    return {"shards": shards}


def save_pretrained(engine: ZeroEngine, save_dir: str | os.PathLike[str],
                    dtype: torch.dtype, kwargs: dict[str, Any]) -> None:
    """Collective: the Hugging Face directory, the weights in `dtype`, streamed."""
    save_dir = Path(save_dir)
    sources = _sources(engine)
    plan = _plan(engine, save_dir, sources, dtype, kwargs) if engine.global_rank == 0 else None
    plan = _broadcast_json(engine, plan)
    if "error" in plan:
        raise ZeroError(f"save_pretrained({str(save_dir)!r}): {plan['error']}")
    for shard in plan["shards"]:
        tensors = [(name, getattr(torch, kind), tuple(shape))
                   for name, kind, shape in shard["tensors"]]
        writer = (StreamWriter(save_dir / shard["file"], tensors, shard["metadata"])
                  if engine.global_rank == 0 else None)
        for name, kind, _ in tensors:
            value = full_value(engine, sources[name], kind)
            if writer is not None:
                writer.write(name, value.to(kind))
        if writer is not None:
            writer.close()


def save_16bit_model(engine: ZeroEngine, save_dir: str | os.PathLike[str],
                     save_filename: str) -> None:
    """Collective: the weights in the compute dtype into SAVE_DIR/save_filename by rank 0."""
    path = Path(save_dir) / save_filename
    rank0 = engine.global_rank == 0
    if rank0:
        path.parent.mkdir(parents=True, exist_ok=True)
    dtype = engine._dtype
    if save_filename.endswith(".safetensors"):
        names = unique_names(engine)
        declared = [(name, dtype if isinstance(s, int) else s.dtype,
                     tuple(engine._params[s].shape) if isinstance(s, int) else tuple(s.shape))
                    for name, s in names.items()]
        writer = StreamWriter(path, declared, {"format": "pt"}) if rank0 else None
        for name, source in names.items():
            value = full_value(engine, source, dtype)
            if writer is not None:
                writer.write(name, value)
        if writer is not None:
            writer.close()
        return
    state = rank0_state(engine, dtype, _sources(engine))
    if state is not None:
        torch.save(state, path)


def rank0_state(engine: ZeroEngine, dtype: torch.dtype, sources: dict[str, Any],
                everywhere: bool = False) -> dict[str, torch.Tensor] | None:
    """Collective: the named values on the CPU in `dtype` (buffers as they are) on rank 0,
    gathered a tensor at a time, a tied parameter one tensor under each of its names; None on
    the other ranks, which hold none (`everywhere`: every rank gets them)."""
    rank0 = engine.global_rank == 0 or everywhere
    state: dict[str, torch.Tensor] = {}
    read: dict[int, torch.Tensor | None] = {}  # each parameter once, on every rank alike
    for name, source in sources.items():
        if isinstance(source, int) and source in read:
            value = read[source]
        else:
            value = full_value(engine, source, dtype)
            if isinstance(source, int):
                read[source] = value if rank0 else None
        if rank0 and value is not None:
            state[name] = value
    return state if rank0 else None


def sources(engine: ZeroEngine, exclude_frozen: bool = False) -> dict[str, Any]:
    """The module's state-dict names and their sources, without the frozen parameters when
    asked."""
    named = _sources(engine)
    if exclude_frozen:
        frozen = {p.index for p in engine._params if not p.param.requires_grad}
        named = {n: s for n, s in named.items() if not (isinstance(s, int) and s in frozen)}
    return named


def unique_names(engine: ZeroEngine) -> dict[str, Any]:
    """The module's state-dict names with each tied parameter under its first name only (a
    safetensors file holds no alias)."""
    seen: set[int] = set()
    names = {}
    for name, source in _sources(engine).items():
        if isinstance(source, int):
            if source in seen:
                continue
            seen.add(source)
        names[name] = source
    return names
