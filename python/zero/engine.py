"""ZeroEngine: a PyTorch module trained by zero, with DeepSpeed's engine interface.

zero owns the model state; _hooks.UnitHooks makes the module's parameters and gradients views
of zero's memory and drives zero's module hooks from forward and autograd. This file is the
interface DeepSpeed's users call: forward, backward, step, the schedule's and the config's
values, checkpoints, and the weights back out.

Owns: the engine handle, the UnitHooks, the InplaceEdits (parameters changed in place by the
script, written into zero), the last step's statistics.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, TYPE_CHECKING

import torch

from . import _client_state, _library, _lifetime, _saving, _tensors
from ._hooks import UnitHooks
from ._inplace import InplaceEdits
from ._library import ZeroError, call
from .utils import ThroughputTimer

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ._hooks import Param
    from ._units import Unit


def _local_rank() -> int:
    for key in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


class ZeroEngine(torch.nn.Module):
    """What zero.initialize returns first. See docs/python.md for the whole interface.

    An nn.Module whose one child is the trained module, as DeepSpeed's engine is: parameters(),
    named_parameters() ("module." before each name), state_dict() and train() are the module's,
    and an attribute the engine lacks is the module's (engine.generate, engine.config of a
    Hugging Face model is the engine's own config dict, as in DeepSpeed). Moving or casting it
    (to(), half(), cuda()) is refused: zero owns the parameters' memory and dtype."""

    def __init__(self, handle: ctypes.c_void_p, model: torch.nn.Module, config: dict[str, Any],
                 units: list[Unit], params: list[Param], stage: int,
                 device: torch.device) -> None:
        super().__init__()
        self._destroyed: bool = False
        self._broken: str | None = None  # why the engine cannot go on, once a pass failed half way
        self._handle: ctypes.c_void_p | None = handle
        self.module: torch.nn.Module = model
        self.config: dict[str, Any] = config
        self._params: list[Param] = params
        self._stage: int = stage
        self._device: torch.device = device
        self._dtype: torch.dtype = _tensors.TORCH_DTYPES[self._query_int("zero_compute_dtype")]
        self.global_rank: int = self._query_int("zero_rank")
        self.world_size: int = self._query_int("zero_world_size")
        self.local_rank: int = _local_rank()
        self._stats: _library.StepStats = _library.StepStats()
        # the last optimizer step's, as DeepSpeed's _global_grad_norm
        self._grad_norm: float | None = None
        self._skipped_steps: int = 0  # optimizer steps skipped for non-finite gradients, all told
        self._step_applied: bool = False  # the last engine.step() ran the optimizer's update
        # set_gradient_accumulation_boundary's value, and what it was at this micro-batch's
        # backward (None: never set)
        self._said_boundary: bool | None = None
        self._boundary_at_backward: bool | None = None
        self._in_no_sync: bool = False
        self._lr_scales: tuple[float, ...] = (1.0,)
        # A torch LR scheduler given to zero.initialize, stepped after each applied step.
        self._client_scheduler: Any = None
        self._accumulation: int = int(self.config_value("gradient_accumulation_steps"))
        # DeepSpeed's engine.tput_timer: started by each forward, stopped by each step
        self.tput_timer: ThroughputTimer = ThroughputTimer(
            int(self.config_value("train_batch_size")))
        self._hooks: UnitHooks = UnitHooks(handle, model, units, params, stage, device,
                                           self._dtype)
        self._edits: InplaceEdits = InplaceEdits(handle, params, stage)
        self._edits.engine = self
        for module in model.modules():  # one engine a module (zero.initialize checks)
            module.__dict__["_zero_engine"] = self

    # ---- the DeepSpeed engine interface ----

    def __getattr__(self, name: str) -> Any:
        """An attribute the engine lacks is its module's, as DeepSpeed's engine passes them."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules")
            module = modules.get("module") if modules is not None else None
            if module is None or name.startswith("__"):
                raise
            try:
                return getattr(module, name)
            except AttributeError:
                raise AttributeError(f"'{type(self).__name__}' object (and its module, a "
                                     f"{type(module).__name__}) has no attribute "
                                     f"'{name}'") from None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._require_live()
        self._end_micro_step()
        self._edits.take("a forward")
        self.tput_timer.start()
        self._hooks.begin_forward()
        try:
            with self._hooks.saved_tensors():
                output = self.module(*args, **kwargs)
        except BaseException as error:
            self._hooks.end_forward(failed=True)
            broken = self._hooks.forward_failed()
            if broken:
                self._broken = f"the forward raised {type(error).__name__} ({error}) {broken}"
            raise
        self._hooks.end_forward()
        return output

    def backward(self, loss: torch.Tensor, retain_graph: bool = False,
                 scale_wrt_gas: bool = True) -> torch.Tensor:
        """Backward of the micro-batch's mean loss, scaled as zero says (the fp16 loss scale,
        over the accumulation steps unless scale_wrt_gas=False: the loss is then already a
        share of the window's). Returns the loss as DeepSpeed does: over the accumulation
        steps when scale_wrt_gas."""
        self._require_live()
        factor = ctypes.c_double()
        call("zero_loss_factor", self._handle, ctypes.byref(factor))
        steps = self._accumulation
        multiplier = factor.value * (1.0 if scale_wrt_gas else steps)
        scaled = loss * multiplier if multiplier != 1.0 else loss
        self._hooks.run_backward(scaled, retain_graph)
        self._boundary_at_backward = self._said_boundary
        return loss / steps if scale_wrt_gas and steps != 1 else loss

    def step(self) -> None:
        """After each micro-batch's backward, or (Accelerate's way) only after the backward
        that ends the accumulation window: a forward that finds a micro-batch's backward not
        yet stepped, inside the window, steps it first. The optimizer runs at the boundary."""
        self._require_live()
        if self._in_no_sync:
            raise ZeroError("engine.step() inside engine.no_sync(): leave the no_sync block "
                            "first; the step after it reduces the window's gradients")
        self._hooks.check_step()
        self._check_said_boundary()
        self._edits.take("engine.step()")
        call("zero_step", self._handle, ctypes.byref(self._stats))
        self._step_applied = bool(self._stats.stepped and not self._stats.skipped)
        self.tput_timer.stop(global_step=bool(self._stats.stepped))
        if self._stats.stepped:  # an accumulation boundary: the optimizer ran, or skipped
            self._grad_norm = self._stats.grad_norm
            self._skipped_steps += int(self._stats.skipped)
        self._hooks.stepped()
        if self._step_applied and self._client_scheduler is not None:
            with warnings.catch_warnings():
                # torch's warning that its own optimizer.step() was not called: zero stepped.
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler")
                self._client_scheduler.step()  # as DeepSpeed: after each step not skipped
            self._follow_client_schedule()

    def _follow_client_schedule(self) -> None:
        """A torch LR scheduler given to zero.initialize: its optimizer's learning rates become
        zero's (group 0's, and the others as their fixed scale of it)."""
        if self._client_scheduler is None:
            return
        groups = self._client_scheduler.optimizer.param_groups
        base = float(groups[0]["lr"])
        first = float(groups[0].get("initial_lr", base))
        for number, group in enumerate(groups[1:], 1):
            scale = float(group.get("initial_lr", group["lr"])) / first if first else 1.0
            want = base * scale
            if not math.isclose(float(group["lr"]), want, rel_tol=1e-9, abs_tol=1e-30):
                raise ZeroError(f"the LR scheduler set parameter group {number}'s lr to "
                                f"{group['lr']}, and group 0's to {base}: zero keeps each group's "
                                f"lr a fixed scale of group 0's ({scale} here, from their "
                                "initial lrs); give every group the same schedule (one lambda "
                                "for all, in LambdaLR)")
        call("zero_set_learning_rate", self._handle, ctypes.c_double(base))

    def _check_said_boundary(self) -> None:
        said = self._boundary_at_backward
        if said is None or said == self.is_gradient_accumulation_boundary():
            return
        steps = self.gradient_accumulation_steps()
        micro = (self._stats.micro_steps % steps) + 1
        raise ZeroError(f"set_gradient_accumulation_boundary({said}) for micro-batch {micro} of "
                        f"zero's window of {steps} (the config's gradient_accumulation_steps), "
                        f"where the window {'does not end' if said else 'ends'}: zero's window "
                        "has that fixed length. Set gradient_accumulation_steps to what the "
                        "script accumulates (Accelerate: its gradient_accumulation_steps), and "
                        "drop a short last window (the data loader's drop_last=True); nothing "
                        "was stepped")

    def _end_micro_step(self) -> None:
        """Steps a micro-batch whose backward ran without engine.step() (Accelerate steps only
        at the boundary), which must be inside the window: at its end the optimizer's step
        would be skipped without a word."""
        if not self._hooks.backward_done:
            return
        if self.is_gradient_accumulation_boundary():
            raise ZeroError("a forward after the backward that ends the accumulation window "
                            f"({self.gradient_accumulation_steps()} micro-batches, the config's "
                            "gradient_accumulation_steps), without engine.step(): call "
                            "engine.step() after that backward; it runs the optimizer")
        self.step()

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None:
        """DeepSpeed's override of where the window ends, for scripts that step only at the
        boundary (Accelerate): it holds for each backward until it is set again. zero's window
        is the config's gradient_accumulation_steps micro-batches: each micro-batch's step
        checks what was said at its backward against it, before stepping, and a boundary
        anywhere else (a short last window) is refused, naming both."""
        self._require_live()
        self._said_boundary = bool(is_boundary)

    def was_step_applied(self) -> bool:
        """Whether the last engine.step() updated the parameters: False inside the window and
        when non-finite gradients skipped the update, as DeepSpeed's."""
        return self._step_applied

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """DeepSpeed's: backward inside it does not reduce. At stages 0 and 1 zero accumulates
        the window's gradients and reduces them at its boundary whatever the block says, so it
        is accepted as it is (the same sums); stages 2 and 3 partition gradients as they are
        made and refuse it, as DeepSpeed does. engine.step() inside it is refused."""
        self._require_live()
        if self._stage >= 2:
            raise ZeroError(f"engine.no_sync() at ZeRO stage {self._stage}: stages 2 and 3 "
                            "reduce and partition each gradient as backward makes it (as "
                            "DeepSpeed's refuses it there); drop the block, zero accumulates the "
                            "window's gradients by itself")
        if self._in_no_sync:
            raise ZeroError("engine.no_sync() inside another no_sync block")
        self._in_no_sync = True
        try:
            yield
        finally:
            self._in_no_sync = False

    def fp16_enabled(self) -> bool:
        return self._dtype == torch.float16

    def bfloat16_enabled(self) -> bool:
        return self._dtype == torch.bfloat16

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to do: zero clears its gradient buffers itself."""

    def train(self, mode: bool = True) -> ZeroEngine:
        self._require_live()
        super().train(mode)  # the flag, and the module's train(mode)
        self._hooks.set_train(bool(mode))
        return self

    def to(self, *args: Any, **kwargs: Any) -> ZeroEngine:
        """Accepted where it asks for the engine's own device and dtype (a no-op); anything
        else is refused (_apply)."""
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        same_device = device is None or torch.device(device) == self._device or (
            torch.device(device).type == self._device.type and torch.device(device).index is None)
        if same_device and dtype in (None, self._dtype):
            return self
        return super().to(*args, **kwargs)

    def cpu(self) -> ZeroEngine:
        return self.to("cpu")

    def cuda(self, device: int | torch.device | None = None) -> ZeroEngine:
        return self.to(torch.device("cuda", device) if isinstance(device, int) else
                       device or "cuda")

    def half(self) -> ZeroEngine:
        return self.to(torch.float16)

    def float(self) -> ZeroEngine:
        return self.to(torch.float32)

    def bfloat16(self) -> ZeroEngine:
        return self.to(torch.bfloat16)

    def _apply(self, fn: Any, recurse: bool = True) -> ZeroEngine:
        raise ZeroError("moving or casting the engine (to(), cuda(), cpu(), half(), float(), "
                        "bfloat16()): zero owns the parameters' memory and dtype; choose the "
                        "precision in the config (bf16 / fp16) and the device with "
                        "zero.initialize(device=...)")

    def eval(self) -> ZeroEngine:
        return self.train(False)

    def get_lr(self) -> list[float]:
        """The learning rate the next optimizer step uses, per group, as DeepSpeed's: its
        scheduler has stepped after the last optimizer step (so before any step, the schedule's
        first value)."""
        self._require_live()
        lr = ctypes.c_double()
        call("zero_learning_rate", self._handle, ctypes.byref(lr))
        return [lr.value * scale for scale in self._lr_scales]

    def get_global_grad_norm(self) -> float | None:
        """The last optimizer step's gradient norm, before clipping (kept between boundaries,
        as DeepSpeed's); None before the first."""
        return self._grad_norm

    def get_quantization_error(self) -> dict[str, float | None]:
        """ZeRO++ with zero_optimization.zero_quantized_error_check: the last optimizer step's
        relative L2 error of the quantized stage-3 gathers and reduce-scatter against exact ones,
        as {"weights": ..., "gradients": ...}; None for a kind not measured."""
        self._require_live()
        weights, gradients = ctypes.c_double(), ctypes.c_double()
        call("zero_quantization_error", self._handle, ctypes.byref(weights),
             ctypes.byref(gradients))
        return {"weights": weights.value if weights.value >= 0 else None,
                "gradients": gradients.value if gradients.value >= 0 else None}

    def zero_optimization_stage(self) -> int:
        return self._stage

    def is_gradient_accumulation_boundary(self) -> bool:
        return bool(self._query_int("zero_is_accumulation_boundary"))

    def gradient_accumulation_steps(self) -> int:
        return self._accumulation

    def train_micro_batch_size_per_gpu(self) -> int:
        return int(self.config_value("train_micro_batch_size_per_gpu"))

    def train_batch_size(self) -> int:
        return int(self.config_value("train_batch_size"))

    @property
    def global_steps(self) -> int:
        self._require_live()
        steps = ctypes.c_longlong()
        call("zero_global_steps", self._handle, ctypes.byref(steps))
        return steps.value

    @property
    def micro_steps(self) -> int:
        return self._stats.micro_steps

    @property
    def skipped_steps(self) -> int:
        """Optimizer steps skipped for non-finite gradients since initialize, as DeepSpeed's."""
        return self._skipped_steps

    @property
    def loss_scale(self) -> float:
        self._require_live()
        scale = ctypes.c_double()
        call("zero_loss_scale", self._handle, ctypes.byref(scale))
        return scale.value

    @property
    def device(self) -> torch.device:
        return self._device

    def config_value(self, key: str) -> Any:
        """A resolved config value (zero_config_value), as Python data."""
        self._require_live()
        return json.loads(_library.json_out("zero_config_value", self._handle, key))

    def mean_across_ranks(self, *values: float | torch.Tensor) -> float | list[float]:
        """The mean of each value over the ranks (e.g. the loss to print)."""
        self._require_live()
        if not values:
            raise ZeroError("mean_across_ranks: no values given; pass the numbers or one-element "
                            "tensors to average, e.g. engine.mean_across_ranks(loss)")
        # A loss that still requires grad is read as its value (without torch's warning).
        array = (ctypes.c_double * len(values))(
            *[float(v.detach()) if isinstance(v, torch.Tensor) else float(v) for v in values])
        call("zero_mean_across_ranks", self._handle, array, len(values))
        return list(array) if len(values) > 1 else array[0]

    def memory_report(self) -> str:
        self._require_live()
        return _library.json_out("zero_memory_report", self._handle, None)

    # ---- checkpoints and weights ----

    def save_checkpoint(self, save_dir: str | os.PathLike[str], tag: Any = None,
                        client_state: Any = None, save_latest: bool = True) -> bool:
        """zero's checkpoint (loadable at any world size and stage) under save_dir/tag, with the
        module's persistent buffers (rank 0's) and `client_state` beside it. client_state holds
        plain data only (dicts, lists and tuples of str, int, float, bool, None and tensors),
        which loads without running code; anything else is refused here. Collective.

        save_dir and tag are rank 0's on every rank: a rank that passes others is warned and
        writes its part there, so that the checkpoint is one (DeepSpeed writes each rank's files
        under its own save_dir, a checkpoint in pieces; scripts that name the folder by the
        clock, as HelloDeepSpeed's train_bert_ds.py does, pass different ones when their ranks
        straddle a second)."""
        self._require_between_passes("save_checkpoint")
        save_dir, tag = self._rank0_location("save_checkpoint", save_dir, tag)
        self._edits.take("save_checkpoint")
        if not save_latest:
            raise ZeroError("save_checkpoint(save_latest=False): zero always moves "
                            "save_dir/latest to the new tag once it is complete")
        scheduler_state = (self._client_scheduler.state_dict()
                           if self._client_scheduler is not None else None)
        data = _client_state.pack(client_state, _client_state.persistent_buffers(self.module),
                                  scheduler_state)
        buffer = ctypes.create_string_buffer(data, len(data))
        tag_bytes = str(tag).encode() if tag is not None else None
        call("zero_save_checkpoint", self._handle, str(save_dir).encode(), tag_bytes, buffer,
             len(data))
        return True

    def load_checkpoint(self, load_dir: str | os.PathLike[str], tag: str | None = None,
                        load_module_strict: bool = True, load_optimizer_states: bool = True,
                        load_lr_scheduler_states: bool = True,
                        load_module_only: bool = False) -> tuple[str | None, Any]:
        """Loads load_dir/tag (tag None: the one load_dir/latest names) into the engine, from
        any world size and stage, and the module's persistent buffers (load_module_strict: a
        buffer the checkpoint lacks, or one the module lacks, is an error; else the others are
        loaded and those named in a warning). Returns (path, client_state), or (None, None)
        when load_dir holds no checkpoint. client_state is loaded as plain data and tensors
        only: a checkpoint that asks for more is refused. Collective. load_dir and tag are
        rank 0's on every rank, as save_checkpoint's are."""
        self._require_between_passes("load_checkpoint")
        load_dir, tag = self._rank0_location("load_checkpoint", load_dir, tag)
        load_dir = Path(load_dir)
        if tag is None and not (load_dir / "latest").exists() and not (
                load_dir / "meta.json").exists():
            warnings.warn(f"zero: no checkpoint in {load_dir} (no 'latest' file): nothing "
                          "loaded", stacklevel=2)
            return None, None
        if not load_lr_scheduler_states and load_optimizer_states and not load_module_only:
            raise ZeroError("load_checkpoint(load_lr_scheduler_states=False) with the optimizer "
                            "states: zero restores the schedule with the step counters; pass "
                            "load_module_only=True to start both afresh")
        flags = 1 if (load_module_only or not load_optimizer_states) else 0
        tag_bytes = str(tag).encode() if tag is not None else None
        call("zero_load_checkpoint", self._handle, str(load_dir).encode(), tag_bytes, flags)
        self._edits.forget()  # a change made before the load is replaced by the checkpoint's
        if tag is None and (load_dir / "latest").exists():
            path = load_dir / (load_dir / "latest").read_text().strip()
        else:
            path = load_dir / str(tag) if tag is not None else load_dir
        client_state, buffers, scheduler_state = _client_state.unpack(
            self.checkpoint_user_data(), path)
        self._restore_buffers(buffers, path, load_module_strict)
        if self._client_scheduler is not None and not (load_module_only or
                                                       not load_optimizer_states):
            if scheduler_state is None:
                raise ZeroError(f"load_checkpoint: {path} holds no LR scheduler state, and this "
                                "engine steps a torch LR scheduler; pass load_module_only=True "
                                "to start the schedule afresh")
            self._client_scheduler.load_state_dict(scheduler_state)
            # The optimizer's rates as the scheduler had set them (torch keeps those in the
            # optimizer's state, which zero does not save: its last_lr is the same).
            for group, lr in zip(self._client_scheduler.optimizer.param_groups,
                                 self._client_scheduler.get_last_lr()):
                group["lr"] = lr
        self._follow_client_schedule()
        return str(path), client_state

    def _rank0_location(self, caller: str, folder: str | os.PathLike[str],
                        tag: Any) -> tuple[str, Any]:
        """(folder, tag) as rank 0 passed them, on every rank (collective: two broadcasts); a
        rank whose own differ is warned, naming both."""
        mine = json.dumps([os.fspath(folder), None if tag is None else str(tag)]).encode()
        size = ctypes.c_ulonglong(len(mine))
        call("zero_broadcast", self._handle, ctypes.byref(size), ctypes.sizeof(size), 0)
        buffer = ctypes.create_string_buffer(mine if self.global_rank == 0 else size.value,
                                             size.value)
        call("zero_broadcast", self._handle, buffer, size.value, 0)
        chosen, chosen_tag = json.loads(buffer.raw[:size.value])
        if buffer.raw[:size.value] != mine:
            warnings.warn(f"zero: {caller}: rank {self.global_rank} passed "
                          f"({os.fspath(folder)!r}, tag {tag!r}), rank 0 ({chosen!r}, tag "
                          f"{chosen_tag!r}); every rank uses rank 0's, so that the checkpoint "
                          "is one", stacklevel=3)
            return chosen, chosen_tag
        return chosen, tag

    def checkpoint_user_data(self) -> bytes:
        """The raw user data of the last checkpoint loaded (its client_state and buffers as
        zero packs them), as bytes; b"" before any load."""
        self._require_live()
        size = ctypes.c_ulonglong()
        call("zero_checkpoint_user_data", self._handle, None, 0, ctypes.byref(size))
        buffer = ctypes.create_string_buffer(max(size.value, 1))
        call("zero_checkpoint_user_data", self._handle, buffer, size.value, None)
        return buffer.raw[:size.value]

    def _restore_buffers(self, saved: dict[str, torch.Tensor], path: Path, strict: bool) -> None:
        """The module's persistent buffers set from a checkpoint's (rank 0's when saved)."""
        own = _client_state.persistent_buffers(self.module)
        if not saved and own:
            warnings.warn(f"zero: {path} holds no module buffers (saved by an earlier zero): "
                          f"the module's {len(own)} persistent buffers keep their current values "
                          f"(first: {next(iter(own))})", stacklevel=3)
            return
        missing = [name for name in own if name not in saved]
        unexpected = [name for name in saved if name not in own]
        wrong = [f"{name} is {tuple(saved[name].shape)} there, {tuple(own[name].shape)} here"
                 for name in own if name in saved and saved[name].shape != own[name].shape]
        if wrong:
            raise ZeroError(f"load_checkpoint: {path}: buffer {wrong[0]}: the parameters are "
                            "loaded, the buffers are not; load a checkpoint of this model")
        if strict and (missing or unexpected):
            first = (f"the module's buffer {missing[0]} is not in it" if missing
                     else f"it holds a buffer {unexpected[0]} the module does not have")
            raise ZeroError(f"load_checkpoint: {path}: {first} ({len(missing)} missing, "
                            f"{len(unexpected)} unexpected): the parameters are loaded, the "
                            "buffers are not; pass load_module_strict=False to load the "
                            "buffers that match")
        if missing or unexpected:
            warnings.warn(f"zero: {path}: buffers not loaded: {missing + unexpected}",
                          stacklevel=3)
        with torch.no_grad():
            for name, tensor in own.items():
                if name in saved:
                    tensor.copy_(saved[name].to(tensor.dtype))

    def consolidated_state_dict(self,
                                dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        """Every parameter's full value (the fp32 master where there is one) on every rank, on
        the CPU, under the module's names (tied names share one tensor), with the module's
        persistent buffers. Collective."""
        self._require_between_passes("consolidated_state_dict")
        self._edits.take("consolidated_state_dict")
        state = _saving.rank0_state(self, dtype, _saving.sources(self), everywhere=True)
        assert state is not None  # every rank gets them
        return state

    def zero_gather_16bit_weights_on_model_save(self) -> bool:
        """The config's zero_optimization.stage3_gather_16bit_weights_on_model_save (what the
        HF Trainer and Accelerate ask before they save the weights at stage 3)."""
        return bool(self.config_value(
            "zero_optimization.stage3_gather_16bit_weights_on_model_save"))

    def _zero3_consolidated_16bit_state_dict(
            self, exclude_frozen_parameters: bool = False) -> dict[str, torch.Tensor] | None:
        """DeepSpeed's name for the consolidated weights in the compute dtype, which Accelerate
        and the HF Trainer call at stage 3: as DeepSpeed's, rank 0 gets them, gathered a tensor
        at a time, and the other ranks None; at stages 0-2 every rank gets them. Without the
        frozen parameters when asked. Collective."""
        self._require_between_passes("_zero3_consolidated_16bit_state_dict")
        self._edits.take("_zero3_consolidated_16bit_state_dict")
        named = _saving.sources(self, exclude_frozen_parameters)
        return _saving.rank0_state(self, self._dtype, named, everywhere=self._stage != 3)

    def save_16bit_model(self, save_dir: str | os.PathLike[str],
                         save_filename: str = "pytorch_model.bin") -> bool:
        """DeepSpeed's: the consolidated weights in the compute dtype, written by rank 0, a
        tensor at a time from zero's partitions (a .safetensors name streams them into the
        file; a .bin is torch.save'd from the values rank 0 gathered). Collective."""
        self._require_between_passes("save_16bit_model")
        self._edits.take("save_16bit_model")
        _saving.save_16bit_model(self, save_dir, save_filename)
        return True

    def save_pretrained(self, save_dir: str | os.PathLike[str], dtype: torch.dtype | None = None,
                        **kwargs: Any) -> None:
        """A Hugging Face directory (config and safetensors weights) of the trained model: the
        module's own save_pretrained decides the files (rank 0), and the weights are streamed
        into them a tensor at a time from zero's partitions (_saving.py), in `dtype` (default
        fp32, the masters). Collective."""
        if not hasattr(self.module, "save_pretrained"):
            raise ZeroError(f"save_pretrained: {type(self.module).__name__} is not a Hugging "
                            "Face model; use consolidated_state_dict() or save_16bit_model()")
        self._require_between_passes("save_pretrained")
        self._edits.take("save_pretrained")
        _saving.save_pretrained(self, save_dir, dtype or torch.float32, kwargs)

    def destroy(self, restore_module: bool = False) -> None:
        """Frees zero's state. restore_module=True first gives the module its full weights
        back as ordinary fp32 tensors (collective, like the rest). Afterwards the engine is
        unusable. Called at exit when not called."""
        if self._destroyed:
            return
        state = self.consolidated_state_dict() if restore_module else None
        self._edits.release()
        self._hooks.detach()
        if state is not None:
            own = {id(p.param): p for p in self._params}
            for name, tensor in self.module.state_dict(keep_vars=True).items():  # hooks gone
                if id(tensor) in own:
                    tensor.data = state[name].to(self._device)
        self._destroyed = True
        for module in self.module.modules():
            module.__dict__.pop("_zero_engine", None)
        _lifetime.forget(self)
        call("zero_destroy", self._handle)
        self._handle = None

    def _require_live(self) -> None:
        if self._destroyed:
            raise ZeroError("the engine was destroyed (engine.destroy(), or at the program's "
                            "exit): make a new one with zero.initialize")
        if self._broken is not None:
            raise ZeroError(f"the engine cannot go on: {self._broken}. Destroy it "
                            "(engine.destroy()) and make a new one, or resume from a checkpoint; "
                            "a failing micro-batch cannot be skipped once its forward has begun")

    def _require_between_passes(self, what: str) -> None:
        self._require_live()
        self._hooks.between_passes(what)

    def _query_int(self, name: str) -> int:
        self._require_live()
        value = ctypes.c_int()
        call(name, self._handle, ctypes.byref(value))
        return value.value

    def _base_decay(self) -> float:
        try:
            return float(self.config_value("optimizer.params.weight_decay"))
        except (ZeroError, TypeError, ValueError):
            return 0.0

