"""zero.hf: the Hugging Face Trainer trained by zero, where the Trainer would use DeepSpeed.

    from zero.hf import Trainer, TrainingArguments

    args = TrainingArguments(output_dir="out", deepspeed="ds_config.json", ...)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation)
    trainer.train()                                  # or train(resume_from_checkpoint=...)
    trainer.save_model("finetuned")                  # a Hugging Face directory

Launched with zero-run (`zero-run -n 2 -- python train.py`). The DeepSpeed config's "auto"
values are filled from the TrainingArguments as transformers fills them for DeepSpeed
(fill_auto when the Trainer is made, fill_auto_for_training when training starts), and a value
given that differs from its argument is refused, as transformers refuses it. zero's engine
(zero.initialize) then runs the forward, the backward, the accumulation window, the clipping,
the optimizer and the learning-rate schedule: the config's optimizer and scheduler sections
when it has them, else the Trainer's own (its torch AdamW, its scheduler), as the Trainer
chooses under DeepSpeed. A checkpoint holds zero's checkpoint (global_stepN/) beside the
Trainer's files (trainer_state.json, each rank's RNG state, the weights as a Hugging Face
directory), and train(resume_from_checkpoint=...) continues from it exactly.

Owns: the "auto" filling, TrainingArguments (transformers' with its `deepspeed` given to zero,
so that transformers' DeepSpeed integration never starts) and Trainer (transformers' with
zero's engine in place of DeepSpeed's). Written against transformers 5.24.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any, Union

import torch
import transformers
from transformers.trainer import TRAINING_ARGS_NAME

from ._initialize import initialize, read_config_file, read_config_text
from .engine import ZeroEngine

__all__ = ["Trainer", "TrainingArguments", "fill_auto", "fill_auto_for_training"]

ConfigSource = Union[str, "os.PathLike[str]", dict[str, Any]]


class _Filler:
    """A config's "auto" values replaced, and its other values that differ from the
    TrainingArguments' collected, with transformers' rule: a key the config lacks is left out."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config: dict[str, Any] = copy.deepcopy(config)
        self.mismatches: list[str] = []

    def _node(self, key: str) -> tuple[dict[str, Any] | None, str]:
        *path, last = key.split(".")
        node: Any = self.config
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        return (node if isinstance(node, dict) else None), last

    def is_auto(self, key: str) -> bool:
        node, last = self._node(key)
        return node is not None and node.get(last) == "auto"

    def fill(self, key: str, value: Any, argument: str | None = None) -> None:
        """key's "auto" becomes value; another value than value is a mismatch, unless
        argument is None (a value the Trainer does not decide)."""
        node, last = self._node(key)
        if node is None:
            return
        if node.get(last) == "auto":
            node[last] = value
        elif argument is not None and last in node and node[last] != value:
            self.mismatches.append(f"- config {key}={node[last]!r}, TrainingArguments "
                                   f"{argument}={value!r}")

    def result(self) -> dict[str, Any]:
        if self.mismatches:
            listed = "\n".join(self.mismatches)
            raise ValueError(f"zero.hf: the DeepSpeed config differs from the TrainingArguments:"
                             f"\n{listed}\nset these config values to \"auto\" (filled from the "
                             "arguments), or make the arguments agree")
        return self.config


def fill_auto(config: dict[str, Any], args: transformers.TrainingArguments,
              world_size: int) -> dict[str, Any]:
    """A copy of `config` with the "auto" values transformers fills from the TrainingArguments
    when it builds them (HfTrainerDeepSpeedConfig.trainer_config_process): the batch sizes
    (train_batch_size over `world_size` ranks), the accumulation steps, gradient_clipping from
    max_grad_norm, the optimizer's lr, betas, eps and weight_decay, the scheduler's
    warmup_min_lr (0) and warmup_max_lr, and fp16/bf16.enabled. A value given that differs from
    its argument raises ValueError, listing each."""
    filler = _Filler(config)
    micro, steps = args.per_device_train_batch_size, args.gradient_accumulation_steps
    filler.fill("train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size")
    filler.fill("gradient_accumulation_steps", steps, "gradient_accumulation_steps")
    filler.fill("train_batch_size", world_size * micro * steps,
                "per_device_train_batch_size * gradient_accumulation_steps * ranks")
    filler.fill("gradient_clipping", args.max_grad_norm, "max_grad_norm")
    filler.fill("optimizer.params.lr", args.learning_rate, "learning_rate")
    filler.fill("optimizer.params.betas", [args.adam_beta1, args.adam_beta2],
                "[adam_beta1, adam_beta2]")
    filler.fill("optimizer.params.eps", args.adam_epsilon, "adam_epsilon")
    filler.fill("optimizer.params.weight_decay", args.weight_decay, "weight_decay")
    filler.fill("scheduler.params.warmup_min_lr", 0)
    filler.fill("scheduler.params.warmup_max_lr", args.learning_rate, "learning_rate")
    filler.fill("fp16.enabled", bool(args.fp16 or args.fp16_full_eval), "fp16 or fp16_full_eval")
    filler.fill("bf16.enabled", bool(args.bf16 or args.bf16_full_eval), "bf16 or bf16_full_eval")
    return filler.result()


def fill_auto_for_training(config: dict[str, Any], args: transformers.TrainingArguments,
                           model: torch.nn.Module, num_training_steps: int) -> dict[str, Any]:
    """A copy of `config` with the "auto" values transformers fills once training starts
    (HfTrainerDeepSpeedConfig.trainer_config_finalize): the bucket sizes from the model's
    hidden size, the scheduler's total_num_steps and warmup_num_steps (at least 1)."""
    filler = _Filler(config)
    sized = ("zero_optimization.reduce_bucket_size",
             "zero_optimization.stage3_prefetch_bucket_size",
             "zero_optimization.stage3_param_persistence_threshold")
    if any(filler.is_auto(key) for key in sized):
        hidden = _hidden_size(model)
        if hidden is None:
            raise ValueError(f"zero.hf: the config's {[k for k in sized if filler.is_auto(k)]} "
                             "are \"auto\", which are filled from the model's hidden size, and "
                             f"{type(model).__name__}'s config has no hidden_size or "
                             "hidden_sizes: give these values as numbers")
        filler.fill(sized[0], hidden * hidden)
        if filler.config.get("zero_optimization", {}).get("stage") == 3:
            filler.fill(sized[1], int(0.9 * hidden * hidden))
            filler.fill(sized[2], 10 * hidden)
    filler.fill("scheduler.params.total_num_steps", num_training_steps,
                "the training steps (calculated)")
    filler.fill("scheduler.params.warmup_num_steps",
                max(1, args.get_warmup_steps(num_training_steps)), "warmup_steps")
    return filler.result()


def _hidden_size(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for holder in (config, getattr(config, "text_config", None)):
        if getattr(holder, "hidden_size", None) is not None:
            return int(holder.hidden_size)
        if getattr(holder, "hidden_sizes", None):
            return int(max(holder.hidden_sizes))
    return None


@dataclasses.dataclass
class TrainingArguments(transformers.TrainingArguments):
    """transformers' TrainingArguments, whose `deepspeed` (a config path or dict; also
    `--deepspeed` through HfArgumentParser) is zero's config: it is moved to `zero_config` and
    `deepspeed` left None, so that transformers' DeepSpeed integration (its DeepSpeed plugin,
    DeepSpeed's own zero.Init in from_pretrained at stage 3) never starts and DeepSpeed need
    not be installed."""

    def __post_init__(self) -> None:
        self.zero_config: ConfigSource | None = self.deepspeed
        self.deepspeed = None
        super().__post_init__()


class _EngineOptimizer:
    """What the Trainer holds as its optimizer: zero's engine steps it (step() and zero_grad()
    do nothing here), and its param_groups are the engine's."""

    def __init__(self, view: Any) -> None:
        self._view: Any = view

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._view.param_groups

    def step(self, closure: Any = None) -> None:
        """Nothing to do: the engine stepped at the accumulation boundary."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to do: zero clears its gradients itself."""

    def state_dict(self) -> dict[str, Any]:
        raise ValueError("zero.hf.Trainer: the optimizer's state is zero's, sharded over the "
                         "ranks; it is saved in the checkpoint's global_stepN/ by "
                         "engine.save_checkpoint")


class _EngineSchedule:
    """What the Trainer holds as its LR scheduler: zero's engine steps the schedule after each
    optimizer step (as DeepSpeed's does), so step() does nothing. get_last_lr(), which the
    Trainer logs after each optimizer step, answers as under DeepSpeed: where DeepSpeed's
    engine steps the schedule, the rate once it has stepped; where the Trainer steps it itself
    (its own scheduler beside its own optimizer), the rate of the step just taken, since the
    Trainer logs before it steps."""

    def __init__(self, engine: ZeroEngine, schedule: Any, trainer_steps: bool) -> None:
        self._engine: ZeroEngine = engine
        self._schedule: Any = schedule
        self._trainers: bool = trainer_steps
        self._taken: list[float] | None = None

    def before_step(self) -> None:
        """Called before an engine.step() that ends the window: the rate that step uses."""
        self._taken = self._engine.get_lr()

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to do: the engine stepped it."""

    def get_last_lr(self) -> list[float]:
        if self._trainers and self._taken is not None:
            return self._taken
        return self._engine.get_lr()

    def state_dict(self) -> dict[str, Any]:
        if self._schedule is not None and hasattr(self._schedule, "state_dict"):
            return self._schedule.state_dict()
        return {"last_epoch": self._engine.global_steps}


# TrainingArguments zero.hf.Trainer cannot honour, each with what to do instead.
_REFUSED_ARGUMENTS = {
    "fsdp": "FSDP with zero: zero shards the model itself (ZeRO stage 3); drop fsdp",
    "auto_find_batch_size": "a batch size found by retrying: set per_device_train_batch_size",
    "load_best_model_at_end": "reloading the best checkpoint at the end: resume from it with "
                              "train(resume_from_checkpoint=...) and save_model",
    "torch_compile": "torch.compile of the engine: compile the module before the Trainer",
    "fp16_full_eval": "casting the trained model to fp16 for evaluation: zero's config sets "
                      "the precision (its fp16 section)",
    "bf16_full_eval": "casting the trained model to bf16 for evaluation: zero's config sets "
                      "the precision (its bf16 section)",
    "label_smoothing_factor": "label smoothing (the Trainer finds the model's kind through "
                              "Accelerate, which does not unwrap zero's engine): compute the "
                              "smoothed loss in the model or in compute_loss_func",
    "parallelism_config": "tensor, context or sequence parallelism: zero is data parallel",
}


def _config_from(source: ConfigSource) -> dict[str, Any]:
    """The config given as a path, a dict, or (as transformers also takes it) JSON text."""
    if isinstance(source, str) and source.lstrip().startswith("{"):
        config = read_config_text(source, "the DeepSpeed config given as JSON text",
                                  "zero.hf.Trainer")
    elif isinstance(source, (str, os.PathLike)):
        config = read_config_file(Path(source), "zero.hf.Trainer")
    else:
        config = source
    if not isinstance(config, dict):
        raise ValueError(f"zero.hf.Trainer: the DeepSpeed config must be a path to a JSON file "
                         f"or a dict, not {type(config).__name__}")
    return copy.deepcopy(config)


def _without_deepspeed(args: transformers.TrainingArguments) -> transformers.TrainingArguments:
    """A copy of TrainingArguments built with deepspeed=..., with transformers' DeepSpeed
    integration taken off it (its plugin, its config object, the devices it set up)."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    args = copy.copy(args)
    args.deepspeed = None
    args.deepspeed_plugin = None
    args.hf_deepspeed_config = None
    unset_hf_deepspeed_config()  # is_deepspeed_zero3_enabled() answers False again
    # The devices set up again without DeepSpeed, now: the Trainer makes its Accelerator before
    # it asks for them, and setting them up resets Accelerate's state.
    args.__dict__.pop("_setup_devices", None)
    args._setup_devices  # noqa: B018 (a cached property, evaluated for its effect)
    return args


class Trainer(transformers.Trainer):
    """transformers' Trainer, trained by zero's engine where it would use DeepSpeed's.

    Takes the Trainer's arguments, and the DeepSpeed config as `args.deepspeed` (zero.hf's
    TrainingArguments, or transformers' own, whose DeepSpeed setup is undone) or as
    `zero_config`. The model must be on the CPU or one GPU (built normally: zero shards it).
    On CPU ranks the arguments need use_cpu=True, without which Accelerate sees one process a
    rank and would give each rank the whole dataset (refused when training starts)."""

    def __init__(self, model: torch.nn.Module | None = None,
                 args: transformers.TrainingArguments | None = None, *more: Any,
                 zero_config: ConfigSource | None = None, **kwargs: Any) -> None:
        if not hasattr(transformers.Trainer, "_prepare_for_training"):
            raise ValueError(f"zero.hf.Trainer: transformers {transformers.__version__} has no "
                             "Trainer._prepare_for_training, where zero's engine takes "
                             "DeepSpeed's place; use transformers 5.24")
        if args is None:
            raise ValueError("zero.hf.Trainer: pass args=TrainingArguments(..., deepspeed="
                             "\"ds_config.json\") (zero.hf's or transformers')")
        given = [name for name, value in (("zero_config", zero_config),
                                          ("args.deepspeed", getattr(args, "deepspeed", None)),
                                          ("args.zero_config", getattr(args, "zero_config", None)))
                 if value is not None]
        if len(given) != 1:
            said = " and ".join(given) if given else "none"
            raise ValueError(f"zero.hf.Trainer: one DeepSpeed config is needed ({said} given): "
                             "TrainingArguments(deepspeed=\"ds_config.json\") or "
                             "Trainer(zero_config=...)")
        source = zero_config if zero_config is not None else (
            getattr(args, "zero_config", None) or args.deepspeed)
        if getattr(args, "deepspeed", None) is not None:
            args = _without_deepspeed(args)
        for name, what in _REFUSED_ARGUMENTS.items():
            if getattr(args, name, None):
                raise ValueError(f"zero.hf.Trainer: TrainingArguments({name}="
                                 f"{getattr(args, name)!r}) asks for {what}")
        if model is not None and any(hasattr(p, "ds_id") for p in model.parameters()):
            raise ValueError("zero.hf.Trainer: the model's parameters are DeepSpeed's (made "
                             "under deepspeed.zero.Init: transformers' from_pretrained does so "
                             "while TrainingArguments(deepspeed=<a stage-3 config>) exist); "
                             "build the arguments with zero.hf.TrainingArguments, or load the "
                             "model before them")
        config = _config_from(source)
        self._zero_engine: ZeroEngine | None = None
        super().__init__(model, args, *more, **kwargs)
        self._zero_given: tuple[Any, Any] = (self.optimizer, self.lr_scheduler)
        self._zero_config: dict[str, Any] = fill_auto(config, self.args, self.args.world_size)
        # The Trainer would enter the engine's no_sync() for each micro-batch but a window's
        # last; zero reduces at its boundary itself (and refuses no_sync at stages 2 and 3).
        self.accelerator.gradient_state.plugin_kwargs["sync_each_batch"] = True

    @property
    def zero_engine(self) -> ZeroEngine | None:
        """The engine training the model, once train() has begun; None before."""
        return self._zero_engine

    # ---- the engine in DeepSpeed's place ----

    def _prepare_for_training(self, max_steps: int, train_dataloader: Any,
                              resume_from_checkpoint: str | None) -> tuple[ZeroEngine, Any]:
        """zero.initialize over the model with the filled config, the optimizer and scheduler
        chosen as the Trainer chooses them under DeepSpeed, and the checkpoint loaded."""
        if self._zero_engine is not None:  # a second train(): afresh, as DeepSpeed's
            self._zero_engine.destroy(restore_module=True)
            self._zero_engine = None
        self.optimizer, self.lr_scheduler = self._zero_given
        self._created_lr_scheduler = False
        config = fill_auto_for_training(self._zero_config, self.args, self.model, max_steps)
        if hasattr(train_dataloader, "__len__"):  # else zero's engine checks each window
            self._check_windows(len(train_dataloader), max_steps)
        # Under DeepSpeed the Trainer steps its own scheduler only beside its own optimizer;
        # DeepSpeed's engine steps every other (and the logged rate follows who steps it).
        trainer_steps = "optimizer" not in config and "scheduler" not in config
        optimizer, schedule, parameters = self._optimizer_and_schedule(config, max_steps)
        engine, view, _, schedule_view = initialize(
            model=self.model, optimizer=optimizer, lr_scheduler=schedule,
            model_parameters=parameters, config=config)
        self._zero_engine = engine
        if engine.world_size != self.accelerator.num_processes:
            engine.destroy(restore_module=True)
            self._zero_engine = None
            raise ValueError(f"zero.hf.Trainer: the job has {engine.world_size} ranks, and "
                             f"Accelerate sees {self.accelerator.num_processes} process(es), so "
                             "each rank would read the whole dataset: on CPU ranks pass "
                             "TrainingArguments(use_cpu=True) (Accelerate finds no device to "
                             "set up its processes otherwise), and launch with zero-run")
        self.model_wrapped = engine
        self.optimizer = _EngineOptimizer(view)
        self.lr_scheduler = _EngineSchedule(engine, schedule_view, trainer_steps)
        if resume_from_checkpoint is not None:
            path, _ = engine.load_checkpoint(resume_from_checkpoint)
            if path is None:
                raise ValueError(f"zero.hf.Trainer: {resume_from_checkpoint} holds no zero "
                                 "checkpoint (no 'latest' file): resume from a checkpoint "
                                 "zero.hf.Trainer saved (DeepSpeed's global_step folders are "
                                 "not read; start from the Hugging Face weights instead)")
        for name in ("model", "optimizer", "lr_scheduler"):
            setattr(self.callback_handler, name, getattr(self, name))
        self.callback_handler.train_dataloader = train_dataloader
        return engine, train_dataloader

    def _check_windows(self, batches: int, max_steps: int) -> None:
        """zero's accumulation window has a fixed length: an epoch whose micro-batches do not
        fill its last window is refused before training, if training reaches it."""
        steps = self.args.gradient_accumulation_steps
        if batches % steps == 0 or max_steps <= batches // steps:
            return
        raise ValueError(f"zero.hf.Trainer: an epoch is {batches} micro-batches on each rank, "
                         f"not a multiple of gradient_accumulation_steps={steps}, so its last "
                         "window would be short, and zero's window has a fixed length: set "
                         "dataloader_drop_last=True with a dataset of a multiple of "
                         f"{steps} * per_device_train_batch_size * ranks samples, or max_steps "
                         f"<= {batches // steps}")

    def _optimizer_and_schedule(self, config: dict[str, Any], max_steps: int
                                ) -> tuple[Any, Any, list[torch.nn.Parameter] | None]:
        """(optimizer, lr_scheduler, model_parameters) for zero.initialize, as the Trainer
        chooses them under DeepSpeed: the config's optimizer over every trainable parameter in
        one group, else the Trainer's (create_optimizer: its decay groups); the config's
        scheduler, else the Trainer's (create_scheduler) over the optimizer used."""
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        for section, given, argument in (("optimizer", self.optimizer, "optimizers[0]"),
                                         ("scheduler", self.lr_scheduler, "optimizers[1]")):
            if section in config and given is not None:
                raise ValueError(f"zero.hf.Trainer: a {section} both in the config and as "
                                 f"Trainer({argument}=...); keep one")
        if "optimizer" in config and "scheduler" in config:
            return None, None, trainable
        if "optimizer" in config:  # driven by the Trainer's scheduler: as a torch optimizer
            optimizer = _torch_optimizer(config.pop("optimizer"), trainable)
        else:
            optimizer = self.create_optimizer()
        schedule = None
        if "scheduler" not in config:
            schedule = self.create_scheduler(num_training_steps=max_steps, optimizer=optimizer)
        return optimizer, schedule, None

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any],
                      num_items_in_batch: torch.Tensor | int | None = None) -> torch.Tensor:
        """One micro-batch through zero's engine: the Trainer's loss (scaled for the window as
        it scales it for DeepSpeed), engine.backward and engine.step, which runs the optimizer
        at the window's end. Returns the loss, detached."""
        engine = self._zero_engine
        if engine is None or model is not engine:
            return super().training_step(model, inputs, num_items_in_batch)
        engine.train()
        inputs = self._prepare_inputs(inputs)
        with self.compute_loss_context_manager():
            loss = self.compute_loss(engine, inputs, num_items_in_batch=num_items_in_batch)
        del inputs
        scaled = self.loss_is_scaled_for_ga
        if scaled is None:
            scaled = (self.model_accepts_loss_kwargs and num_items_in_batch is not None) or (
                self.compute_loss_func is not None)
        if not scaled:
            loss = loss / self.current_gradient_accumulation_steps
        engine.set_gradient_accumulation_boundary(self.accelerator.sync_gradients)
        engine.backward(loss, scale_wrt_gas=False)
        if self.accelerator.sync_gradients and isinstance(self.lr_scheduler, _EngineSchedule):
            self.lr_scheduler.before_step()
        engine.step()
        return loss.detach()

    def _clip_grad_norm(self, model: torch.nn.Module) -> Any:
        """The engine clipped in its step (the config's gradient_clipping): its norm."""
        if self._zero_engine is None:
            return super()._clip_grad_norm(model)
        return self._zero_engine.get_global_grad_norm()

    def _get_grad_norm(self, model: torch.nn.Module, grad_norm: Any = None) -> Any:
        if self._zero_engine is None:
            return super()._get_grad_norm(model, grad_norm)
        return grad_norm if grad_norm is not None else self._zero_engine.get_global_grad_norm()

    def _wrap_model(self, model: torch.nn.Module, training: bool = True,
                    dataloader: Any = None) -> torch.nn.Module:
        """The engine once there is one (evaluation runs through it: at stage 3 the module's
        parameters are placeholders outside its forward); the model before."""
        if self._zero_engine is not None:
            return self._zero_engine
        return super()._wrap_model(model, training=training)

    # ---- checkpoints and the weights ----

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        """zero's checkpoint (the weights, the optimizer, the schedule; collective) under
        output_dir/global_stepN, as DeepSpeed's engine saves its own."""
        if self._zero_engine is None:
            return super()._save_optimizer_and_scheduler(output_dir)
        self._zero_engine.save_checkpoint(output_dir, tag=f"global_step{self.state.global_step}")

    def _load_from_checkpoint(self, resume_from_checkpoint: str,
                              model: torch.nn.Module | None = None) -> None:
        """Nothing here: the weights come back with zero's checkpoint, which the engine loads
        when training starts (_prepare_for_training)."""

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The trained model as a Hugging Face directory (config and safetensors, written by
        rank 0 through the engine's save_pretrained; collective: call it on every rank), with
        the processing class and the training arguments, as the Trainer saves them."""
        engine = self._zero_engine
        if engine is None:
            return super().save_model(output_dir, _internal_call)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        engine.save_pretrained(output_dir)
        if self.args.should_save:
            if self.processing_class is not None:
                self.processing_class.save_pretrained(output_dir)
            torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save", revision=self.args.hub_revision)


def _torch_optimizer(section: dict[str, Any],
                     parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The config's Adam or AdamW section as the torch optimizer zero.initialize translates
    back, so that the Trainer's scheduler (a torch scheduler) can drive it: the DeepSpeed
    Trainer's route for a config optimizer without a config scheduler."""
    kind = section.get("type", "")
    params = dict(section.get("params", {}))
    decoupled = kind.lower() == "adamw" or (kind.lower() == "adam" and
                                            params.pop("adam_w_mode", True))
    params.pop("torch_adam", None)
    if params.pop("bias_correction", True) is not True or kind.lower() not in ("adam", "adamw"):
        raise ValueError(f"zero.hf.Trainer: the config's optimizer is {kind} "
                         f"({section.get('params', {})}) and it has no scheduler section, so "
                         "the Trainer's scheduler would drive it: zero does that for Adam and "
                         "AdamW only; add a scheduler section (WarmupDecayLR, WarmupLR, "
                         "WarmupCosineLR) or drop the optimizer section to use the Trainer's")
    unknown = set(params) - {"lr", "betas", "eps", "weight_decay"}
    if unknown:
        raise ValueError(f"zero.hf.Trainer: the config's optimizer.params has {sorted(unknown)}, "
                         "which zero's Adam does not take")
    if "betas" in params:
        params["betas"] = tuple(params["betas"])
    made = torch.optim.AdamW if decoupled else torch.optim.Adam
    return made(parameters, **params)
