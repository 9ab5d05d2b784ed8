"""zero.moe: the names of DeepSpeed's deepspeed.moe that a data-parallel script touches.

zero has no mixture of experts (no expert parallelism, no expert groups). What a script calls
whether or not it uses experts works here as it does in DeepSpeed without experts
(zero.moe.utils: split_params_into_different_moe_groups_for_optimizer returns the groups as
they are, is_moe_param says False); building an expert layer (zero.moe.layer.MoE) is refused,
and so is a model holding DeepSpeed's MoE layer at zero.initialize.
"""

from __future__ import annotations

from . import layer, utils

__all__ = ["layer", "utils"]
