#!/usr/bin/env python3
"""One rank of bench/frontend_scale.sh's job (run under zero-run): the model built under
zero.zero.Init from a Hugging Face directory without its weights, loaded by shard through
zero.initialize, a few steps on data/fortunes.txt's bytes, an evaluation, and save_pretrained
by streaming in bf16 (the compute dtype: the weights the evaluation used). Rank 0 prints `RESULT {json}`: each step's loss and seconds, the
evaluation's loss and batch, the seconds of each phase, and every rank's peak resident memory
(ru_maxrss, gathered with mean_across_ranks' collective as one number a rank).

    zero-run -n 2 -- python bench/frontend_scale_job.py MODEL_DIR CONFIG OUT_DIR --steps 3 --seq 64
"""

import argparse
import json
import resource
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

import zero


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def batches(seq: int, vocab: int, rank: int, count: int) -> list[torch.Tensor]:
    """Token ids from data/fortunes.txt's bytes (the model's vocabulary is made up: any ids
    do), a different window for each rank and step."""
    data = Path(__file__).resolve().parent.parent / "data" / "fortunes.txt"
    raw = torch.tensor(list(data.read_bytes()[: (count * 4 + 4) * seq * 2]), dtype=torch.long)
    out = []
    for step in range(count):
        start = ((step * 2 + rank) * seq) % max(1, raw.numel() - seq)
        out.append((raw[start:start + seq] * 7919 % vocab).unsqueeze(0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("config", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()
    times = {}
    start = time.time()
    with zero.zero.Init():
        model = AutoModelForCausalLM.from_pretrained(args.model)
    engine, *_ = zero.initialize(model=model, config=str(args.config))
    times["initialize"] = time.time() - start
    rank = engine.global_rank
    vocab = model.config.vocab_size
    steps = []
    for ids in batches(args.seq, vocab, rank, args.steps):
        began = time.time()
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        steps.append({"loss": engine.mean_across_ranks(loss.detach().float()),
                      "seconds": time.time() - began})
    # The evaluation batch: the same on every rank, so that one process can repeat it.
    evaluation = batches(args.seq, vocab, 0, args.steps + 1)[-1]
    engine.eval()
    began = time.time()
    with torch.no_grad():
        eval_loss = float(engine(input_ids=evaluation, labels=evaluation).loss)
    times["evaluation"] = time.time() - began
    began = time.time()
    engine.save_pretrained(args.out, dtype=torch.bfloat16)
    times["save_pretrained"] = time.time() - began
    peaks = [0.0] * engine.world_size
    peaks[rank] = float(peak_bytes())
    peaks = engine.mean_across_ranks(*peaks)
    peaks = [p * engine.world_size for p in (peaks if isinstance(peaks, list) else [peaks])]
    report = engine.memory_report()
    engine.destroy()
    if rank == 0:
        print("RESULT " + json.dumps({
            "steps": steps, "eval_loss": eval_loss, "eval_ids": evaluation.tolist(),
            "times": times, "peak_bytes": peaks, "memory_report": report}), flush=True)


if __name__ == "__main__":
    main()
