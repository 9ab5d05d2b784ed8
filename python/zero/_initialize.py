"""zero.initialize: a PyTorch module onto zero, with deepspeed.initialize's arguments."""

from __future__ import annotations

import ctypes
import json
import os
import warnings
from pathlib import Path
from typing import Any, TYPE_CHECKING

import torch

from . import _library, _lifetime, _pretrained, _weightless
from ._library import ZeroError, call
from ._units import choose_units
from ._hooks import Param
from .engine import ZeroEngine
from .facades import LRSchedulerView, OptimizerView
from .moe.utils import has_moe_layers

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

    from torch.utils.data import DataLoader, Dataset

# Config keys that ask for something of PyTorch the front end does not do; zero's engine reads
# and checks every other key itself.
_FRONT_END_REFUSED = {
    "amp": "torch.cuda.amp / apex AMP (use the bf16 or fp16 sections: zero keeps the masters)",
    "torch_autocast": "torch.autocast inside the engine (use the bf16 or fp16 sections)",
    "compile": "torch.compile of the engine (compile the module before zero.initialize)",
    "sparse_gradients": "sparse gradients",
}

# Optimizer classes zero.initialize translates, by class name, and the hyperparameters it
# reads from their parameter groups (named as in DeepSpeed's config): torch.optim's, and
# DeepSpeed's (zero.ops' descriptions, or DeepSpeed's own objects, which hold the same
# attributes). Adagrad's lr_decay and initial_accumulator_value go to the config, which
# refuses values other than 0.
_ADAM_KEYS = ("lr", "betas", "eps", "weight_decay")
_DEEPSPEED_ADAM_KEYS = _ADAM_KEYS + ("bias_correction",)
_CLIENT_OPTIMIZERS = {
    "AdamW": ("AdamW", _ADAM_KEYS),
    "Adam": ("Adam", _ADAM_KEYS),
    "Adagrad": ("Adagrad", ("lr", "eps", "weight_decay", "lr_decay",
                            "initial_accumulator_value")),
    "SGD": ("SGD", ("lr", "momentum", "dampening", "weight_decay", "nesterov")),
    "FusedAdam": ("Adam", _DEEPSPEED_ADAM_KEYS),
    "DeepSpeedCPUAdam": ("Adam", _DEEPSPEED_ADAM_KEYS),
    "FusedLion": ("Lion", ("lr", "betas", "weight_decay")),
    "DeepSpeedCPULion": ("Lion", ("lr", "betas", "weight_decay")),
    "DeepSpeedCPUAdagrad": ("Adagrad", ("lr", "eps", "weight_decay")),
}
_CLIENT_NAMES = ("a torch.optim AdamW, Adam, Adagrad or SGD, or a zero.ops FusedAdam, "
                 "DeepSpeedCPUAdam, FusedLion, DeepSpeedCPULion or DeepSpeedCPUAdagrad")


def _adam_w_mode(optimizer: torch.optim.Optimizer, kind: str, first: dict[str, Any]) -> bool:
    """Whether an Adam-family optimizer decays weights decoupled (AdamW) rather than by L2:
    DeepSpeed's classes say so in their adam_w_mode attribute, torch's Adam in its
    decoupled_weight_decay group key (AdamW sets it)."""
    if kind in ("FusedAdam", "DeepSpeedCPUAdam"):
        return bool(getattr(optimizer, "adam_w_mode", True))
    return bool(first.get("decoupled_weight_decay", kind == "AdamW"))


def _read_config(args: Any, config: str | Path | dict[str, Any] | None,
                 config_params: str | Path | dict[str, Any] | None) -> dict[str, Any]:
    if config is not None and config_params is not None:
        raise ZeroError("zero.initialize: both config and config_params given; pass one")
    config = config if config is not None else config_params
    if config is None and args is not None:
        config = getattr(args, "deepspeed_config", None) or getattr(args, "zero_config", None)
    if config is None:
        raise ZeroError("zero.initialize: no config: pass config= (a path to a DeepSpeed JSON "
                        "file or a dict), or args with args.deepspeed_config")
    if isinstance(config, (str, os.PathLike)):
        config = read_config_file(config, "zero.initialize")
    if not isinstance(config, dict):
        raise ZeroError(f"zero.initialize: config must be a path or a dict, not "
                        f"{type(config).__name__}")
    config = json.loads(json.dumps(config))  # our own copy, JSON-clean
    micro, total = (config.get("train_micro_batch_size_per_gpu"),
                    config.get("train_batch_size"))
    if micro in (None, "auto") and total in (None, "auto"):
        said = '"auto"' if micro == "auto" else "not given"
        raise ZeroError(f"zero.initialize: train_micro_batch_size_per_gpu is {said}, and "
                        "train_batch_size does not supply it: set config["
                        "'train_micro_batch_size_per_gpu'] to your DataLoader's batch_size "
                        "before zero.initialize (the HF Trainer route fills it from "
                        "per_device_train_batch_size)", 1)
    for key, what in _FRONT_END_REFUSED.items():
        section = config.get(key)
        enabled = section.get("enabled", True) if isinstance(section, dict) else bool(section)
        if section is not None and enabled:
            raise ZeroError(f"zero.initialize: config key {key!r} asks for {what}, which the "
                            f"zero front end does not do; remove it", 1)
    return config


def read_config_file(path: str | os.PathLike[str], caller: str) -> Any:
    """A DeepSpeed JSON config file, read as zero-config and zero-train read it: comments
    allowed, a key given twice refused (json.loads would keep the last silently). `caller`
    begins the messages."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ZeroError(f"{caller}: cannot read the config {path}: {error.strerror}") from None
    return read_config_text(text, str(path), caller)


def read_config_text(text: str, source: str, caller: str) -> Any:
    """A DeepSpeed JSON config given as text, read as read_config_file reads a file's;
    `source` names it in the messages (a path, or where the text came from)."""
    try:
        return json.loads(_library.text_out("zero_read_config_text", text.encode(),
                                             source.encode()))
    except ZeroError as error:
        raise ZeroError(f"{caller}: {error}", error.status) from None


def _client_scheduler(lr_scheduler: Any, optimizer: Any) -> Any:
    """A torch LR scheduler given to initialize (or a callable that makes one from the
    optimizer, as DeepSpeed takes), checked: it must step the optimizer given with it. None for
    none, or for a config section given as a dict."""
    if lr_scheduler is None or isinstance(lr_scheduler, dict):
        return None
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ZeroError(f"zero.initialize: the {type(lr_scheduler).__name__} given sets the "
                        "learning rates of the optimizer it steps: pass that optimizer as "
                        "optimizer= too (zero reads its groups and follows their learning "
                        "rates), or describe the schedule in the config's scheduler section "
                        "(WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest)")
    if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
        lr_scheduler = lr_scheduler(optimizer)  # DeepSpeed: a callable given the optimizer
    if not hasattr(lr_scheduler, "step") or not hasattr(lr_scheduler, "state_dict"):
        raise ZeroError(f"zero.initialize: lr_scheduler is a {type(lr_scheduler).__name__}, "
                        "not a torch LR scheduler (step() and state_dict()), a callable that "
                        "makes one from the optimizer, or a config scheduler section (a dict)")
    if getattr(lr_scheduler, "optimizer", None) is not optimizer:
        raise ZeroError(f"zero.initialize: the {type(lr_scheduler).__name__} given steps "
                        "another optimizer than the one given; make it on that optimizer")
    return lr_scheduler


def _client_optimizer(optimizer: Any, config: dict[str, Any],
                      scheduled: bool = False) -> list[dict[str, Any]] | None:
    """An optimizer object given to initialize (torch.optim's or DeepSpeed's), as the config's
    optimizer section, and its parameter groups. `scheduled`: a torch LR scheduler steps it,
    so each group's lr is its initial_lr (the scheduler's base), not the value it has set."""
    if optimizer is None:
        return None
    if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
        raise ZeroError("zero.initialize: optimizer is a callable; zero runs its own fused "
                        "optimizers: describe it in the config's optimizer section")
    kind = type(optimizer).__name__
    if kind not in _CLIENT_OPTIMIZERS or not isinstance(optimizer, torch.optim.Optimizer):
        raise ZeroError(f"zero.initialize: zero has no optimizer {kind}; it runs AdamW, Adam, "
                        "Adagrad, Lion and SGD, named in the config's optimizer section (or "
                        f"passed as {_CLIENT_NAMES})")
    if "optimizer" in config:
        raise ZeroError("zero.initialize: an optimizer both in the config and as the optimizer "
                        "argument; keep one")
    name, keys = _CLIENT_OPTIMIZERS[kind]
    first = optimizer.param_groups[0]
    if first.get("amsgrad"):
        raise ZeroError(f"zero.initialize: {kind}(amsgrad=True): zero has no AMSGrad")
    if getattr(optimizer, "fp32_optimizer_states", True) is False:
        raise ZeroError(f"zero.initialize: {kind}(fp32_optimizer_states=False): zero keeps the "
                        "optimizer's moments in fp32 unless the config asks for bf16 ones; "
                        "pass fp32_optimizer_states=True and set the config's \"bf16\": "
                        "{\"enabled\": true, \"bf16_optimizer_states\": true} for bf16 moments")
    params = {k: (list(first[k]) if isinstance(first[k], tuple) else first[k])
              for k in keys if k in first}
    if scheduled and "lr" in params:
        params["lr"] = first.get("initial_lr", first["lr"])
    if name == "Adam":
        name = "AdamW" if _adam_w_mode(optimizer, kind, first) else "Adam"
        if name == "Adam":
            params["adam_w_mode"] = False  # L2 decay, as torch's Adam and adam_w_mode=False
    if first.get("maximize"):
        raise ZeroError(f"zero.initialize: {kind}(maximize=True): zero's optimizers minimise")
    config["optimizer"] = {"type": name, "params": params}
    groups = []
    for number, group in enumerate(optimizer.param_groups):
        for key, value in group.items():
            if key not in ("params", "lr", "weight_decay", "initial_lr") and value != first[key]:
                raise ZeroError(f"zero.initialize: the optimizer's parameter group {number} "
                                f"sets {key}={value!r}, group 0 {first[key]!r}; zero's groups "
                                "differ only in weight_decay and lr")
        kept = {k: group[k] for k in ("params", "lr", "weight_decay") if k in group}
        if scheduled and "initial_lr" in group:
            kept["lr"] = group["initial_lr"]
        groups.append(kept)
    return groups


def _groups(model: torch.nn.Module,
            model_parameters: Iterable[torch.Tensor | dict[str, Any]] | None, base_lr: float,
            base_decay: float) -> tuple[list[tuple[str, float, float]], dict[int, int]]:
    """(group specs, {id(param): group}): zero_add_group's arguments per extra group."""
    if model_parameters is None:
        return [], {id(p): 0 for p in model.parameters() if p.requires_grad}
    listed = list(model_parameters)
    if not listed:
        raise ZeroError("zero.initialize: model_parameters is empty")
    if all(isinstance(p, torch.Tensor) for p in listed):
        return [], {id(p): 0 for p in listed}
    specs, membership = [], {}
    for number, group in enumerate(listed):
        if not isinstance(group, dict) or "params" not in group:
            raise ZeroError(f"zero.initialize: model_parameters[{number}] is neither a tensor "
                            "nor a parameter group (a dict with 'params')")
        extra = set(group) - {"params", "weight_decay", "lr", "name", "initial_lr"}
        if extra:
            raise ZeroError(f"zero.initialize: parameter group {number} sets "
                            f"{sorted(extra)}; zero's groups take only weight_decay and lr "
                            "(as a scale of the schedule's)")
        decay = float(group.get("weight_decay", base_decay))
        if "lr" in group and not base_lr and float(group["lr"]) != 0.0:
            raise ZeroError(f"zero.initialize: parameter group {number} sets lr {group['lr']}, "
                            "but the config's optimizer.params.lr is 0, and zero's groups scale "
                            "the config's learning rate; set optimizer.params.lr and give each "
                            "group's lr beside it")
        scale = float(group["lr"]) / base_lr if "lr" in group and base_lr else 1.0
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        if decay == base_decay and scale == 1.0:
            index = 0
        else:
            specs.append((group.get("name") or f"group{number}", decay, scale))
            index = len(specs)
        for p in params:
            membership[id(p)] = index
    return specs, membership


def _device_of(model: torch.nn.Module) -> torch.device:
    if _weightless.has_meta(model):
        device = _weightless.device_for(model)
        if device is None:
            raise ZeroError("zero.initialize: the model's parameters are on the meta device and "
                            "on several others; build it on the meta device whole, or on one "
                            "device")
        return device
    devices = {p.device for p in model.parameters()}
    if len(devices) > 1:
        raise ZeroError(f"zero.initialize: the model's parameters are on several devices "
                        f"({sorted(str(d) for d in devices)}); put it on one (model.to(device))")
    if not devices:
        raise ZeroError("zero.initialize: the model has no parameters")
    device = devices.pop()
    if device.type not in ("cpu", "cuda"):
        raise ZeroError(f"zero.initialize: the model is on {device}; zero runs on the CPU and "
                        "on CUDA GPUs")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def initialize(args: Any = None, model: torch.nn.Module | None = None,
               optimizer: torch.optim.Optimizer | None = None,
               model_parameters: Iterable[torch.Tensor | dict[str, Any]] | None = None,
               training_data: Dataset | None = None,
               lr_scheduler: dict[str, Any] | None = None, distributed_port: int | None = None,
               mpu: Any = None, dist_init_required: bool | None = None,
               collate_fn: Callable[[list[Any]], Any] | None = None,
               config: str | Path | dict[str, Any] | None = None,
               config_params: str | Path | dict[str, Any] | None = None,
               block_classes: Collection[str | type] | None = None, cpu_device: int = 0,
               pretrained: str | os.PathLike[str] | None = None
               ) -> tuple[ZeroEngine, OptimizerView, DataLoader | None, LRSchedulerView | None]:
    """deepspeed.initialize's call on zero: returns (engine, optimizer, dataloader,
    lr_scheduler). Collective: every rank calls it with the same model. A model built on the
    meta device (zero.zero.Init, torch.device("meta")) takes its values from `pretrained` (a
    Hugging Face safetensors directory, each rank reading only what it keeps) or else from its
    own initialisation, a unit at a time (_weightless.py)."""
    if model is None or not isinstance(model, torch.nn.Module):
        raise ZeroError("zero.initialize: model must be a torch.nn.Module")
    for name, module in model.named_modules():
        if "_zero_engine" in module.__dict__:
            where = f"its submodule {name}" if name else "it"
            raise ZeroError(f"zero.initialize: {type(model).__name__}: {where} is trained by a "
                            "zero engine already (zero.initialize was called on it): its "
                            "parameters are views of that engine's memory, placeholders at stage "
                            "3. Destroy that engine first (engine.destroy(restore_module=True) "
                            "gives the module its weights back), or build a new model")
    if mpu is not None:
        raise ZeroError("zero.initialize: mpu (model parallelism) is not supported: zero is "
                        "data parallel only; pass mpu=None and train the model whole on each "
                        "rank (ZeRO stage 3 shards its parameters), or use DeepSpeed for "
                        "tensor or pipeline parallelism")
    has_experts, experts = has_moe_layers(model)
    if has_experts:
        raise ZeroError(f"zero.initialize: {type(model).__name__} holds DeepSpeed's MoE layer "
                        f"({experts} experts); zero has no mixture of experts (no expert "
                        "parallelism or expert groups): use dense layers, or train it with "
                        "DeepSpeed")
    if pretrained is None:  # from_pretrained inside zero.zero.Init remembered its directory
        pretrained = model.__dict__.get("_zero_pretrained")
    client_scheduler = _client_scheduler(lr_scheduler, optimizer)
    cfg = _read_config(args, config, config_params)
    if lr_scheduler is not None and "scheduler" in cfg:
        raise ZeroError("zero.initialize: a scheduler both in the config and as the "
                        "lr_scheduler argument; keep one")
    if isinstance(lr_scheduler, dict):
        cfg["scheduler"] = lr_scheduler
    client_groups = _client_optimizer(optimizer, cfg, scheduled=client_scheduler is not None)
    if client_groups is not None and model_parameters is None:
        model_parameters = client_groups

    device = _device_of(model)
    options = _library.CreateOptions()
    options.device = _library.DEVICE_CUDA if device.type == "cuda" else _library.DEVICE_CPU
    options.cpu_device = cpu_device
    options.optimizer_threads = int(os.environ.get("ZERO_OPTIMIZER_THREADS",
                                                   torch.get_num_threads()))
    handle = ctypes.c_void_p()
    call("zero_create", json.dumps(cfg).encode(), ctypes.byref(options), ctypes.byref(handle))
    try:
        engine, (params, membership, group_ids, specs) = _register(
            handle, model, cfg, model_parameters, block_classes, device, pretrained)
    except BaseException:
        _library.lib().zero_destroy(handle)
        raise
    # From here the engine owns the handle, its hooks and the model's views: a failure frees
    # them through it (the module keeps its weights), so that nothing is left for the exit's
    # teardown to destroy a second time and the model can be given to zero.initialize again.
    try:
        optimizer_view = OptimizerView(engine, params, membership, group_ids, specs)
        scheduler_view = LRSchedulerView(engine) if "scheduler" in cfg else client_scheduler
        if client_scheduler is not None:
            engine._client_scheduler = client_scheduler
            engine._follow_client_schedule()
        dataloader = None
        if training_data is not None:
            dataloader = _dataloader(engine, training_data, collate_fn)
    except BaseException:
        engine.destroy(restore_module=True)
        raise
    return engine, optimizer_view, dataloader, scheduler_view


def _config_number(handle: ctypes.c_void_p, key: str, default: float) -> float:
    try:
        return float(json.loads(_library.json_out("zero_config_value", handle, key)))
    except (ZeroError, TypeError, ValueError):
        return default


def _check_precision(handle: ctypes.c_void_p, model: torch.nn.Module) -> None:
    """A model in bf16 or fp16 under a config that trains in fp32: zero would make its
    parameters fp32 views without a word. Say which is meant."""
    compute = ctypes.c_int()
    call("zero_compute_dtype", handle, ctypes.byref(compute))
    if compute.value != _library.FP32:
        return
    half = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()
                   if p.dtype in (torch.float16, torch.bfloat16)})
    if half:
        raise ZeroError(f"zero.initialize: the model's parameters are {' and '.join(half)}, and "
                        "the config trains in fp32 (neither its bf16 nor its fp16 section is "
                        "enabled), so zero would make them fp32; enable the config's "
                        f"{half[0].replace('bfloat16', 'bf16').replace('float16', 'fp16')} "
                        "section to train in mixed precision (fp32 masters), or call "
                        "model.float() first to train in fp32", 1)


def _register(handle: ctypes.c_void_p, model: torch.nn.Module, cfg: dict[str, Any],
              model_parameters: Iterable[torch.Tensor | dict[str, Any]] | None,
              block_classes: Collection[str | type] | None, device: torch.device,
              pretrained: str | os.PathLike[str] | None = None
              ) -> tuple[ZeroEngine, tuple[list[Param], dict[int, int], list[int],
                                           list[tuple[str, float, float]]]]:
    """The model registered with the engine behind `handle` and the engine made over it (and
    held for the exit's teardown), with what the optimizer's view needs: the parameters, their
    groups' membership, the engine's group ids and the groups' specs."""
    _check_precision(handle, model)
    base_lr = _config_number(handle, "optimizer.params.lr", 0.0)
    base_decay = _config_number(handle, "optimizer.params.weight_decay", 0.0)
    specs, membership = _groups(model, model_parameters, base_lr, base_decay)
    # A model without its weights: placeholders in place of its meta parameters (the groups
    # named the meta ones).
    rehomed_params = _weightless.rehome(model, device)
    try:
        return _register_rehomed(handle, model, cfg, specs, membership, block_classes, device,
                                 pretrained, rehomed_params.renamed)
    except BaseException:
        rehomed_params.undo()  # the model as it was given: meta, not placeholders
        raise


def _register_rehomed(handle: ctypes.c_void_p, model: torch.nn.Module, cfg: dict[str, Any],
                      specs: list[tuple[str, float, float]], membership: dict[int, int],
                      block_classes: Collection[str | type] | None, device: torch.device,
                      pretrained: str | os.PathLike[str] | None,
                      renamed: dict[int, torch.nn.Parameter]
                      ) -> tuple[ZeroEngine, tuple[list[Param], dict[int, int], list[int],
                                                   list[tuple[str, float, float]]]]:
    """_register's rest, once the meta parameters have placeholders (`renamed`)."""
    if renamed:
        membership = {id(renamed[key]) if key in renamed else key: group
                      for key, group in membership.items()}
    rehomed = {id(p) for p in renamed.values()}
    group_ids = [0]
    for name, decay, scale in specs:
        group = ctypes.c_int()
        call("zero_add_group", handle, name.encode(), decay, scale, ctypes.byref(group))
        group_ids.append(group.value)

    units = choose_units(model, block_classes)
    for unit in units:
        index = ctypes.c_int()
        call("zero_add_module", handle, unit.name.encode(), ctypes.byref(index))

    named = list(model.named_parameters())
    params = []
    unlisted = []
    for index, (name, param) in enumerate(named):
        trainable = param.requires_grad and id(param) in membership
        if param.requires_grad and not trainable:
            unlisted.append(name)
            param.requires_grad_(False)
        params.append(Param(index, name, param, trainable))
    if unlisted:
        warnings.warn(f"zero: {len(unlisted)} parameters that require grad are not in "
                      f"model_parameters (first: {unlisted[0]}); they are frozen", stacklevel=3)
    for unit in units:
        for i in unit.params:
            params[i].units.append(unit.index)

    rank = ctypes.c_int()
    call("zero_rank", handle, ctypes.byref(rank))
    keep = []  # the initial values and descriptors, alive until zero_init
    for p in params:
        if not p.units:
            raise ZeroError(f"zero.initialize: parameter {p.name} belongs to no module")
        shape = (ctypes.c_longlong * max(len(p.shape), 1))(*p.shape)
        modules = (ctypes.c_int * len(p.units))(*p.units)
        desc = _library.ParamDesc()
        desc.name = p.name.encode()
        desc.shape = shape
        desc.ndim = len(p.shape)
        desc.trainable = int(p.trainable)
        desc.group = group_ids[membership.get(id(p.param), 0)] if p.trainable else 0
        desc.modules = modules
        desc.module_count = len(p.units)
        if rank.value == 0 and p.param.numel() and id(p.param) not in rehomed:
            values = p.param.detach().to("cpu", torch.float32).contiguous()
            desc.initial = ctypes.cast(values.data_ptr(), ctypes.POINTER(ctypes.c_float))
            keep.append(values)
        keep.append((shape, modules, desc))
        out = ctypes.c_int()
        call("zero_add_param", handle, ctypes.byref(desc), ctypes.byref(out))
    call("zero_init", handle)
    del keep
    unfilled = _weightless.materialize_buffers(model, device)
    loaded: set[str] = set()
    wanted = [p for p in params if id(p.param) in rehomed]
    if pretrained is not None:
        missing, loaded = _pretrained.load(handle, model, params, pretrained)
        wanted = [p for p in missing if id(p.param) in rehomed]
    _weightless.check_buffers_filled(unfilled, loaded)
    _weightless.initialize(handle, model, units, params, wanted)
    _broadcast_buffers(handle, model)

    stage = int(_config_number(handle, "zero_optimization.stage", 0))
    engine = ZeroEngine(handle, model, cfg, units, params, stage, device)
    engine._lr_scales = tuple([1.0] + [scale for _, _, scale in specs])
    _lifetime.register(engine)
    return engine, (params, membership, group_ids, specs)


def _broadcast_buffers(handle: ctypes.c_void_p, model: torch.nn.Module) -> None:
    """Every buffer of the module (BatchNorm's statistics, masks, caches) set to rank 0's, in
    one collective, as DeepSpeed broadcasts them: zero owns only the parameters, and ranks whose
    scripts drew different buffers would otherwise train different models."""
    buffers = [b for b in model.buffers() if b is not None and b.numel()]
    if not buffers:
        return
    host = [b.detach().to("cpu").contiguous().view(-1).view(torch.uint8) for b in buffers]
    blob = torch.cat(host)
    call("zero_broadcast", handle, ctypes.c_void_p(blob.data_ptr()), blob.numel(), 0)
    offset = 0
    with torch.no_grad():
        for buffer, raw in zip(buffers, host):
            part = blob[offset:offset + raw.numel()]
            offset += raw.numel()
            buffer.copy_(part.clone().view(buffer.dtype).view(buffer.shape))


def _dataloader(engine: ZeroEngine, data: Dataset,
                collate_fn: Callable[[list[Any]], Any] | None) -> DataLoader:
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=engine.world_size, rank=engine.global_rank, shuffle=True)
    return torch.utils.data.DataLoader(data, batch_size=engine.train_micro_batch_size_per_gpu(),
                                       sampler=sampler, collate_fn=collate_fn, drop_last=True)
