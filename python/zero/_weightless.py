"""Models built without their weights: parameters on the meta device (built under
torch.device("meta"), accelerate's init_empty_weights, or zero.zero.Init) given to
zero.initialize. zero allocates only its own partitions; the module holds no value of its own.

- rehome: each meta parameter is replaced, in every module that holds it, by a parameter of the
  same shape, dtype and requires_grad on the engine's device over one element (a placeholder,
  until zero's hooks give it a view of zero's memory), so that the model's own references and
  zero's agree.
- materialize_buffers: a buffer on the meta device gets its memory and the value its module's
  initialisation gives it (transformers' _init_weights, which rebuilds rotary caches, or the
  module's reset_parameters); one that no initialisation fills is refused, named.
- initialize: the parameters' values from the module's own initialisation, run one unit (a
  block, or a module with parameters of its own) at a time on the CPU, rank 0's values
  broadcast and written into zero, so that the host holds at most one unit beyond zero's plan.

Owns nothing past the calls: the temporary tensors a unit is initialised in are dropped with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from collections.abc import Iterable, Iterator
from typing import Any, TYPE_CHECKING

import torch

from ._library import ZeroError, call

if TYPE_CHECKING:
    from ._hooks import Param
    from ._units import Unit


def has_meta(model: torch.nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


def device_for(model: torch.nn.Module) -> torch.device | None:
    """The device a model without its weights trains on: its other parameters' where it has
    some, else this rank's GPU where PyTorch has one, else the CPU. None for a model with no
    meta parameter."""
    if not has_meta(model):
        return None
    real = {p.device for p in model.parameters() if not p.is_meta}
    if real:
        return real.pop() if len(real) == 1 else None
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _stand_in(like: torch.Tensor, device: torch.device) -> torch.Tensor:
    """One element of `like`'s dtype on `device`, expanded to its shape."""
    return torch.zeros((1,), dtype=like.dtype, device=device).expand(like.shape)


class Rehomed:
    """What rehome did: {id(old): new} for each meta parameter, and how to undo it (a
    zero.initialize that fails gives the model its meta parameters back, so that a second call
    does not take the placeholders for values)."""

    def __init__(self) -> None:
        self.renamed: dict[int, torch.nn.Parameter] = {}
        self._slots: list[tuple[torch.nn.Module, str, torch.nn.Parameter]] = []
        self._external: list[tuple[torch.nn.Module, list[torch.nn.Parameter]]] = []

    def undo(self) -> None:
        for module, attr, old in reversed(self._slots):
            module._parameters[attr] = old
        for module, listed in self._external:
            module.__dict__["_zero_external_parameters"] = listed
        self._slots, self._external, self.renamed = [], [], {}


def rehome(model: torch.nn.Module, device: torch.device) -> Rehomed:
    """Every meta parameter replaced by a placeholder parameter on `device` wherever the model
    holds it (tied parameters stay one)."""
    done = Rehomed()
    for module in model.modules():
        for attr, param in list(module._parameters.items()):
            if param is None or not param.is_meta:
                continue
            new = done.renamed.get(id(param))
            if new is None:
                new = torch.nn.Parameter(_stand_in(param, device),
                                         requires_grad=param.requires_grad)
                done.renamed[id(param)] = new
            done._slots.append((module, attr, param))
            module._parameters[attr] = new
    for module in model.modules():  # register_external_parameter's lists
        external = module.__dict__.get("_zero_external_parameters")
        if external and done.renamed:
            done._external.append((module, external))
            module.__dict__["_zero_external_parameters"] = [
                done.renamed.get(id(p), p) for p in external]
    return done


def _initialisers(model: torch.nn.Module) -> dict[int, Any]:
    """{id(module): the transformers model whose _init_weights initialises it} for the modules
    of a transformers model (a sub-model, such as a vision tower, has its own)."""
    found: dict[int, Any] = {}

    def walk(module: torch.nn.Module, owner: Any) -> None:
        if callable(getattr(module, "_init_weights", None)) and hasattr(module, "config"):
            owner = module
        if owner is not None:
            found[id(module)] = owner
        for child in module.children():
            walk(child, owner)

    walk(model, None)
    return found


def _post_order(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The module's children (recursively) before it, as transformers' initialisation and
    torch's Module.apply visit them: a block's own initialisation may rescale its children's."""
    for child in module.children():
        yield from _post_order(child)
    yield module


def _initialise(owners: dict[int, Any], module: torch.nn.Module) -> None:
    """`module`'s parameters and buffers set as the model initialises them: transformers'
    _init_weights, else the module's reset_parameters."""
    owner = owners.get(id(module))
    with torch.no_grad():
        if owner is not None:
            owner._init_weights(module)
        elif callable(getattr(module, "reset_parameters", None)):
            module.reset_parameters()


def _unset(tensor: torch.Tensor) -> None:
    """Filled with a value no initialisation leaves, to find what none set."""
    if tensor.is_floating_point():
        tensor.fill_(float("nan"))


def _unfilled(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() and bool(torch.isnan(tensor).any())


@contextlib.contextmanager
def _own_parameters_real(modules: Iterable[torch.nn.Module]) -> Iterator[None]:
    """For the block: the modules' own parameters (placeholders) over CPU memory of their
    shape, filled with NaN, and the placeholders back after it."""
    swapped = []
    try:
        for module in modules:
            for param in module._parameters.values():
                if param is not None:
                    swapped.append((param, param.data))
                    param.data = torch.empty(param.shape, dtype=param.dtype)
                    _unset(param.data)
        yield
    finally:
        for param, placeholder in swapped:
            param.data = placeholder


def materialize_buffers(model: torch.nn.Module, device: torch.device) -> dict[str, str]:
    """Every meta buffer given memory on `device` and its module's initial value. Returns those
    no initialisation filled, {name: their module's class}, for a pretrained directory to hold
    (check_buffers_filled)."""
    unfilled = {}
    owners = _initialisers(model)
    for name, module in model.named_modules():
        meta = [(attr, b) for attr, b in module._buffers.items() if b is not None and b.is_meta]
        if not meta:
            continue
        for attr, buffer in meta:
            module._buffers[attr] = torch.empty(buffer.shape, dtype=buffer.dtype, device=device)
            _unset(module._buffers[attr])
        with _own_parameters_real([module]):
            _initialise(owners, module)
        for attr, _ in meta:
            if _unfilled(module._buffers[attr]):
                unfilled[f"{name}.{attr}" if name else attr] = type(module).__name__
    return unfilled


def check_buffers_filled(unfilled: dict[str, str], loaded: set[str]) -> None:
    """Refuses a meta buffer that neither an initialisation nor the pretrained files set."""
    for name, owner in unfilled.items():
        if name not in loaded:
            raise ZeroError(
                f"zero.initialize: buffer {name} ({owner}) was on the meta device and nothing "
                "sets it (neither the model's _init_weights nor the module's reset_parameters, "
                "nor a pretrained directory); build the model under zero.zero.Init() or "
                "accelerate's init_empty_weights(), which put only the parameters on the meta "
                "device")


def initialize(handle: ctypes.c_void_p, model: torch.nn.Module, units: list[Unit],
               params: list[Param], wanted: Iterable[Param]) -> None:
    """Collective, after zero_init: the `wanted` parameters' values from the module's own
    initialisation, a unit at a time (a parameter in its first unit), rank 0's written into zero
    on every rank."""
    todo = {p.index for p in wanted}
    owners = _initialisers(model)
    for unit in units:
        mine = [i for i in unit.params if i in todo]
        if not mine:
            continue
        todo.difference_update(mine)
        modules = list(_post_order(unit.module)) if _is_block(unit) else [unit.module]
        with _own_parameters_real(modules):
            for module in modules:
                _initialise(owners, module)
            values = []
            for i in mine:
                p = params[i]
                value = p.param.data.to(torch.float32).contiguous()
                if _unfilled(value):
                    raise ZeroError(
                        f"zero.initialize: parameter {p.name} is on the meta device and nothing "
                        f"initialises it ({type(unit.module).__name__} has neither a "
                        "transformers _init_weights nor reset_parameters that sets it); pass "
                        "pretrained= a directory that holds it, or build the model with its "
                        "weights")
                values.append(value.view(-1))
        blob = torch.cat(values) if values else torch.empty(0)
        if blob.numel():
            call("zero_broadcast", handle, ctypes.c_void_p(blob.data_ptr()),
                 blob.numel() * blob.element_size(), 0)
        offset = 0
        for i in mine:
            count = math.prod(params[i].shape)
            part = blob[offset:offset + count]
            offset += count
            call("zero_write_param", handle, i,
                 ctypes.cast(part.data_ptr(), ctypes.POINTER(ctypes.c_float)), count)
    if todo:
        raise ZeroError("zero.initialize: parameters in no unit cannot be initialised: "
                        + ", ".join(params[i].name for i in sorted(todo)))


def _is_block(unit: Unit) -> bool:
    """Whether the unit owns every parameter under its module (a block), not only its own."""
    own = {id(p) for p in unit.module._parameters.values() if p is not None}
    return any(id(p) not in own for p in unit.module.parameters())
