// zero-train: trains the reference models (models/gpt/, models/llama/) with the zero engine from a
// DeepSpeed-style config, on one rank or on many under zero-run (or mpirun, srun). See --help and
// the README.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "models/blas/openblas.h"
#include "tools/cli_checks.h"
#include "tools/zero-train/options.h"

int main(int argc, char** argv) {
  zero::train::TrainOptions o;
  CLI::App app{
      "zero-train: trains or fine-tunes a GPT-2 or a Llama-family model (Llama 2 and 3, Mistral, "
      "Qwen2) with the zero engine (ZeRO stages 0-3, CPU and NVMe offload) from a DeepSpeed-style "
      "JSON config. Run it on N ranks with `zero-run -n N -- zero-train ...`.\n\n"
      "Fine-tuning: --init DIR reads a Hugging Face model directory (config.json, and "
      "model.safetensors or model.safetensors.index.json with its shards; each rank reads only "
      "its ranges); without --model, config.json sets the shape. Checkpoints keep that "
      "config.json, and `zero-ckpt export CHECKPOINT --out DIR` writes a directory "
      "transformers loads.\n\n"
      "Every steps_per_print steps (a config key) rank 0 prints the step, loss (the mean over "
      "the global batch), learning rate, loss scale, gradient norm, tokens/s and step time; "
      "with wall_clock_breakdown also the forward / backward / engine step split (on a GPU the "
      "forward and backward timed by events on the model's stream; and the engine its "
      "reductions, gathers and optimizer). A step is queued whole and reported once the next "
      "step's first backward is queued: on a GPU the host never waits inside a step for its "
      "losses or its gradient norm. On a terminal a progress bar shows the ETA. The "
      "end prints a summary with the peak memory of each rank by tier and kind.\n\n"
      "Data: an llm.c token shard (uint16 or uint32 tokens after a 256-int32 header; "
      "tools/zero-tokenize makes them from text with a Hugging Face tokenizer.json) or UTF-8 "
      "text read as bytes (vocabulary 256, as the model 'tiny' has). The last --val-fraction is "
      "held out for validation. Step s takes the same sequences at any world size, and "
      "checkpoints keep the data position, so --resume continues where the run stopped.\n\n"
      "On a GPU the models run their CUDA layers in bf16 (the config's bf16 section must be "
      "on); the step lines add MFU: PaLM's FLOPs per token (6 N + 12 L H T) times tokens/s over "
      "the GPUs' dense bf16 peak.\n\n"
      "Activation checkpointing: on when the config has an activation_checkpointing section "
      "(number_checkpoints: how many blocks, from the first; all by default; cpu_checkpointing) "
      "or with --activation-checkpointing.\n\n"
      "Memory: before any of it is reserved, zero_init checks that the engine's state and the "
      "model's activations, workspaces and compute copies fit what the machine has free (host "
      "memory within the cgroup's limit, the GPU's, the disk under each nvme_path), and refuses "
      "a run that does not with the figures and the keys to lower. ZERO_MEMORY_CHECK=warn runs "
      "it anyway; =off skips the check.\n\n"
      "ZeRO++'s quantized communication (zero_optimization.zero_quantized_weights, "
      "zero_quantized_gradients) is approximate; with zero_quantized_error_check the step line "
      "and --metrics give each step's relative error of the quantized gathers (qwZ error) and "
      "reduce-scatter (qgZ error) against exact ones.",
      "zero-train"};
  app.get_formatter()->column_width(34);
  app.add_option("--config,--deepspeed_config", o.config, "the DeepSpeed-style JSON config")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option(
      "--model", o.model,
      "GPT-2: tiny (4 layers, 4 heads, 128 channels, 64 positions, vocabulary 256; the "
      "default without --init), gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b. Llama "
      "family: llama-tiny (4 layers, 4 heads over 2 key/value heads, 128 channels, MLP "
      "352, 64 positions, vocabulary 256), llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-2-13b, "
      "llama-3.1-70b, mistral-7b, qwen2.5-0.5b, qwen2.5-7b. Default: --init's "
      "config.json");
  app.add_option("--layers", o.layers, "custom: blocks (over --model's)");
  app.add_option("--heads", o.heads, "custom: attention heads");
  app.add_option("--kv-heads", o.kv_heads, "custom: key/value heads (Llama family)");
  app.add_option("--channels", o.channels, "custom: width");
  app.add_option("--intermediate", o.intermediate, "custom: the MLP's width (Llama family)");
  app.add_option("--positions", o.positions, "custom: the longest sequence");
  app.add_option("--vocab", o.vocab, "custom: vocabulary size");
  app.add_option("--data", o.data, "token shard or text file")->required();
  app.add_option("--data-format", o.data_format,
                 "auto: an llm.c token shard by its magic, else text, refusing a file that "
                 "looks like a damaged shard (a magic one byte off, or a name ending in .bin); "
                 "text: every file as text bytes")
      ->check(CLI::IsMember({"auto", "text"}))
      ->capture_default_str();
  app.add_option("--seq", o.seq, "positions per sequence (default: the model's, at most 1024)");
  app.add_option("--steps", o.steps,
                 "optimizer steps to reach (fills scheduler total_num_steps "
                 "when it is \"auto\")")
      ->required()
      ->check(zero::tools::at_least(1));
  app.add_option("--micro-batch", o.micro_batch,
                 "sequences per rank per micro-step (train_micro_batch_size_per_gpu)");
  app.add_option("--lr", o.lr,
                 "learning rate (optimizer.params.lr, and warmup_max_lr when \"auto\")");
  app.add_option("--set", o.sets,
                 "config override KEY=VALUE, e.g. zero_optimization.stage=2 "
                 "(repeatable; wins over the file and the flags)");
  app.add_option("--val-fraction", o.val_fraction, "share of the data held out for validation")
      ->capture_default_str()
      ->check(zero::tools::between(0.0, 0.5));
  app.add_option("--eval-every", o.eval_every, "validation loss every K steps (and at the end)")
      ->check(zero::tools::at_least(0));
  app.add_option("--eval-batches", o.eval_batches, "micro-batches per evaluation")
      ->capture_default_str()
      ->check(zero::tools::at_least(1));
  app.add_option("--save", o.save,
                 "checkpoint directory: saves at the end (and every --save-every)");
  app.add_option("--save-every", o.save_every, "save every K steps")
      ->check(zero::tools::at_least(0));
  app.add_option("--resume", o.resume,
                 "continue from a checkpoint directory (its latest tag) or tag");
  app.add_option("--init", o.init,
                 "start from Hugging Face weights: a model directory "
                 "(config.json and safetensors), or a safetensors file or index "
                 "JSON with --model");
  app.add_option("--seed", o.seed, "initial weights and stochastic rounding")
      ->capture_default_str();
  app.add_option("--metrics", o.metrics,
                 "JSON lines of every step, evaluation and the summary "
                 "(plot them with tools/plot-metrics)");
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "recompute every block's forward in backward, as if the config had an "
               "activation_checkpointing section");
  app.add_flag("!--no-progress", o.progress, "no progress bar, even on a terminal");
  app.add_option("--device", o.device,
                 "0 automatic (a GPU when this build has CUDA and the machine one: the CUDA "
                 "layers, bf16 configs only; else the CPU), 1 CPU, 2 CUDA")
      ->capture_default_str()
      ->check(zero::tools::between(0, 2));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // The CPU layers' BLAS chooses its kernels as it loads, through the environment: now, before
  // MPI and the engine start threads. A failure is reported where the CPU layers first need it
  // (a run on a GPU does not).
  try {
    zero::blas::load();
  } catch (const std::exception&) {
  }
  try {
    return zero::train::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero-train: %s\n", e.what());
    return 1;
  }
}
