"""ZeroEngine: a PyTorch module trained by zero, with DeepSpeed's engine interface.

zero owns the model state; _hooks.UnitHooks makes the module's parameters and gradients views
of zero's memory and drives zero's module hooks from forward and autograd. This file is the
interface DeepSpeed's users call: forward, backward, step, the schedule's and the config's
values, checkpoints, and the weights back out.

Owns: the engine handle, the UnitHooks, the last step's statistics.
"""

import ctypes
import json
import os
import pickle
import warnings
from pathlib import Path

import torch

from . import _library, _tensors
from ._hooks import UnitHooks
from ._library import ZeroError, call


def _local_rank():
    for key in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


class ZeroEngine:
    """What zero.initialize returns first. See docs/python.md for the whole interface."""

    def __init__(self, handle, model, config, units, params, stage, device):
        self._handle = handle
        self.module = model
        self.config = config
        self._params = params
        self._stage = stage
        self._device = device
        self._dtype = _tensors.TORCH_DTYPES[self._query_int("zero_compute_dtype")]
        self.global_rank = self._query_int("zero_rank")
        self.world_size = self._query_int("zero_world_size")
        self.local_rank = _local_rank()
        self._stats = _library.StepStats()
        self._stepped = False
        self._destroyed = False
        self._lr_scales = (1.0,)
        self._hooks = UnitHooks(handle, units, params, stage, device, self._dtype)

    # ---- the DeepSpeed engine interface ----

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        self._require_live()
        with self._hooks.saved_tensors():
            return self.module(*args, **kwargs)

    def backward(self, loss, retain_graph=False):
        """Backward of the micro-batch's mean loss, scaled as zero says (the fp16 loss scale
        over the accumulation steps)."""
        self._require_live()
        factor = ctypes.c_double()
        call("zero_loss_factor", self._handle, ctypes.byref(factor))
        scaled = loss * factor.value if factor.value != 1.0 else loss
        self._hooks.run_backward(scaled, retain_graph)
        return loss

    def step(self):
        """Every micro-batch, after backward; the optimizer runs at the accumulation
        boundary."""
        self._require_live()
        self._hooks.check_step()
        call("zero_step", self._handle, ctypes.byref(self._stats))
        self._stepped = True
        self._hooks.stepped()

    def zero_grad(self):
        """Nothing to do: zero clears its gradient buffers itself."""

    def train(self, mode=True):
        self._require_live()
        self.module.train(mode)
        self._hooks.set_train(bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def get_lr(self):
        """The learning rate the next optimizer step uses, per group, as DeepSpeed's: its
        scheduler has stepped after the last optimizer step (so before any step, the schedule's
        first value)."""
        lr = ctypes.c_double()
        call("zero_learning_rate", self._handle, ctypes.byref(lr))
        return [lr.value * scale for scale in self._lr_scales]

    def get_global_grad_norm(self):
        return self._stats.grad_norm if self._stepped else None

    def get_quantization_error(self):
        """ZeRO++ with zero_optimization.zero_quantized_error_check: the last optimizer step's
        relative L2 error of the quantized stage-3 gathers and reduce-scatter against exact ones,
        as {"weights": ..., "gradients": ...}; None for a kind not measured."""
        weights, gradients = ctypes.c_double(), ctypes.c_double()
        call("zero_quantization_error", self._handle, ctypes.byref(weights),
             ctypes.byref(gradients))
        return {"weights": weights.value if weights.value >= 0 else None,
                "gradients": gradients.value if gradients.value >= 0 else None}

    def zero_optimization_stage(self):
        return self._stage

    def is_gradient_accumulation_boundary(self):
        return bool(self._query_int("zero_is_accumulation_boundary"))

    def gradient_accumulation_steps(self):
        return int(self.config_value("gradient_accumulation_steps"))

    def train_micro_batch_size_per_gpu(self):
        return int(self.config_value("train_micro_batch_size_per_gpu"))

    def train_batch_size(self):
        return int(self.config_value("train_batch_size"))

    @property
    def global_steps(self):
        steps = ctypes.c_longlong()
        call("zero_global_steps", self._handle, ctypes.byref(steps))
        return steps.value

    @property
    def micro_steps(self):
        return self._stats.micro_steps

    @property
    def skipped_steps(self):
        return int(self._stats.skipped) if self._stepped else 0

    @property
    def loss_scale(self):
        scale = ctypes.c_double()
        call("zero_loss_scale", self._handle, ctypes.byref(scale))
        return scale.value

    @property
    def device(self):
        return self._device

    def config_value(self, key):
        """A resolved config value (zero_config_value), as Python data."""
        return json.loads(_library.json_out("zero_config_value", self._handle, key))

    def mean_across_ranks(self, *values):
        """The mean of each value over the ranks (e.g. the loss to print)."""
        array = (ctypes.c_double * len(values))(*[float(v) for v in values])
        call("zero_mean_across_ranks", self._handle, array, len(values))
        return list(array) if len(values) > 1 else array[0]

    def memory_report(self):
        return _library.json_out("zero_memory_report", self._handle, None)

    # ---- checkpoints and weights ----

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True):
        """zero's checkpoint (loadable at any world size and stage) under save_dir/tag, with
        `client_state` (pickled) kept beside it. Collective."""
        self._require_between_passes("save_checkpoint")
        if not save_latest:
            raise ZeroError("save_checkpoint(save_latest=False): zero always moves "
                            "save_dir/latest to the new tag once it is complete")
        data = pickle.dumps(client_state or {})
        buffer = ctypes.create_string_buffer(data, len(data))
        tag_bytes = str(tag).encode() if tag is not None else None
        call("zero_save_checkpoint", self._handle, str(save_dir).encode(), tag_bytes, buffer,
             len(data))
        return True

    def load_checkpoint(self, load_dir, tag=None, load_module_only=False,
                        load_optimizer_states=True, load_lr_scheduler_states=True):
        """Loads load_dir/tag (tag None: the one load_dir/latest names) into the engine, from
        any world size and stage. Returns (path, client_state), or (None, None) when load_dir
        holds no checkpoint. Collective."""
        self._require_between_passes("load_checkpoint")
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
        size = ctypes.c_ulonglong()
        call("zero_checkpoint_user_data", self._handle, None, 0, ctypes.byref(size))
        buffer = ctypes.create_string_buffer(max(size.value, 1))
        call("zero_checkpoint_user_data", self._handle, buffer, size.value, None)
        client_state = pickle.loads(buffer.raw[:size.value]) if size.value else {}
        if tag is None and (load_dir / "latest").exists():
            path = load_dir / (load_dir / "latest").read_text().strip()
        else:
            path = load_dir / tag if tag is not None else load_dir
        return str(path), client_state

    def consolidated_state_dict(self, dtype=torch.float32):
        """Every parameter's full value (the fp32 master where there is one) on every rank, on
        the CPU, under the module's names (tied names share one tensor), with the module's
        persistent buffers. Collective."""
        self._require_between_passes("consolidated_state_dict")
        values = {}
        for p in self._params:
            out = torch.empty(p.shape, dtype=torch.float32)
            count = out.numel()
            pointer = ctypes.cast(out.data_ptr(), ctypes.POINTER(ctypes.c_float))
            call("zero_read_param", self._handle, p.index, pointer, count)
            values[id(p.param)] = out.to(dtype)
        state = {}
        for name, tensor in self.module.state_dict(keep_vars=True).items():
            state[name] = values.get(id(tensor))
            if state[name] is None:
                state[name] = tensor.detach().to("cpu")
        return state

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin"):
        """DeepSpeed's: the consolidated weights in the compute dtype, torch.save'd by rank 0.
        Collective."""
        state = self.consolidated_state_dict(self._dtype)
        if self.global_rank == 0:
            Path(save_dir).mkdir(parents=True, exist_ok=True)
            torch.save(state, Path(save_dir) / save_filename)
        return True

    def save_pretrained(self, save_dir, dtype=None, **kwargs):
        """A Hugging Face directory (config and safetensors weights) of the trained model,
        written by rank 0 through the module's own save_pretrained. Collective."""
        if not hasattr(self.module, "save_pretrained"):
            raise ZeroError(f"save_pretrained: {type(self.module).__name__} is not a Hugging "
                            "Face model; use consolidated_state_dict() or save_16bit_model()")
        state = self.consolidated_state_dict(dtype or torch.float32)
        if self.global_rank == 0:
            self.module.save_pretrained(save_dir, state_dict=state, **kwargs)

    def destroy(self, restore_module=False):
        """Frees zero's state. restore_module=True first gives the module its full weights
        back as ordinary fp32 tensors (collective, like the rest). Afterwards the engine is
        unusable. Called at exit when not called."""
        if self._destroyed:
            return
        state = self.consolidated_state_dict() if restore_module else None
        self._hooks.detach()
        if state is not None:
            own = {id(p.param): p for p in self._params}
            for name, tensor in self.module.state_dict(keep_vars=True).items():
                if id(tensor) in own:
                    tensor.data = state[name].to(self._device)
        self._destroyed = True
        call("zero_destroy", self._handle)
        self._handle = None

    def _require_live(self):
        if self._destroyed:
            raise ZeroError("the engine was destroyed (engine.destroy())")

    def _require_between_passes(self, what):
        self._require_live()
        self._hooks.between_passes(what)

    def _query_int(self, name):
        value = ctypes.c_int()
        call(name, self._handle, ctypes.byref(value))
        return value.value

    def _base_decay(self):
        try:
            return float(self.config_value("optimizer.params.weight_decay"))
        except (ZeroError, TypeError, ValueError):
            return 0.0

