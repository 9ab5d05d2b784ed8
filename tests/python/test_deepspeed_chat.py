"""DeepSpeed-Chat's step-1 supervised fine-tuning (deepspeed_examples/chat, its origin and every
change in ORIGIN.md), launched as DeepSpeed's launcher launches it and through zero-run
--as-deepspeed, the launcher line its only difference: on 2 CPU ranks in fp32, at ZeRO stages 2
and 3, every rank's loss at every step (the script's own --print_loss), its evaluation losses
and the model it saves (--output_dir) equal DeepSpeed's (DS_ACCELERATOR=cpu) within 1e-5
relative.

The data is the script's --data_path synthetic/rm-static (Dahoas/rm-static's shape, made from
the seed: nothing is downloaded), the model a seeded 2-layer OPT with a byte-level BPE tokenizer
trained on that data, both made here. One zero job a stage, 8 steps (32 training rows over 2
ranks of 2), each rank importing torch, transformers and zero: about 40 s of CPU a job.

DeepSpeed's side runs live where it needs no compiling (deepspeed_jobs.py: the FusedAdam the
script builds and init_distributed's shared-memory communicator built already, or
ZERO_TEST_DEEPSPEED_OPS=1, about 200 s of CPU on 2 cores, once). Elsewhere zero's run is
compared with DeepSpeed's recorded by this test (deepspeed_examples/chat/deepspeed_outcome.json:
the losses, and the saved tensors' norms; DeepSpeed 0.19.8, torch 2.15, transformers 5.24, CPU
ranks).
"""

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
import torch

from deepspeed_jobs import RANKS, Record, environment, not_live, run_job

CHAT = Path(__file__).resolve().with_name("deepspeed_examples") / "chat"
MISSING = [name for name in ("transformers", "tokenizers", "deepspeed")
           if importlib.util.find_spec(name) is None]
RELATIVE = 1e-5  # fp32 on both sides: the same sums, some in another order
STEPS = 8  # synthetic/rm-static's 32 training rows over 2 ranks of 2
SEED = 1234
LEARNING_RATE = 0.01  # large enough that every step's update shows in the next losses
# DeepSpeed's JIT-compiled CPU ops the script makes it build: the FusedAdam it builds, and
# init_distributed's shared-memory communicator (about 200 s of CPU on 2 cores, once)
DEEPSPEED_OPS = ("fused_adam", "deepspeed_shm_comm")
RECORD = CHAT / "deepspeed_outcome.json"
LOSS = re.compile(r"Epoch: (\d+), Step: (\d+), Rank: (\d+), loss = "
                  r"(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?|nan|inf)")
EVAL = re.compile(r"ppl: \S+, loss: (-?\d+(?:\.\d+)?(?:e[+-]?\d+)?|nan|inf)")


def make_model(folder: Path) -> None:
    """A seeded 2-layer OPTForCausalLM and a GPT-2 style tokenizer (OPT's: byte-level BPE,
    vocab.json and merges.txt) trained on the synthetic data, as a user's model directory.
    The vocabulary is a multiple of 8, so the script's resize_token_embeddings keeps it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import OPTConfig, OPTForCausalLM

    spec = importlib.util.spec_from_file_location(
        "chat_raw_datasets", CHAT / "dschat" / "utils" / "data" / "raw_datasets.py")
    raw_datasets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(raw_datasets)
    rows = [row for split in raw_datasets.synthetic_rm_static(SEED).values() for row in split]
    folder.mkdir(parents=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        [row["prompt"] + row["chosen"] + row["rejected"] for row in rows],
        trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                            special_tokens=["<|endoftext|>"], show_progress=False))
    tokenizer.model.save(str(folder))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "add_prefix_space": False}))
    torch.manual_seed(SEED)
    OPTForCausalLM(OPTConfig(
        vocab_size=8 * math.ceil(tokenizer.get_vocab_size() / 8), hidden_size=32,
        num_hidden_layers=2, ffn_dim=64, num_attention_heads=4, max_position_embeddings=64,
        word_embed_proj_dim=32, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )).save_pretrained(folder)


def script_args(model: Path, stage: int, out: Path) -> list[str]:
    """The script's own flags: tiny sizes, fp32, ZeRO `stage`, no offload, every step's loss."""
    return [str(CHAT / "main.py"), "--model_name_or_path", str(model),
            "--data_path", "synthetic/rm-static", "--data_split", "10,0,0",
            "--data_output_path", str(out / "data"), "--output_dir", str(out / "model"),
            "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4",
            "--max_seq_len", "32", "--learning_rate", str(LEARNING_RATE),
            "--weight_decay", "0.1", "--num_warmup_steps", "2", "--dropout", "0.0",
            "--dtype", "fp32", "--zero_stage", str(stage), "--seed", str(SEED), "--print_loss"]


def run(on: str, args: list[str], out: Path) -> str:
    """The script's job on zero or DeepSpeed (deepspeed_jobs.run_job); its output."""
    return run_job(on, args, out, environment(), timeout=600)


def outcome(text: str, out: Path) -> dict:
    """What a run gave: every rank's loss at each step (--print_loss's lines, which the ranks'
    output may run together), rank 0's evaluation losses (before and after the epoch), and
    the model it saved, each tensor's norms (for the record) and, live, the tensors."""
    steps = {(int(step), int(rank)): float(loss)
             for epoch, step, rank, loss in LOSS.findall(text)}
    every = {(step, rank) for step in range(STEPS) for rank in range(RANKS)}
    assert set(steps) == every, f"the losses printed are {sorted(steps)}:\n{text[-4000:]}"
    saved = torch.load(out / "model" / "pytorch_model.bin")
    return {**{f"rank{rank}": [steps[step, rank] for step in range(STEPS)]
               for rank in range(RANKS)},
            "eval": [float(loss) for loss in EVAL.findall(text)],
            "saved_norms": {name: [float(t.abs().sum()), float(t.norm())]
                            for name, t in saved.items()},
            "saved": saved}


def close(a: float, b: float, relative: float = RELATIVE) -> bool:
    return abs(a - b) <= relative * max(abs(a), abs(b))


def assert_same(what: str, ours: dict, theirs: dict) -> None:
    """Every rank's loss at every step and the evaluation losses within RELATIVE (listed side
    by side if not); the saved model's tensors (or, from the record, their norms) too."""
    for key in [f"rank{rank}" for rank in range(RANKS)] + ["eval"]:
        table = "\n".join(f"  {i}: zero {z!r:<20} DeepSpeed {d!r}"
                          for i, (z, d) in enumerate(zip(ours[key], theirs[key])))
        assert len(ours[key]) == len(theirs[key]) and all(
            close(z, d) for z, d in zip(ours[key], theirs[key])), f"{what}, {key}:\n{table}"
    assert sorted(ours["saved_norms"]) == sorted(theirs["saved_norms"]), what
    for name, norms in theirs["saved_norms"].items():
        got = ours["saved"][name]
        assert not got.isnan().any(), f"{what}: the saved {name} holds NaN"
        if name.endswith("k_proj.bias"):
            # A key's bias moves every score of a query alike, which softmax ignores: its
            # gradient is 0 up to rounding, which Adam's normalized step turns into moves of
            # either sign, as large on zero as on DeepSpeed, not equal.
            assert got.abs().max() <= 1e-3, (what, name, got)
            continue
        if "saved" in theirs:
            want = theirs["saved"][name]
            scale = float(want.abs().max())
            assert got.shape == want.shape and (got - want).abs().max() <= RELATIVE * scale, (
                f"{what}: saved {name} differs by {float((got - want).abs().max())} (its "
                f"largest value {scale})")
        assert all(close(a, b) for a, b in zip(ours["saved_norms"][name], norms)), (
            f"{what}: saved {name}'s norms {ours['saved_norms'][name]} on zero, {norms} on "
            "DeepSpeed")


def deepspeed_outcome(stage: int, model: Path, work: Path) -> dict:
    """DeepSpeed's outcome: live where DeepSpeed runs without compiling its ops
    (deepspeed_jobs.not_live), else the record's; a live run is checked against the record, or
    rewrites it."""
    name = f"stage {stage}"
    record = Record(RECORD)
    why_not = not_live(DEEPSPEED_OPS)
    if why_not:
        return record.recorded(name, why_not)
    out = work / "deepspeed"
    theirs = outcome(run("deepspeed", script_args(model, stage, out), out), out)
    kept = {key: value for key, value in theirs.items() if key != "saved"}
    record.after_live(name, kept, lambda what, recorded, live: assert_same(
        what, {**live, "saved": theirs["saved"]}, recorded))
    return theirs


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("deepspeed_chat") / "opt"
    make_model(folder)
    return folder


@pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} cannot be imported: the "
                    "script needs transformers, the test's tokenizer tokenizers, and "
                    "transformers' HfDeepSpeedConfig (stage 3) DeepSpeed's installed "
                    "distribution (the tests' venv has them)")
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_chat_step1_on_zero_equals_it_on_deepspeed(work: Path, model: Path,
                                                             stage: int) -> None:
    # zero's first: where it fails, DeepSpeed's run (the costlier) is not needed
    out = work / "zero"
    ours = outcome(run("zero", script_args(model, stage, out), out), out)
    theirs = deepspeed_outcome(stage, model, work)
    # The saved model: save_hf_format on rank 0, and at stage 3 save_zero_three_model's
    # gathered parameters over it (DeepSpeed-Chat's own way to save a ZeRO-3 model).
    assert_same(f"DeepSpeed-Chat step 1, stage {stage}", ours, theirs)
