"""UnitHooks: zero's module hooks driven by PyTorch's forward and autograd, and the module's
parameters as views of zero's memory.

After zero_init every parameter is a view of zero's compute copy (stages 0-2: for good; stage
3: only while a unit that uses it has a hook open, and otherwise a one-NaN placeholder of its
shape, dtype and device), and a trainable parameter's `.grad` is a view of zero's gradient
buffer while its units' backward runs, so that autograd adds into zero's memory directly.

The hooks, per unit (see _units.py):
  forward pre/post hook        -> zero_pre_forward / zero_post_forward
  the first gradient reaching
  the unit's outputs           -> zero_pre_backward (an identity autograd function on them)
  the last of its trainable
  parameters' gradients added  -> zero_post_backward (post-accumulate-grad hooks: a module's
                                  backward ends before its parameters' gradients are added)
  the end of the backward      -> zero_post_backward of every unit still open (parameters
                                  that got no gradient this time)
At stage 3 the tensors autograd saves that are views of a gathered parameter are saved as
(parameter, shape, strides, offset) and rebuilt from the parameter's memory of the moment when
backward needs them, since the memory they were made from is released after forward.
A stage-3 parameter carries DeepSpeed's marks, which scripts read to find what to gather
(DeepSpeed-Chat's saving): `ds_id` (its index), `ds_shape`, `ds_numel`, and `ds_status`,
ZeroParamStatus.AVAILABLE while its values are here and NOT_AVAILABLE over its placeholder.

Owns: the parameters' views and gradient views, the open hooks, the pass's phase and the
recorded unit order. Calls the C API on the engine handle it is given; ZeroEngine drives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import warnings
from typing import Any, TYPE_CHECKING

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _tensors
from ._copies import ModuleCopies
from ._held_gradients import HeldGradient
from ._library import ZeroError, call

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from torch.utils.hooks import RemovableHandle

    from ._units import Unit


class ZeroParamStatus(enum.Enum):
    """DeepSpeed's deepspeed.runtime.zero.partition_parameters.ZeroParamStatus: a stage-3
    parameter's `ds_status` (INFLIGHT: never here, zero's gathers finish before the hook
    returns)."""

    AVAILABLE = 1
    NOT_AVAILABLE = 2
    INFLIGHT = 3


# The marks a stage-3 parameter carries while an engine trains it, as DeepSpeed's do.
_DS_MARKS = ("ds_id", "ds_shape", "ds_numel", "ds_status")


class Param:
    """One registered parameter and what the front end keeps of it."""

    __slots__ = ("index", "name", "param", "shape", "trainable", "units", "holders", "view",
                 "grad_view", "expected_ptr")

    def __init__(self, index: int, name: str, param: torch.nn.Parameter,
                 trainable: bool) -> None:
        self.index: int = index
        self.name: str = name
        self.param: torch.nn.Parameter = param
        self.shape: tuple[int, ...] = tuple(param.shape)
        self.trainable: bool = trainable
        self.units: list[int] = []
        self.holders: int = 0  # units with a hook open that use it (stages 0-2: +1 for good)
        self.view: torch.Tensor | None = None  # the tensor over zero's memory while held
        # the gradient buffer while a backward unit holds it
        self.grad_view: torch.Tensor | None = None
        self.expected_ptr: int | None = None  # what param.data points at between calls


class _PreBackward(torch.autograd.Function):
    """Identity on a unit's output; its backward opens the unit's backward in zero."""

    @staticmethod
    def forward(ctx: Any, hooks: UnitHooks, unit: int, tensor: torch.Tensor) -> torch.Tensor:
        ctx.hooks = hooks
        ctx.unit = unit
        return tensor.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, torch.Tensor]:
        ctx.hooks.open_backward(ctx.unit)
        return None, None, grad


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`value` with fn applied to every tensor in it (tuples, lists, dicts, ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_map_tensors(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        for key in list(value.keys()):
            value[key] = _map_tensors(value[key], fn)
        return value
    return value


class _Saved:
    """A saved tensor that is a view of a stage-3 parameter's gathered memory."""

    __slots__ = ("index", "size", "stride", "offset")

    def __init__(self, index: int, tensor: torch.Tensor) -> None:
        self.index: int = index
        self.size: torch.Size = tensor.size()
        self.stride: tuple[int, ...] = tensor.stride()
        self.offset: int = tensor.storage_offset()


class _PlaceholderWatch(TorchDispatchMode):
    """Stage 3: the first training pass (its forward, and the loss computed from its outputs
    until engine.backward) and the first evaluation pass run under this mode, which refuses any
    operation that reads a parameter while it holds its placeholder: a parameter used outside
    the forward of the modules zero gathers it for. View and metadata operations pass."""

    _PASS = {"aten::detach", "aten::alias", "aten::lift_fresh", "aten::_to_copy"}

    def __init__(self, hooks: UnitHooks) -> None:
        super().__init__()
        self._hooks: UnitHooks = hooks

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Sequence[type],
                           args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if not getattr(func, "is_view", False) and func.name() not in self._PASS:
            for value in list(args) + list(kwargs.values()):
                for tensor in value if isinstance(value, (list, tuple)) else (value,):
                    if isinstance(tensor, torch.Tensor):
                        self._hooks.check_not_placeholder(tensor, func.name())
        return func(*args, **kwargs)


class UnitHooks:
    def __init__(self, handle: ctypes.c_void_p, model: torch.nn.Module, units: list[Unit],
                 params: list[Param], stage: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        self._handle: ctypes.c_void_p = handle
        self.units: list[Unit] = units
        self.params: list[Param] = params
        self._stage: int = stage
        self._device: torch.device = device
        self._dtype: torch.dtype = dtype
        self.training: bool = True
        self._auto_eval: bool = False  # a no-grad pass in train mode runs as an evaluation pass
        self._in_backward: bool = False
        self.backward_done: bool = False
        self._forward_open: int = 0
        self._backward_open: dict[int, bool] = {}  # unit index -> True, in opening order
        # unit index -> trainable params still to get a gradient
        self._pending: dict[int, set[int]] = {}
        # the units' pre-forward order of the first training pass
        self._order: list[int] | None = None
        self._pass: list[int] = []
        self._gathered: dict[int, int] = {}  # stage 3: storage address -> param index, while held
        # stage 3: placeholder storage address -> param index
        self._placeholders: dict[int, int] = {}
        self._open_forward: list[int] = []  # the units whose forward is running, innermost last
        # the _PlaceholderWatch entered, while a watched pass runs
        self._watch: _PlaceholderWatch | None = None
        self._watch_kind: str | None = None
        self._in_forward: bool = False  # inside engine.forward
        self._said_missing: set[str] = set()  # parameters warned of as getting no gradient
        self._watched: set[str] = set()  # "train", "eval": the first passes watched
        self._handles: list[RemovableHandle] = []
        self._attach()
        self.copies: ModuleCopies = ModuleCopies(model, stage, self._handles,
                                                 self.is_placeholder)

    # ---- what ZeroEngine calls ----

    def saved_tensors(self) -> contextlib.AbstractContextManager[Any]:
        """The context forward and backward run in: at stage 3, the saved-view hooks."""
        if self._stage == 3:
            return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        return contextlib.nullcontext()

    def begin_forward(self) -> None:
        """Before the module's forward: at stage 3, the first training and the first evaluation
        pass run under the placeholder watch (a training pass's until engine.backward)."""
        self._end_watch()  # one left by a pass that failed after its forward
        self._in_forward = True
        kind = "train" if torch.is_grad_enabled() and self.training else "eval"
        if self._stage != 3 or kind in self._watched:
            return
        self._watch = _PlaceholderWatch(self)
        self._watch.__enter__()
        self._watched.add(kind)
        self._watch_kind = kind

    def end_forward(self, failed: bool = False) -> None:
        """After the module's forward: an evaluation pass's watch ends; a training pass's ends
        when its backward starts (the loss is computed from the outputs in between)."""
        self._in_forward = False
        if self._watch is not None and (failed or self._watch_kind == "eval"):
            self._end_watch()

    def _end_watch(self) -> None:
        if self._watch is not None:
            watch, self._watch = self._watch, None
            watch.__exit__(None, None, None)

    def forward_failed(self) -> str | None:
        """The module's forward raised: why the engine cannot go on, or None when it can (no
        unit's hooks are left open, and below stage 3 the pass's recorded order is dropped; at
        stage 3 the engine has begun tracing the pass's gathers)."""
        if self._open_forward:
            names = [self.units[u].name for u in self._open_forward]
            return (f"inside module {names[-1]}, leaving zero's hooks of {', '.join(names)} "
                    "open in the middle of a pass")
        if self._pass and self._stage == 3:
            return ("after the forward of module(s) " +
                    ", ".join(self.units[u].name for u in self._pass[-3:]) +
                    " at ZeRO stage 3, where the engine traces each pass's gathers")
        self._pass = []
        return None

    def is_placeholder(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor` is a parameter's stage-3 placeholder."""
        try:
            return tensor.untyped_storage().data_ptr() in self._placeholders
        except (RuntimeError, NotImplementedError):
            return False

    def check_not_placeholder(self, tensor: torch.Tensor, what: str) -> None:
        """Refuses `tensor` when it is a parameter's stage-3 placeholder (its values are not
        here): the operation `what` reads it outside its modules' forward."""
        try:
            index = self._placeholders.get(tensor.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):
            return
        if index is None:
            return
        p = self.params[index]
        owners = ", ".join(self.units[u].name for u in p.units)
        if self._open_forward:
            user = f"module {self.units[self._open_forward[-1]].name}"
        elif self._in_forward:
            user = "the model's forward, outside the modules zero made units of"
        else:
            user = "code outside every module's forward (after engine(...) returned: a loss term?)"
        raise ZeroError(f"parameter {p.name} is used by {user} ({what}), outside the forward "
                        f"of the modules zero gathers it for ({owners}): at ZeRO stage 3 it "
                        "holds a placeholder there, not its values, and the step would turn "
                        "the weights to NaN. Register the module that uses it before "
                        f"zero.initialize: zero.register_external_parameter(module, "
                        f"model.{p.name}) (DeepSpeed: deepspeed.zero."
                        "register_external_parameter); compute a loss term on a weight inside "
                        "the model's forward, or use ZeRO stage 0-2")

    def run_backward(self, scaled_loss: torch.Tensor, retain_graph: bool) -> None:
        """scaled_loss.backward(), with every unit's backward hooks opened and closed."""
        self._end_watch()
        if not self.training:
            raise ZeroError("engine.backward in evaluation mode: call engine.train() first")
        if self.backward_done:
            raise ZeroError("engine.backward called twice for one micro-batch: call "
                            "engine.step() after each backward (it steps the optimizer only at "
                            "the accumulation boundary)")
        if self._forward_open:
            raise ZeroError("engine.backward while a module's forward has not returned")
        self._finish_pass_order()
        for p in self.params:  # the last backward's stand-ins (_held_gradients.py) go
            if isinstance(p.param.grad, HeldGradient):
                p.param.grad = None
        self._in_backward = True
        self._pending = {u.index: {i for i in u.params if self.params[i].trainable}
                         for u in self.units}
        try:
            with self.saved_tensors():
                scaled_loss.backward(retain_graph=retain_graph)
            for unit in reversed(list(self._backward_open)):
                self._close_backward(unit)
        finally:
            self._in_backward = False
        self.backward_done = True
        for p in self.params:
            if p.trainable and p.param.grad is None:
                p.param.grad = HeldGradient.make(p.name, p.param)
        self._say_missing_gradients()

    def _say_missing_gradients(self) -> None:
        """A trainable parameter that got no gradient in a backward (a block skipped this step)
        is stepped with a zero gradient, as DeepSpeed does; torch.optim.AdamW would skip it.
        Said once per parameter."""
        missing = sorted({self.params[i].name for pending in self._pending.values()
                          for i in pending} - self._said_missing)
        if not missing:
            return
        self._said_missing.update(missing)
        warnings.warn(f"zero: {len(missing)} trainable parameter(s) got no gradient in this "
                      f"backward (first: {missing[0]}): zero steps them with a zero gradient, as "
                      "DeepSpeed does, so weight decay and the moments' decay still move them, "
                      "where torch.optim.AdamW would leave them untouched; freeze a parameter "
                      "that never trains (requires_grad_(False)) before zero.initialize",
                      stacklevel=4)

    def check_step(self) -> None:
        self._end_watch()
        if self._forward_open or self._backward_open:
            raise ZeroError("engine.step() with a module's hooks open: a forward without its "
                            "backward through engine.backward(loss)")
        if self._pass and not self.backward_done:
            raise ZeroError("engine.step() after a training forward without "
                            "engine.backward(loss): every training forward needs its backward "
                            "before the step (run forwards that need no backward under "
                            "torch.no_grad() or after engine.eval())")

    def stepped(self) -> None:
        self.backward_done = False

    def between_passes(self, what: str) -> None:
        self._end_watch()
        # A training forward's recorded pass lasts until its backward.
        if self._forward_open or self._backward_open or self.backward_done or self._pass:
            raise ZeroError(f"{what} in the middle of a micro-step: call it after "
                            "engine.step()")

    def set_train(self, mode: bool) -> None:
        if mode == self.training and not self._auto_eval:
            return
        self._auto_eval = False
        call("zero_set_train", self._handle, int(mode))
        self.training = mode

    def detach(self) -> None:
        """Removes the hooks and leaves every parameter an empty tensor (zero's memory is about
        to go)."""
        self._end_watch()
        self.copies.remove()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._gathered = {}
        self._placeholders = {}
        for p in self.params:
            p.grad_view = None
            p.view = None
            p.param.grad = None
            p.param.data = torch.empty(0, dtype=self._dtype, device=self._device)
            for mark in _DS_MARKS:
                p.param.__dict__.pop(mark, None)

    # ---- the hooks ----

    def _attach(self) -> None:
        for unit in self.units:
            self._handles.append(unit.module.register_forward_pre_hook(
                lambda module, args, u=unit.index: self._pre_forward(u)))
            self._handles.append(unit.module.register_forward_hook(
                lambda module, args, output, u=unit.index: self._post_forward(u, output)))
        for p in self.params:
            if p.trainable:
                self._handles.append(p.param.register_post_accumulate_grad_hook(
                    lambda param, i=p.index: self._accumulated(i)))
        for p in self.params:
            if self._stage == 3:
                p.param.ds_id = p.index
                p.param.ds_shape = torch.Size(p.shape)
                p.param.ds_numel = p.param.ds_shape.numel()
                self._place_placeholder(p)
            else:
                self._hold(p)

    def _stream(self) -> ctypes.c_void_p | None:
        if self._device.type == "cuda":
            return ctypes.c_void_p(torch.cuda.current_stream(self._device).cuda_stream)
        return None

    def _pre_forward(self, unit: int) -> None:
        if self._in_backward:
            # Recomputation (activation checkpointing) inside backward: the unit's parameters
            # are those of its backward, opened here if the checkpoint's backward reached it
            # first.
            if unit not in self._backward_open:
                self.open_backward(unit)
            return
        if self.backward_done:
            raise ZeroError(f"module {self.units[unit].name}: forward after engine.backward "
                            "without engine.step(): call engine.step() after each backward")
        self._check_params(unit)
        grad_pass = torch.is_grad_enabled() and self.training
        if self._forward_open == 0 and not self._pass:
            if self.training and not torch.is_grad_enabled() and not self._auto_eval:
                call("zero_set_train", self._handle, 0)
                self._auto_eval = True
            elif grad_pass and self._auto_eval:
                call("zero_set_train", self._handle, 1)
                self._auto_eval = False
        if grad_pass:
            self._check_order(unit)
        call("zero_pre_forward", self._handle, unit, self._stream())
        self._forward_open += 1
        self._open_forward.append(unit)
        for i in self.units[unit].params:
            self._hold(self.params[i])

    def _post_forward(self, unit: int, output: Any) -> Any:
        if self._in_backward:
            return output
        call("zero_post_forward", self._handle, unit, self._stream())
        self._forward_open -= 1
        if self._open_forward and self._open_forward[-1] == unit:
            self._open_forward.pop()
        for i in self.units[unit].params:
            self._release(self.params[i])
        if torch.is_grad_enabled() and self.training:
            output = _map_tensors(output, lambda t: _PreBackward.apply(self, unit, t)
                                  if t.requires_grad else t)
        return output

    def open_backward(self, unit: int) -> None:
        if unit in self._backward_open:
            return
        if not self._in_backward:
            raise ZeroError(f"module {self.units[unit].name}: backward outside "
                            "engine.backward(loss): call engine.backward(loss), not "
                            "loss.backward(), so that zero scales the loss and reduces the "
                            "gradients")
        call("zero_pre_backward", self._handle, unit, self._stream())
        self._backward_open[unit] = True
        for i in self.units[unit].params:
            p = self.params[i]
            self._hold(p)
            if p.trainable and p.grad_view is None:
                address = ctypes.c_void_p()
                call("zero_grad_buffer", self._handle, i, ctypes.byref(address))
                p.grad_view = _tensors.view(address.value, p.shape, self._dtype, self._device)
                p.param.grad = p.grad_view

    def _accumulated(self, index: int) -> None:
        p = self.params[index]
        if not self._in_backward:
            raise ZeroError(f"parameter {p.name} got a gradient outside engine.backward(loss): "
                            "call engine.backward(loss), not loss.backward()")
        if p.grad_view is None or p.param.grad is None or \
                p.param.grad.data_ptr() != p.grad_view.data_ptr():
            users = ", ".join(self.units[u].name for u in p.units)
            raise ZeroError(f"parameter {p.name} got its gradient outside the backward of the "
                            f"modules zero gave it to ({users}): a module outside them uses it. "
                            "Name the class of the module that uses it in block_classes, or "
                            "use it only inside its own module")
        for u in p.units:
            pending = self._pending.get(u)
            if pending is not None:
                pending.discard(index)
                if not pending and u in self._backward_open:
                    self._close_backward(u)

    def _close_backward(self, unit: int) -> None:
        del self._backward_open[unit]
        call("zero_post_backward", self._handle, unit, self._stream())
        for i in self.units[unit].params:
            p = self.params[i]
            if p.grad_view is not None and not any(u in self._backward_open for u in p.units):
                p.param.grad = None
                p.grad_view = None
            self._release(p)

    # ---- parameters as views ----

    def _hold(self, p: Param) -> None:
        p.holders += 1
        if p.view is None:
            self._placeholders.pop(p.expected_ptr, None)
            address = ctypes.c_void_p()
            call("zero_param_data", self._handle, p.index, ctypes.byref(address))
            p.view = _tensors.view(address.value, p.shape, self._dtype, self._device)
            p.param.data = p.view
            p.expected_ptr = p.view.data_ptr()
            if self._stage == 3:
                p.param.ds_status = ZeroParamStatus.AVAILABLE
                if p.view.numel():
                    self._gathered[p.view.untyped_storage().data_ptr()] = p.index

    def _release(self, p: Param) -> None:
        p.holders -= 1
        if p.holders == 0 and self._stage == 3:
            if p.view is not None and p.view.numel():
                self._gathered.pop(p.view.untyped_storage().data_ptr(), None)
            p.view = None
            self._place_placeholder(p)

    def _place_placeholder(self, p: Param) -> None:
        placeholder = _tensors.placeholder(p.shape, self._dtype, self._device)
        p.param.data = placeholder
        p.param.ds_status = ZeroParamStatus.NOT_AVAILABLE
        p.expected_ptr = placeholder.data_ptr()
        self._placeholders[placeholder.untyped_storage().data_ptr()] = p.index

    # stage 3: saved views of gathered parameters, rebuilt from the memory of the moment
    def _pack(self, tensor: torch.Tensor) -> torch.Tensor | _Saved:
        self.check_not_placeholder(tensor, "saved for backward")
        try:
            index = self._gathered.get(tensor.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):
            return tensor
        return tensor if index is None else _Saved(index, tensor)

    def _unpack(self, saved: torch.Tensor | _Saved) -> torch.Tensor:
        if not isinstance(saved, _Saved):
            return saved
        p = self.params[saved.index]
        if p.view is None:
            raise ZeroError(f"parameter {p.name} is needed by backward outside the backward of "
                            "the modules that use it; name the module that uses it in "
                            "block_classes")
        return p.view.as_strided(saved.size, saved.stride, saved.offset)

    # ---- checks ----

    def _check_params(self, unit: int) -> None:
        for owner, attr, i in self.units[unit].slots:
            p = self.params[i]
            if attr is not None and owner._parameters.get(attr) is not p.param:
                raise ZeroError(f"parameter {p.name} was replaced after zero.initialize (module "
                                f"{self.units[unit].name}, attribute {attr!r}): zero owns the "
                                "model's parameters; load new values with "
                                "engine.load_checkpoint, or build the model before "
                                "zero.initialize")
            if p.param.data_ptr() != p.expected_ptr or tuple(p.param.shape) != p.shape:
                raise ZeroError(f"parameter {p.name} was given other memory or another shape "
                                f"after zero.initialize (now {tuple(p.param.shape)}, registered "
                                f"{p.shape}): zero owns the model's parameters; change the "
                                "model before zero.initialize")

    def _check_order(self, unit: int) -> None:
        self._pass.append(unit)
        if self._order is None or self._stage != 3:
            return
        position = len(self._pass) - 1
        if position >= len(self._order) or self._order[position] != unit:
            expected = (self.units[self._order[position]].name if position < len(self._order)
                        else "the end of the pass")
            raise ZeroError(f"module {self.units[unit].name} called out of the recorded order: "
                            f"call {position + 1} of this training pass was "
                            f"{expected} in the first one. At ZeRO stage 3 zero gathers and "
                            "prefetches along the first pass's order, so a model must call its "
                            "modules in the same order in every training pass: a block that "
                            "runs only on some steps (conditional compute) must run on every "
                            "step, or be part of a unit that always runs (name the enclosing "
                            "module's class in block_classes); or train at stage 0-2, where the "
                            "order is free")

    def _finish_pass_order(self) -> None:
        if self._pass and self._order is None:
            self._order = list(self._pass)
        elif self._pass and len(self._pass) != len(self._order) and self._stage == 3:
            raise ZeroError(f"a training pass called {len(self._pass)} module hooks, the first "
                            f"one {len(self._order)}. At ZeRO stage 3 a model must call its "
                            "modules in the same order in every training pass: a block that "
                            "runs only on some steps must run on every step, or be part of a "
                            "unit that always runs (name the enclosing module's class in "
                            "block_classes); or train at stage 0-2, where the order is free")
        self._pass = []
