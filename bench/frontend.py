"""One Hugging Face model trained by zero.initialize, deepspeed.initialize, FSDP2 or plain
PyTorch: tokens/s of one variant (bench/frontend.sh runs them side by side on CPU ranks;
scripts/gpu-check.sh's python check on one GPU).

    zero-run -n 2 -- python bench/frontend.py --framework zero --stage 2 --offload cpu
    python3 bench/frontend.py --device cuda --dtype bf16 --framework fsdp2 --offload cpu

--framework zero: zero.initialize (python/zero over libzero.so).
--framework deepspeed: deepspeed.initialize, torch.distributed from the launcher's Open MPI
    variables (gloo on CPU ranks, with DS_ACCELERATOR=cpu; NCCL on a GPU); DeepSpeedCPUAdam for
    the offloaded step.
--framework torch: plain PyTorch: torch.optim.AdamW (fused=False, foreach=True), DDP on gloo
    across ranks (NCCL on a GPU); --stage must be 0; bf16 through torch.autocast.
--framework fsdp2: torch.distributed.fsdp.fully_shard on every block and on the root, bf16
    through MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); --offload cpu adds
    CPUOffloadPolicy (the optimizer's step on the CPU, as zero's offload); --stage is ignored.
--device cuda puts the model and the batches on the GPU (torch's current stream; the timer
synchronizes); --dtype bf16 trains in bf16 with fp32 master weights in every framework.
The model: a GPT-2 of --layers x --hidden (random, seeded), fp32, --micro sequences of --seq
tokens per rank, AdamW. Prints one line: framework, stage, offload, ranks, tokens/s (all
ranks, mean over the steps after --warmup), seconds per step.
"""

import argparse
import json
import os
import time

import torch


def ds_config(args):
    config = {
        "train_micro_batch_size_per_gpu": args.micro,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": args.stage},
        "steps_per_print": 1000000,
    }
    if args.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    if args.offload == "cpu":  # pinned on a GPU, as FSDP2's CPUOffloadPolicy (pin_memory=True)
        config["zero_optimization"]["offload_optimizer"] = {
            "device": "cpu", "pin_memory": args.device.startswith("cuda")}
    return config


def model_of(args):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=args.vocab, n_positions=args.seq,
                                      n_embd=args.hidden, n_layer=args.layers,
                                      n_head=args.hidden // 64, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0))


def launcher():
    for rank, size in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("RANK", "WORLD_SIZE")):
        if rank in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def torch_distributed(rank, size, device):
    import torch.distributed as dist
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29641")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank,
                                world_size=size)


def fsdp2(model, args, rank, size, device):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    torch_distributed(rank, size, device)
    bf16 = args.dtype == "bf16"
    kwargs = {"mesh": init_device_mesh(device.type, (size,)),
              "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None,
                                                reduce_dtype=torch.float32 if bf16 else None)}
    if args.offload == "cpu":
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    for block in model.transformer.h:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=["zero", "deepspeed", "torch", "fsdp2"],
                        required=True)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU per rank)")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--stage", type=int, default=0)
    parser.add_argument("--offload", choices=["none", "cpu"], default="none")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    rank, size = launcher()
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA GPU")
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    model = model_of(args).to(device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                              enabled=args.framework == "torch" and args.dtype == "bf16")
    if args.framework == "zero":
        import zero
        engine, *_ = zero.initialize(model=model, config=ds_config(args))
        forward, backward, step = engine, engine.backward, engine.step
    elif args.framework == "deepspeed":
        import deepspeed
        torch_distributed(rank, size, device)
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                          config=ds_config(args))
        forward, backward, step = engine, engine.backward, engine.step
    else:
        if args.framework == "fsdp2":
            model = fsdp2(model, args, rank, size, device)
        elif args.stage != 0 or args.offload != "none":
            parser.error("--framework torch runs stage 0 without offload only")
        elif size > 1:
            torch_distributed(rank, size, device)
            model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                      foreach=True)

        def forward(ids, labels):
            with autocast:
                return model(ids, labels=labels)

        def backward(loss):
            loss.backward()

        def step():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    generator = torch.Generator().manual_seed(rank)
    times = []
    for i in range(args.warmup + args.steps):
        ids = torch.randint(0, args.vocab, (args.micro, args.seq), generator=generator)
        ids = ids.to(device)
        synchronize(device)
        start = time.perf_counter()
        loss = forward(ids, labels=ids).loss
        backward(loss)
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    seconds = sum(times[args.warmup:]) / args.steps
    tokens = args.micro * args.seq * size / seconds
    if rank == 0:
        print(json.dumps({"framework": args.framework, "stage": args.stage,
                          "offload": args.offload, "ranks": size, "device": device.type,
                          "dtype": args.dtype, "loss": round(loss.item(), 4),
                          "tokens_per_s": round(tokens), "seconds_per_step": round(seconds, 4),
                          "threads": torch.get_num_threads()}), flush=True)


if __name__ == "__main__":
    main()
