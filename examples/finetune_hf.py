"""Fine-tune a Hugging Face causal LM from a local directory on a text file, through zero.

    zero-run -n 2 -- python examples/finetune_hf.py --model ./my-model \
        --data data/fortunes.txt --deepspeed_config configs/stage2.json --out finetuned

The model directory needs its tokenizer (tokenizer.json or the files AutoTokenizer reads).
The text is tokenized whole, cut into --seq-token sequences (each rank reads its share through
the dataloader zero.initialize returns), and trained for --epochs or --steps optimizer steps with
the DeepSpeed config as it is. At the end rank 0 writes a Hugging Face directory of the result
(--out), loadable with from_pretrained; --checkpoint DIR also saves zero's checkpoint there.
This is the DeepSpeed script one would write, with `zero` where `deepspeed` was.
"""

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import zero


class Blocks(torch.utils.data.Dataset):
    """The token stream cut into sequences of `seq` tokens."""

    def __init__(self, ids, seq):
        count = len(ids) // seq
        self.blocks = torch.tensor(ids[:count * seq], dtype=torch.long).view(count, seq)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, index):
        return self.blocks[index]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a Hugging Face model directory")
    parser.add_argument("--data", required=True, help="a UTF-8 text file")
    parser.add_argument("--out", required=True, help="where to write the fine-tuned model")
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many optimizer "
                        "steps (0: run the epochs)")
    parser.add_argument("--checkpoint", help="also save zero's checkpoint here at the end")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--print-every", type=int, default=10)
    zero.add_config_arguments(parser)
    args = parser.parse_args()
    if not args.deepspeed_config:
        parser.error("--deepspeed_config is required (a DeepSpeed JSON config)")

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    text = open(args.data, encoding="utf-8").read()
    dataset = Blocks(tokenizer(text)["input_ids"], args.seq)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    if args.activation_checkpointing:
        model.gradient_checkpointing_enable()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    engine, _, dataloader, _ = zero.initialize(
        args=args, model=model, training_data=dataset,
        model_parameters=[{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
    rank0 = engine.global_rank == 0
    if rank0:
        print(f"finetune: {sum(p.numel() for p in model.parameters()):,} parameters, "
              f"{len(dataset)} sequences of {args.seq} tokens, {engine.world_size} ranks, "
              f"stage {engine.zero_optimization_stage()}, "
              f"{engine.train_batch_size()} sequences per step", flush=True)

    start, losses = time.time(), []
    first = last = float("nan")
    for epoch in range(args.epochs):
        dataloader.sampler.set_epoch(epoch)
        for batch in dataloader:
            loss = engine(input_ids=batch, labels=batch).loss
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
            if len(losses) % engine.gradient_accumulation_steps() == 0:
                step = engine.global_steps
                mean = engine.mean_across_ranks(
                    sum(losses[-engine.gradient_accumulation_steps():]) /
                    engine.gradient_accumulation_steps())
                if rank0 and (step % args.print_every == 0 or step == 1):
                    print(f"finetune: step {step} loss {mean:.4f} lr {engine.get_lr()[0]:.3g} "
                          f"grad norm {engine.get_global_grad_norm():.3f} "
                          f"({time.time() - start:.1f} s)", flush=True)
                if step == 1:
                    first = mean
                last = mean
                if args.steps and step >= args.steps:
                    break
        if args.steps and engine.global_steps >= args.steps:
            break

    if args.checkpoint:
        engine.save_checkpoint(args.checkpoint)
    engine.save_pretrained(args.out)
    if rank0:
        tokenizer.save_pretrained(args.out)
        print(f"finetune: {engine.global_steps} steps, loss {first:.4f} -> {last:.4f}; "
              f"wrote {args.out}", flush=True)
    engine.destroy()


if __name__ == "__main__":
    main()
