"""zero.zero: DeepSpeed's deepspeed.zero calls for a module zero trains.

    with zero.zero.GatheredParameters(model.embed.weight, modifier_rank=0):
        if rank == 0:
            model.embed.weight[-1].normal_()      # at stage 3 too: the whole tensor is here
    # every rank now trains the changed value

GatheredParameters(params, modifier_rank=None, fwd_module=None, enabled=True) gives the listed
parameters their full values for the block, at every stage. At stage 3, where a parameter
holds a placeholder outside its modules' forward, it holds its full value (in the compute dtype,
from the fp32 master) inside the block, and the placeholder again after it. With modifier_rank
R, the values rank R holds at the block's end are broadcast and written into zero on every
rank (master and compute copy; the optimizer's moments are kept), at any stage; without it a
change made at stage 3 is dropped with the gathered copy, as in DeepSpeed, and at stages 0-2 a
change to the parameter itself is kept as any in-place change is. Tensors no zero engine trains
are left alone, as DeepSpeed leaves its non-ZeRO parameters. Collective: every rank enters the
block with the same parameters, between steps (not inside a forward or backward). When the
block raises, the placeholders come back and nothing is written.

Inside the block a stage-3 parameter's ds_status is ZeroParamStatus.AVAILABLE, and
NOT_AVAILABLE again after it (DeepSpeed's marks: _hooks.py).

register_external_parameter is zero.register_external_parameter; ZeroParamStatus is DeepSpeed's
enum of ds_status; Init is DeepSpeed's deepspeed.zero.Init: the model built under it has its
parameters on the meta device, and zero.initialize gives zero's partitions their values
(below).

Owns: the placeholders it lifts, for the block; Init, the patches it makes, for its context.
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, TYPE_CHECKING

import torch

from ._hooks import ZeroParamStatus
from ._inplace import owner_of
from ._library import ZeroError, call
from ._units import register_external_parameter

if TYPE_CHECKING:
    from ._hooks import Param
    from ._inplace import InplaceEdits

__all__ = ["GatheredParameters", "Init", "ZeroParamStatus", "register_external_parameter"]


class GatheredParameters:
    """DeepSpeed's deepspeed.zero.GatheredParameters, for parameters zero trains."""

    def __init__(self, params: torch.Tensor | Iterable[torch.Tensor],
                 modifier_rank: int | None = None, fwd_module: Any = None,
                 enabled: bool = True) -> None:
        listed = [params] if isinstance(params, torch.Tensor) else list(params)
        self._listed: list[torch.Tensor] = listed if enabled else []
        self._owned: list[tuple[InplaceEdits, Param]] = []
        if enabled:
            for tensor in listed:
                found = owner_of(tensor)
                if found is not None and all(found[1] is not p for _, p in self._owned):
                    self._owned.append(found)
        engines = {id(edits.engine): edits.engine for edits, _ in self._owned}
        if len(engines) > 1:
            raise ZeroError("GatheredParameters: the parameters belong to several zero engines; "
                            "gather each engine's in a block of its own")
        self._engine: Any = next(iter(engines.values()), None)
        self._modifier_rank: int | None = modifier_rank
        if modifier_rank is not None and self._engine is not None and not (
                0 <= modifier_rank < self._engine.world_size):
            raise ZeroError(f"GatheredParameters(modifier_rank={modifier_rank}): the job has "
                            f"ranks 0 to {self._engine.world_size - 1}")
        self._lifted: list[tuple[Param, torch.Tensor]] = []  # stage 3: (param, its placeholder)

    def __enter__(self) -> GatheredParameters:
        _materialize(self._listed)
        if self._engine is None:
            return self
        self._engine._require_between_passes("GatheredParameters")
        self._engine._edits.take("GatheredParameters")
        if self._engine.zero_optimization_stage() == 3:
            for edits, p in self._owned:  # collective: every rank reads every parameter
                full = edits.read(p).to(device=p.param.device, dtype=p.param.dtype)
                self._lifted.append((p, p.param.data))
                p.param.data = full
                p.param.ds_status = ZeroParamStatus.AVAILABLE
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._engine is None:
            return
        try:
            if kind is None and self._modifier_rank is not None:
                self._write_modified()
        finally:
            for p, placeholder in self._lifted:
                p.param.data = placeholder
                p.param.ds_status = ZeroParamStatus.NOT_AVAILABLE
                self._engine._edits.seen(p)  # a change to the gathered copy went with it
            self._lifted = []

    def _write_modified(self) -> None:
        """Rank modifier_rank's values, broadcast and written into zero on every rank."""
        for edits, p in self._owned:
            value = p.param.detach().to(device="cpu", dtype=torch.float32).contiguous()
            call("zero_broadcast", self._engine._handle, ctypes.c_void_p(value.data_ptr()),
                 value.numel() * value.element_size(), self._modifier_rank)
            edits.write(p, value)


# The modules (weakly) and attribute names that hold each parameter Init put on the meta device,
# for GatheredParameters to give them real ones: by id, with a weak reference to the parameter
# (a tensor is no dictionary key: its == compares values).
_META_OWNERS: dict[int, tuple[Any, list[tuple[Any, str]]]] = {}


def _meta_owners(param: torch.nn.Parameter) -> list[tuple[Any, str]] | None:
    entry = _META_OWNERS.get(id(param))
    return entry[1] if entry is not None and entry[0]() is param else None


def _record_meta(param: torch.nn.Parameter, module: torch.nn.Module, name: str) -> None:
    owners = _meta_owners(param)
    if owners is None:
        key = id(param)
        owners = []
        _META_OWNERS[key] = (weakref.ref(param, lambda _, k=key: _META_OWNERS.pop(k, None)),
                             owners)
    owners.append((weakref.ref(module), name))


def _materialize(tensors: list[torch.Tensor]) -> None:
    """Parameters Init put on the meta device, gathered before zero.initialize (transformers'
    own ZeRO-3 route, which builds the model under deepspeed.zero.Init and then loads and
    initialises each module inside GatheredParameters): each becomes a real, zeroed parameter
    in every module that holds it, keeping its attributes, so that what is written into it
    inside the block stays. That route so builds the model whole; zero.initialize then takes
    rank 0's values, as for any model built whole."""
    for tensor in tensors:
        owners = _meta_owners(tensor) if isinstance(tensor, torch.nn.Parameter) else None
        if not owners or not tensor.is_meta:
            continue
        real = torch.nn.Parameter(torch.zeros(tensor.shape, dtype=tensor.dtype),
                                  requires_grad=tensor.requires_grad)
        real.__dict__.update(tensor.__dict__)
        for module_ref, name in owners:
            module = module_ref()
            if module is not None and module._parameters.get(name) is tensor:
                module._parameters[name] = real
        _META_OWNERS.pop(id(tensor), None)


class Init:
    """DeepSpeed's deepspeed.zero.Init: the context a model is built under without its weights.

    Inside it every parameter a module registers is put on the meta device as it is registered
    (buffers stay where they are made, as with accelerate's init_empty_weights()), so building
    a 70B model costs no memory; zero.initialize then allocates only zero's partitions and sets
    their values from `pretrained=` or from the model's own initialisation, a unit at a time.
    transformers' from_pretrained(DIR) inside it builds the model so from DIR's config and
    remembers DIR: zero.initialize reads its safetensors shards, each rank only what it keeps.

    It takes DeepSpeed's arguments (config_dict_or_path, config, remote_device, pin_memory,
    enabled, ...); dtype= gives the floating-point parameters that dtype, as DeepSpeed's does.
    `module=`, which partitions a module built already, is refused: give that module to
    zero.initialize. Contexts nest (the innermost one's dtype holds); the outermost one's exit
    ends the patching."""

    _dtypes: list[torch.dtype | None] = []  # the open contexts' dtypes, innermost last
    _restore: list[tuple[Any, str, Any]] = []

    def __init__(self, module: torch.nn.Module | None = None, *args: Any,
                 enabled: bool = True, dtype: torch.dtype | None = None,
                 **kwargs: Any) -> None:
        if module is not None and enabled:
            raise ZeroError("zero.zero.Init(module=...): zero shards a module built already "
                            "when it is given to zero.initialize; pass it there")
        self.enabled: bool = enabled
        self.dtype: torch.dtype | None = dtype
        self._entered: bool = False

    def __enter__(self) -> Init:
        if not self.enabled:
            return self
        self._entered = True
        Init._dtypes.append(self.dtype)
        if len(Init._dtypes) == 1:
            Init._restore = _weightless_construction()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if not self._entered:
            return None
        self._entered = False
        Init._dtypes.pop()
        if not Init._dtypes:
            for owner, name, original in reversed(Init._restore):
                setattr(owner, name, original)
            Init._restore = []
        return None


def _weightless_construction() -> list[tuple[Any, str, Any]]:
    """Patches torch.nn.Module.register_parameter (parameters onto the meta device, in the
    innermost Init's dtype where it gives one) and, where transformers is imported,
    PreTrainedModel.from_pretrained (the model built from the directory's config, the directory
    remembered); returns what to put back."""
    restore: list[tuple[Any, str, Any]] = []
    register = torch.nn.Module.register_parameter

    def register_parameter(module: torch.nn.Module, name: str,
                           param: torch.nn.Parameter | None) -> None:
        register(module, name, param)
        kept = module._parameters.get(name)
        if kept is None:
            return
        if kept.is_meta:  # a tied weight registered again
            if _meta_owners(kept) is not None:
                _record_meta(kept, module, name)
            return
        data = kept.data.to("meta")
        dtype = Init._dtypes[-1] if Init._dtypes else None
        if dtype is not None and data.is_floating_point():
            data = data.to(dtype)
        if type(kept) is torch.nn.Parameter:
            made = torch.nn.Parameter(data, requires_grad=kept.requires_grad)
        else:  # a Parameter subclass keeps its attributes
            made = type(kept)(data, **kept.__dict__)
        module._parameters[name] = made
        _record_meta(made, module, name)

    restore.append((torch.nn.Module, "register_parameter", register))
    torch.nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        pretrained_model = transformers.PreTrainedModel
        original = pretrained_model.__dict__["from_pretrained"]
        restore.append((pretrained_model, "from_pretrained", original))
        pretrained_model.from_pretrained = classmethod(_from_pretrained_weightless)
    return restore


# from_pretrained's arguments the weightless build passes to the model's constructor
_CONSTRUCTOR_KEYS = ("attn_implementation",)
# and those it has no use for: where the weights go (zero decides), and where a download would
# come from (the directory is local)
_UNUSED_KEYS = ("low_cpu_mem_usage", "device_map", "_fast_init", "use_safetensors",
                "local_files_only", "_from_auto", "_from_pipeline", "revision", "cache_dir",
                "trust_remote_code", "adapter_kwargs", "token", "force_download", "proxies",
                "code_revision", "_commit_hash")


def _from_pretrained_weightless(cls: Any, pretrained_model_name_or_path: Any, *model_args: Any,
                                **kwargs: Any) -> Any:
    """transformers' from_pretrained inside zero.zero.Init: the model built from the local
    directory's config with its parameters on the meta device, the directory remembered for
    zero.initialize (which reads the weights from it, each rank its own part)."""
    from transformers import AutoConfig

    from ._pretrained import directory_tensors, dtype_of_files

    directory = Path(str(pretrained_model_name_or_path))
    if not directory.is_dir():
        raise ZeroError(f"{cls.__name__}.from_pretrained({str(directory)!r}) inside "
                        "zero.zero.Init: zero reads the weights of a local directory, and this "
                        "is none; download it first (hf download NAME --local-dir DIR) and pass "
                        "DIR")
    if model_args:
        raise ZeroError(f"{cls.__name__}.from_pretrained inside zero.zero.Init: positional "
                        "model arguments are not taken; pass a config= or keyword arguments")
    dtype = kwargs.pop("dtype", None)
    torch_dtype = kwargs.pop("torch_dtype", None)
    dtype = dtype if dtype is not None else torch_dtype
    constructor = {k: kwargs.pop(k) for k in _CONSTRUCTOR_KEYS if k in kwargs}
    for key in _UNUSED_KEYS:
        kwargs.pop(key, None)
    config = kwargs.pop("config", None)
    if config is None:
        config = AutoConfig.from_pretrained(directory, **kwargs)
    elif kwargs:
        raise ZeroError(f"{cls.__name__}.from_pretrained inside zero.zero.Init: "
                        f"{sorted(kwargs)} beside config=: set them on the config")
    if dtype is None or dtype == "auto":
        dtype = getattr(config, "dtype", None) or dtype_of_files(directory_tensors(directory))
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model = cls._from_config(config, dtype=dtype, **constructor)
    model.__dict__["_zero_pretrained"] = str(directory)
    return model
