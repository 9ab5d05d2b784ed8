"""One rank of test_hf_trainer.py's job: the same Hugging Face Trainer fine-tune of a tiny Llama,
through DeepSpeed (transformers.Trainer, launched by torch.distributed.run with
DS_ACCELERATOR=cpu) or through zero (zero.hf.Trainer, launched by zero-run), the script
otherwise the same:

    python hf_trainer_job.py deepspeed|zero OUT_DIR

For each case (ZeRO stage 2 with the config's AdamW and WarmupDecayLR, stage 3 with the
Trainer's own AdamW and linear warmup), all "auto" in the config: a straight run of 8 steps
that checkpoints at step 4, a run resumed from that checkpoint, its evaluation, its model saved
as a Hugging Face directory and that directory's evaluation loss through from_pretrained.
Prints `RESULT {json}` on rank 0.
"""

import json
import os
import sys

import torch

BACKEND, OUT = sys.argv[1], sys.argv[2]

if BACKEND == "deepspeed":
    import importlib

    from transformers import Trainer, TrainingArguments

    # DeepSpeed's CPU backend JIT-compiles its shared-memory allreduce at init_distributed
    # (a minute or more of CPU on a fresh machine); gloo's allreduce of two ranks gives the same
    # sums. (The module by its name: the attribute deepspeed.comm.torch is torch itself.)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
else:
    from zero.hf import Trainer, TrainingArguments, fill_auto
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

STEPS = 8
# The config as a DeepSpeed user writes it for the Trainer: every value the arguments decide is
# "auto". train_batch_size is left out: transformers 5.24 fills its "auto" before the ranks are
# set up (world size 1), and DeepSpeed then refuses it on 2 ranks (zero.hf fills it right).
BASE = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}
SECTIONS = {
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                               "weight_decay": "auto", "torch_adam": True}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                             "warmup_num_steps": "auto", "total_num_steps": "auto",
                             "warmup_type": "linear"}},
}
# Each case: its config, and the TrainingArguments class zero's side builds (DeepSpeed's side
# builds transformers' always): transformers' own, deepspeed= included, as a DeepSpeed user's
# script has it, or zero.hf's, which keeps transformers' DeepSpeed integration from starting.
CASES = {
    "stage2-config-optimizer": ({**BASE, **SECTIONS, "zero_optimization": {"stage": 2}},
                                transformers.TrainingArguments),
    "stage3-trainer-optimizer": ({**BASE, "zero_optimization": {
        "stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}, TrainingArguments),
}

generator = torch.Generator().manual_seed(7)
TRAIN = [{"input_ids": row, "labels": row}
         for row in torch.randint(1, 103, (8 * STEPS, 16), generator=generator)]
EVALUATION = [{"input_ids": row, "labels": row}
              for row in torch.randint(1, 103, (8, 16), generator=generator)]


def arguments(folder, config, kind, use_cpu=True):
    return kind(
        output_dir=folder, deepspeed=config, use_cpu=use_cpu, seed=11, report_to=[],
        per_device_train_batch_size=2, per_device_eval_batch_size=2,
        gradient_accumulation_steps=2, learning_rate=3e-3, weight_decay=0.01,
        lr_scheduler_type="linear", warmup_steps=2, max_grad_norm=1.0, num_train_epochs=1,
        logging_steps=1, save_strategy="steps", save_steps=STEPS // 2, disable_tqdm=True)


def tiny_llama():
    """A seeded 2-layer Llama, the same on every rank (built here rather than loaded: the test's
    own process then need not import transformers' models, 13 s of CPU)."""
    torch.manual_seed(4321)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=103, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0))


def trainer(folder, config, kind):
    model = tiny_llama()
    return Trainer(model=model, args=arguments(folder, config, kind), train_dataset=TRAIN,
                   eval_dataset=EVALUATION)


def logged(state, after=0):
    """The steps logged after step `after` (a resumed run's history begins with the
    checkpoint's)."""
    return [{key: entry[key] for key in ("step", "loss", "grad_norm", "learning_rate")}
            for entry in state.log_history if "loss" in entry and entry["step"] > after]


def evaluation_loss(folder):
    """The Trainer's eval_loss recomputed from a saved directory: the mean of the per-batch
    mean losses over the evaluation set in batches of 2 (all batches the same size)."""
    if BACKEND == "deepspeed":  # not under DeepSpeed's zero.Init, on this rank alone
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config
        unset_hf_deepspeed_config()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    losses = []
    with torch.no_grad():
        for start in range(0, len(EVALUATION), 2):
            ids = torch.stack([item["input_ids"] for item in EVALUATION[start:start + 2]])
            losses.append(float(model(input_ids=ids, labels=ids).loss))
    return sum(losses) / len(losses)


def refusals(args, config):
    """What zero.hf refuses, each refusal's message: a config value that differs from its
    argument, and (last: it leaves Accelerate's state one process a rank) CPU ranks without
    use_cpu=True, where each rank would read the whole dataset."""
    said = {}
    try:
        fill_auto({"gradient_accumulation_steps": 4}, args, 2)
    except ValueError as error:
        said["mismatch"] = str(error)
    plain = arguments(f"{OUT}/one-process", config, TrainingArguments, use_cpu=False)
    try:
        Trainer(model=tiny_llama(), args=plain, train_dataset=TRAIN).train()
    except ValueError as error:
        said["one_process"] = str(error)
    return said


def main():
    results = {}
    for name, (config, kind) in CASES.items():
        straight = trainer(f"{OUT}/{name}/straight", config, kind)
        straight.train()
        resumed = trainer(f"{OUT}/{name}/resumed", config, kind)
        resumed.train(resume_from_checkpoint=f"{OUT}/{name}/straight/checkpoint-{STEPS // 2}")
        evaluated = resumed.evaluate()["eval_loss"]
        resumed.save_model(f"{OUT}/{name}/final")
        results[name] = {"straight": logged(straight.state),
                         "resumed": logged(resumed.state, STEPS // 2), "eval_loss": evaluated}
        if resumed.args.process_index == 0:
            results[name]["saved_eval_loss"] = evaluation_loss(f"{OUT}/{name}/final")
    if BACKEND == "zero":
        results["refusals"] = refusals(resumed.args, config)
    if int(os.environ.get("RANK", "0")) == 0:
        print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
