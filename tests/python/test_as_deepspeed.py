"""`zero-run --as-deepspeed`: a script written for DeepSpeed, unchanged, trains on zero. Its
`import deepspeed` and DeepSpeed's submodules resolve to zero's (python/as-deepspeed,
zero/_as_deepspeed.py), rank 0 says which DeepSpeed it is and which installed one it leaves
unused, a submodule zero has no counterpart for fails to import naming what there is, and the
script's losses are those of the same training through zero.initialize. Each script runs in a
process of its own (the `deepspeed` it imports must not be this process's).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import zero
from zero_checks import config

LIBRARY = Path(os.environ["ZERO_LIBRARY"]).resolve()
ZERO_RUN = LIBRARY.parent.parent / "tools" / "zero-run" / "zero-run"

# A training script as DeepSpeed's examples write one: DeepSpeed's imports, its argument
# parser with --local_rank and the config arguments, deepspeed.initialize(args=...).
SCRIPT = textwrap.dedent("""
    import argparse, json, sys
    import torch
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.adam import FusedAdam
    import deepspeed.comm as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = FusedAdam(model.parameters(), lr=1e-2, weight_decay=0.01)
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, optimizer=optimizer)
    assert isinstance(engine, deepspeed.DeepSpeedEngine)
    generator = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(6):
        x = torch.randn(2, 6, generator=generator)
        loss = engine(x).pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    print("RESULT", json.dumps({"losses": losses, "local_rank": args.local_rank,
                                "device": get_accelerator().device_name(),
                                "rank": dist.get_rank()}))
""")


def environment(tmp_path: Path, with_shim: bool = False) -> dict[str, str]:
    """This process's environment with the package on PYTHONPATH (and the shim first)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", ZERO_LIBRARY=str(LIBRARY))
    env.pop("ZERO_AS_DEEPSPEED", None)
    paths = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if with_shim:
        paths.insert(0, str(ZERO_RUN.parent / "as-deepspeed"))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=environment(tmp_path, True),
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_an_unchanged_deepspeed_script_trains_as_zero_initialize_does(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cfg = config(0, train_micro_batch_size_per_gpu=2)
    del cfg["optimizer"]  # the script passes its FusedAdam
    (tmp_path / "ds_config.json").write_text(json.dumps(cfg))
    run = subprocess.run([str(ZERO_RUN), "--as-deepspeed", "-n", "1", "--", sys.executable,
                          str(script), "--deepspeed_config", "ds_config.json"],
                         env=environment(tmp_path), capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.split("RESULT ", 1)[1])
    assert result["local_rank"] == 0, "zero-run passes --local_rank as DeepSpeed's launcher does"
    assert result["device"] == "cpu" and result["rank"] == 0
    assert "zero: `import deepspeed` is zero" in run.stderr
    assert "(zero-run --as-deepspeed)" in run.stderr

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    engine, *_ = zero.initialize(model=model, optimizer=optimizer, config=cfg)
    generator = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(6):
        loss = engine(torch.randn(2, 6, generator=generator)).pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    engine.destroy()
    assert result["losses"] == losses, (result["losses"], losses)


def test_deepspeeds_names_are_zeros(tmp_path: Path) -> None:
    run = python(textwrap.dedent("""
        import deepspeed, zero
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer
        from deepspeed.runtime.activation_checkpointing import checkpointing
        import deepspeed.checkpointing, deepspeed.pipe, deepspeed.utils
        assert deepspeed.initialize is zero.initialize
        assert deepspeed.init_distributed is zero.init_distributed
        assert deepspeed.comm is zero.comm and deepspeed.ops.adam is zero.ops.adam
        assert checkpointing is zero.checkpointing is deepspeed.checkpointing
        assert deepspeed.zero.register_external_parameter is zero.register_external_parameter
        assert deepspeed.zero.GatheredParameters is zero.zero.GatheredParameters
        assert deepspeed.utils.logger is zero.utils.logger
        print(deepspeed.__version__, deepspeed.__zero_version__ == zero.__version__)
    """), tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0.19.8", "True"]
    # Put on PYTHONPATH by hand rather than by zero-run, it says so; and names what it shadows.
    assert "is on PYTHONPATH" in run.stderr
    assert ("is installed and not used" in run.stderr or
            "no DeepSpeed is installed beside it" in run.stderr), run.stderr


# What zero has no counterpart for, each with the words its error must have.
REFUSALS = {
    "runtime.engine": ("import deepspeed.runtime.engine",
                       ["ModuleNotFoundError", "deepspeed.runtime.engine: zero", "no counterpart",
                        "deepspeed.comm", "deepspeed.runtime.zero.partition_parameters"]),
    "inference": ("import deepspeed.inference", ["ModuleNotFoundError", "deepspeed.inference"]),
    "Init(module)": ("deepspeed.zero.Init(module=torch.nn.Linear(2, 2))",
                     ["ZeroError", "zero.initialize"]),
    "init_inference": ("deepspeed.init_inference(None)", ["ZeroError", "init_inference"]),
}


def test_what_zero_has_no_counterpart_for_is_named(tmp_path: Path) -> None:
    """Each statement in one process: the error it raises, by type and message; and a
    script's `try: import X except ImportError:` takes its fallback."""
    run = python(textwrap.dedent(f"""
        import json
        import torch
        import deepspeed
        cases = {json.dumps({name: statement for name, (statement, _) in REFUSALS.items()})}
        errors = {{}}
        for name, statement in cases.items():
            try:
                exec(statement)
                errors[name] = "no error"
            except Exception as error:
                errors[name] = type(error).__name__ + ": " + str(error)
        try:
            from deepspeed.runtime.engine import DeepSpeedEngine
            errors["fallback"] = "imported"
        except ImportError:
            errors["fallback"] = "fallback"
        # what DeepSpeed-Chat and transformers import from deepspeed.runtime.zero and
        # deepspeed.compression, and the same objects under deepspeed.zero
        from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus, Init
        from deepspeed.compression.helper import recursive_getattr, recursive_setattr
        import deepspeed.runtime.zero.partition_parameters as pp
        assert pp.ZeroParamStatus is deepspeed.zero.ZeroParamStatus is ZeroParamStatus
        assert deepspeed.runtime.zero.GatheredParameters is deepspeed.zero.GatheredParameters
        assert pp._orig_torch_arange is torch.arange
        with deepspeed.zero.Init(config_dict_or_path={{}}):
            model = torch.nn.Sequential(torch.nn.Linear(2, 3))
        recursive_setattr(model, "0", torch.nn.Linear(2, 4))
        assert recursive_getattr(model, "0.weight").shape == (4, 2)
        print("RESULT", json.dumps(errors))
    """), tmp_path)
    assert run.returncode == 0, run.stderr
    errors = json.loads(run.stdout.split("RESULT ", 1)[1])
    for name, (_, words) in REFUSALS.items():
        missing = [w for w in words if w not in errors[name]]
        assert not missing, f"{name}: the error lacks {missing}: {errors[name]}"
    assert errors["fallback"] == "fallback", "an optional import must fail as ImportError does"
