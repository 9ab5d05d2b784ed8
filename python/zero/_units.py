"""The hook units: which modules zero's pre/post hooks wrap, and which parameters each uses.

A unit is either a block (an instance of one of the block classes, with every parameter under
it: by default the classes a Hugging Face model lists in `_no_split_modules`, as FSDP's
auto-wrap policy reads them) or, outside the blocks, a module with parameters of its own (the
embeddings, the final norm, the head), with just those. Units are listed in module order, which
is the forward order of the models this targets; a parameter used by several units (a tied
embedding and head) lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ._library import ZeroError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection


@dataclass
class Unit:
    index: int
    name: str
    module: torch.nn.Module
    # (owning module, attribute, parameter index) for every parameter the unit uses
    slots: list[tuple[torch.nn.Module, str | None, int]] = field(default_factory=list)

    @property
    def params(self) -> list[int]:
        seen = []
        for _, _, index in self.slots:
            if index not in seen:
                seen.append(index)
        return seen


def _block_predicate(
        model: torch.nn.Module, block_classes: Collection[str | type] | None
) -> tuple[Callable[[torch.nn.Module], bool | tuple[type, ...]], set[str], tuple[type, ...]]:
    if block_classes is None:
        block_classes = list(getattr(model, "_no_split_modules", None) or [])
    block_classes = list(block_classes)  # read three times below: a generator only once
    names = {c for c in block_classes if isinstance(c, str)}
    types = tuple(c for c in block_classes if isinstance(c, type))
    wrong = [c for c in block_classes if not isinstance(c, (str, type))]
    if wrong:
        raise ZeroError(f"zero.initialize: block_classes takes class names or classes, not "
                        f"{wrong[0]!r}")

    def is_block(module: torch.nn.Module) -> bool | tuple[type, ...]:
        return type(module).__name__ in names or (types and isinstance(module, types))

    return is_block, names, types


def register_external_parameter(module: torch.nn.Module, parameter: torch.nn.Parameter) -> None:
    """DeepSpeed's deepspeed.zero.register_external_parameter: `module`'s forward uses
    `parameter`, which belongs to another module (a tied head written F.linear(h,
    self.embed.weight) in the model's forward). Call it before zero.initialize: zero then
    gathers the parameter for `module`'s forward at stage 3 too, and reduces its gradient after
    its last use, as for any parameter used by several modules."""
    if not isinstance(module, torch.nn.Module):
        raise ZeroError("register_external_parameter: the first argument is the module whose "
                        f"forward uses the parameter, not a {type(module).__name__}")
    if not isinstance(parameter, torch.nn.Parameter):
        raise ZeroError("register_external_parameter: the second argument is a "
                        f"torch.nn.Parameter, not a {type(parameter).__name__}")
    external = module.__dict__.setdefault("_zero_external_parameters", [])
    if not any(p is parameter for p in external):
        external.append(parameter)


def _external(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return module.__dict__.get("_zero_external_parameters", [])


def choose_units(model: torch.nn.Module,
                 block_classes: Collection[str | type] | None = None) -> list[Unit]:
    """The units of `model` in module order; each unit's slots name its parameters' owners
    (an external parameter's slot names the module it was registered with, attribute None)."""
    is_block, names, types = _block_predicate(model, block_classes)
    found = []

    def walk(module: torch.nn.Module, prefix: str) -> None:
        if is_block(module):
            found.append((prefix, module, True))
            return
        if any(True for _ in module.parameters(recurse=False)) or _external(module):
            found.append((prefix, module, False))
        for child_name, child in module.named_children():
            walk(child, f"{prefix}.{child_name}" if prefix else child_name)

    walk(model, "")
    if block_classes is not None and (names or types) and not any(b for _, _, b in found):
        wanted = sorted(names) + [t.__name__ for t in types]
        raise ZeroError(f"zero.initialize: no module of the block classes {wanted} is in the "
                        f"model ({type(model).__name__}); name the classes of its transformer "
                        "blocks in block_classes")

    index_of = {}
    for index, (_, param) in enumerate(model.named_parameters()):
        index_of[id(param)] = index
    units = []
    for number, (name, module, recurse) in enumerate(found):
        unit = Unit(number, name or type(module).__name__, module)
        owners = module.named_modules() if recurse else [("", module)]
        for _, owner in owners:
            for attr, param in owner._parameters.items():
                if param is not None:
                    unit.slots.append((owner, attr, index_of[id(param)]))
            for param in _external(owner):
                if id(param) not in index_of:
                    raise ZeroError(f"zero.initialize: a parameter registered as external to "
                                    f"{unit.name} (register_external_parameter) is not a "
                                    f"parameter of the model ({type(model).__name__})")
                unit.slots.append((owner, None, index_of[id(param)]))
        units.append(unit)
    return units
