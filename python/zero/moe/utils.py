"""zero.moe.utils: DeepSpeed's deepspeed.moe.utils functions, for models without experts.

zero trains no expert (MoE) parameters, so the parameter groups a script builds for its
optimizer stay as they are: split_params_into_different_moe_groups_for_optimizer returns them
(as a list), as DeepSpeed does for a model without experts. A parameter that an expert layer
made (DeepSpeed marks them with `allreduce = False`) is refused where a group holds one, and
has_moe_layers finds DeepSpeed's MoE layer in a model by its class, without importing
DeepSpeed, for zero.initialize to refuse.
"""

from __future__ import annotations

from typing import Any

import torch

from .._library import ZeroError

__all__ = ["is_moe_param", "has_moe_layers", "is_moe_param_group",
           "split_params_into_different_moe_groups_for_optimizer"]

# Where DeepSpeed defines its expert layer, and zero its refused stand-in.
_MOE_CLASSES = (("deepspeed.moe.layer", "MoE"), ("zero.moe.layer", "MoE"))


def is_moe_param(param: torch.Tensor) -> bool:
    """Whether an expert layer made the parameter (DeepSpeed's mark: `allreduce` False). No
    parameter zero trains is one."""
    return getattr(param, "allreduce", True) is False


def is_moe_param_group(param_group: dict[str, Any]) -> bool:
    """Whether a parameter group is an expert group (its 'moe' key), as DeepSpeed marks them."""
    return bool(param_group.get("moe", False))


def has_moe_layers(model: torch.nn.Module) -> tuple[bool, int]:
    """(whether the model holds an expert layer, its number of experts), as DeepSpeed's: a
    module of DeepSpeed's class deepspeed.moe.layer.MoE (or a subclass), found by name."""
    for module in model.modules():
        for cls in type(module).__mro__:
            if (cls.__module__, cls.__name__) in _MOE_CLASSES:
                return True, int(getattr(module, "num_experts", 0))
    return False, 0


def split_params_into_different_moe_groups_for_optimizer(
        param_groups: dict[str, Any] | tuple[dict[str, Any], ...] | list[dict[str, Any]],
        max_group_size: int | float | None = 178956971) -> list[dict[str, Any]]:
    """The parameter groups, as a list (one dict becomes a list of it), each group's 'params' a
    list: DeepSpeed's result when no parameter belongs to an expert, which is always so on zero.
    The dicts are the caller's own, as in DeepSpeed. max_group_size only sizes expert groups."""
    if isinstance(param_groups, dict):
        groups = [param_groups]
    elif isinstance(param_groups, (list, tuple)):
        groups = list(param_groups)
    else:
        raise ZeroError("split_params_into_different_moe_groups_for_optimizer: param_groups is a "
                        f"{type(param_groups).__name__}; pass a parameter group (a dict with "
                        "'params') or a list or tuple of them")
    for number, group in enumerate(groups):
        if not isinstance(group, dict) or "params" not in group:
            raise ZeroError("split_params_into_different_moe_groups_for_optimizer: group "
                            f"{number} is not a parameter group (a dict with 'params')")
        params = group["params"]
        group["params"] = [params] if isinstance(params, torch.Tensor) else list(params)
        for param in group["params"]:
            if is_moe_param(param):
                raise ZeroError("split_params_into_different_moe_groups_for_optimizer: group "
                                f"{number} holds an expert (MoE) parameter of shape "
                                f"{tuple(param.shape)}; zero has no mixture of experts")
    return groups
