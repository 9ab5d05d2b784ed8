"""What a trainable parameter's .grad is after engine.backward: a stand-in that refuses to be
read, saying where the gradient is.

zero reduces each gradient inside the engine (averaged over the ranks, partitioned at stages
1-3, scaled for fp16) and clips it at the step with the config's gradient_clipping. Left as
None, .grad made a script's own torch.nn.utils.clip_grad_norm_(model.parameters()) return 0.0
and clip nothing, and a hand-written gradient norm or histogram read zeros: wrong numbers
without a word. The stand-in has the parameter's shape, dtype and device over one element
(stride 0), so `p.grad is not None` and its metadata work and model.zero_grad() in either mode
does; any operation on its values raises a ZeroError that names the parameter and what to do
instead. engine.backward sets .grad back to None before the next backward.

Owns nothing: a tensor subclass and the function that builds one.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

import torch

from ._library import ZeroError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

# What a stand-in answers: metadata, and model.zero_grad(set_to_none=False)'s calls (no-ops:
# zero clears its own gradients after each optimizer step).
_METADATA = {"size", "dim", "numel", "stride", "element_size", "is_contiguous", "data_ptr",
             "storage_offset", "get_device", "__hash__", "__eq__"}
_NO_OPS = {"zero_", "detach_", "requires_grad_"}


class HeldGradient(torch.Tensor):
    """A parameter's .grad while zero holds the gradient (see the module's docstring)."""

    @staticmethod
    def make(name: str, like: torch.Tensor) -> HeldGradient:
        """A stand-in for the gradient of parameter `name`, shaped like tensor `like`."""
        one = torch.zeros((1,), dtype=like.dtype, device=like.device).expand(like.shape)
        held = torch.Tensor._make_subclass(HeldGradient, one, False)
        held._zero_name = name
        return held

    def __repr__(self, *args: Any,  # noqa: D105: printing a .grad must not raise
                 **kwargs: Any) -> str:
        return (f"<zero: the gradient of {self._zero_name} is held by zero (engine.backward "
                f"reduced it); shape {tuple(self.shape)}>")

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Iterable[type],
                           args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if name == "__get__" or name in _METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))
        if name in _NO_OPS:
            return args[0]
        held = _first_held(args)
        which = held._zero_name if held is not None else "a parameter's"
        raise ZeroError(
            f"{which}.grad read after engine.backward ({name or func}): zero holds "
            "the gradients (averaged over the ranks, partitioned at stages 1-3), not .grad. "
            "Clip with the config's gradient_clipping (DeepSpeed's way; it is the HF Trainer's "
            "max_grad_norm), not torch.nn.utils.clip_grad_norm_, and read the norm with "
            "engine.get_global_grad_norm() after engine.step()")


def _first_held(values: Iterable[Any]) -> HeldGradient | None:
    for value in values:
        if isinstance(value, HeldGradient):
            return value
        if isinstance(value, (list, tuple)):
            found = _first_held(value)
            if found is not None:
                return found
    return None
