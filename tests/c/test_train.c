/* Compiled as C99 and linked against libzero.so alone: a model written in C trains through
 * zero.h. One rank, ZeRO stage 2, bf16, two modules: y = w * x + b fitted to a fixed target
 * with the mean squared error; the loss must fall by 100x in 200 steps, and the C API's usage
 * errors must come back as ZERO_ERROR_USAGE with a message. Exits non-zero on any failure.
 * The model reaches the engine's buffers through train_memory.h: directly on the CPU
 * (zero_c_train_test), by copies on the hooks' stream on GPU 0 (zero_c_train_gpu_test, which
 * exits 77 where there is no GPU). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "train_memory.h"
#include "zero/zero.h"

#define N 37

#define CHECK(call)                                                                             \
  do {                                                                                          \
    zero_status s_ = (call);                                                                    \
    if (s_ != ZERO_OK) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, zero_status_string(s_), zero_last_error()); \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)

static float bf16_to_float(unsigned short h) {
  unsigned int bits = (unsigned int)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static unsigned short float_to_bf16(float f) { /* round to nearest even, finite values */
  unsigned int bits;
  memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (unsigned short)(bits >> 16);
}

static void init_weight(void* user, int param, unsigned long long offset, unsigned long long count,
                        float* out) {
  unsigned long long i;
  (void)user;
  (void)param;
  for (i = 0; i < count; ++i) out[i] = 0.01f * (float)(offset + i);
}

static const char* kConfig =
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1,"
    " \"bf16\": {\"enabled\": true},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.05}},"
    " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 16}}";

static float target(int i) {
  return 1.0f + 0.5f * (float)sin(0.3 * i);
}

int main(void) {
  zero_engine* engine = NULL;
  zero_create_options options;
  int linear, bias_module, w, b, step, i;
  long long shape[1] = {N};
  zero_param_desc desc;
  double first_loss = -1, loss = 0;
  void* data;
  void* stream;
  const char* why = NULL;

  if (train_unavailable(&why)) {
    printf("SKIPPED: %s\n", why);
    return 77;
  }
  stream = train_stream();
  memset(&options, 0, sizeof options);
  options.device = ZERO_DEVICE_CPU;
  {
    /* Options zeroed without ZERO_CREATE_OPTIONS_INIT: size 0, refused naming the macro. */
    if (zero_create(kConfig, &options, &engine) != ZERO_ERROR_USAGE || engine != NULL ||
        strstr(zero_last_error(), "ZERO_CREATE_OPTIONS_INIT") == NULL) {
      fprintf(stderr, "options of size 0 were not refused naming the macro: %s\n",
              zero_last_error());
      return 1;
    }
  }
  {
    /* A newer header's options: a field past this library's struct set is refused; zero there
     * is fine (checked by the create below, made with an older header's size). */
    struct {
      zero_create_options known;
      int newer_field;
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.known.size = sizeof newer;
    newer.known.device = ZERO_DEVICE_CPU;
    newer.newer_field = 1;
    if (zero_create(kConfig, &newer.known, &engine) != ZERO_ERROR_USAGE || engine != NULL ||
        strstr(zero_last_error(), "newer zero.h") == NULL) {
      fprintf(stderr, "a newer header's field was not refused: %s\n", zero_last_error());
      return 1;
    }
  }
  options.size = sizeof options;
  {
    /* An embedder's NCCL communicator needs the CUDA device; two communicators are one too many.
     * Both are refused before either handle is touched (these are not real handles). */
    int fake = 0;
    options.nccl_comm = &fake;
    if (zero_create(kConfig, &options, &engine) != ZERO_ERROR_USAGE || engine != NULL ||
        strstr(zero_last_error(), "nccl_comm needs the CUDA device") == NULL) {
      fprintf(stderr, "nccl_comm on the CPU was not refused by name: %s\n", zero_last_error());
      return 1;
    }
    options.mpi_comm = &fake;
    if (zero_create(kConfig, &options, &engine) != ZERO_ERROR_USAGE ||
        strstr(zero_last_error(), "both set") == NULL) {
      fprintf(stderr, "mpi_comm and nccl_comm together were not refused: %s\n", zero_last_error());
      return 1;
    }
    options.nccl_comm = NULL;
    options.mpi_comm = NULL;
  }
  options.device = train_device();
  /* As a caller built with an older zero.h, whose struct ended before cpu_device, would pass:
   * the library reads that much and takes the default for the rest. */
  options.cpu_device = 99; /* past the caller's size: never read */
  options.size = offsetof(zero_create_options, cpu_device);
  CHECK(zero_create(kConfig, &options, &engine));
  {
    /* Host memory on the CPU; GPU 0's on CUDA, which the host reaches only by copies. */
    zero_memory_kind kind = ZERO_MEMORY_CUDA, want_kind = ZERO_MEMORY_HOST;
    int ordinal = 7, want_ordinal = -1;
    if (options.device == ZERO_DEVICE_CUDA) {
      want_kind = ZERO_MEMORY_CUDA;
      want_ordinal = 0;
    }
    CHECK(zero_data_location(engine, &kind, &ordinal));
    if (kind != want_kind || ordinal != want_ordinal) {
      fprintf(stderr, "zero_data_location: kind %d ordinal %d, expected %d and %d\n", (int)kind,
              ordinal, (int)want_kind, want_ordinal);
      return 1;
    }
    CHECK(zero_data_location(engine, NULL, NULL));
    if (zero_data_location(NULL, &kind, NULL) != ZERO_ERROR_USAGE) return 1;
  }
  CHECK(zero_add_module(engine, "linear", &linear));
  CHECK(zero_add_module(engine, "bias", &bias_module));

  memset(&desc, 0, sizeof desc);
  desc.name = "w";
  desc.shape = shape;
  desc.ndim = 1;
  desc.trainable = 1;
  desc.modules = &linear;
  desc.module_count = 1;
  desc.initializer = init_weight;
  CHECK(zero_add_param(engine, &desc, &w));
  desc.name = "b";
  desc.modules = &bias_module;
  desc.initializer = NULL;
  CHECK(zero_add_param(engine, &desc, &b));

  /* Usage errors: a bad index, and a hook before init. */
  if (zero_pre_forward(engine, 0, NULL) != ZERO_ERROR_USAGE ||
      strstr(zero_last_error(), "init") == NULL) {
    fprintf(stderr, "a hook before init was not a usage error naming init: %s\n",
            zero_last_error());
    return 1;
  }
  CHECK(zero_init(engine));
  if (zero_add_module(engine, "late", NULL) != ZERO_ERROR_USAGE) {
    fprintf(stderr, "registering after init was not a usage error\n");
    return 1;
  }
  if (zero_param_data(engine, 99, &data) != ZERO_ERROR_USAGE ||
      strstr(zero_last_error(), "99") == NULL) {
    fprintf(stderr, "a bad parameter index was not a usage error naming it: %s\n",
            zero_last_error());
    return 1;
  }
  if (zero_post_backward(engine, linear, NULL) != ZERO_ERROR_USAGE) {
    fprintf(stderr, "post_backward without pre_backward was not a usage error\n");
    return 1;
  }

  for (step = 0; step < 200; ++step) {
    /* x = 1 for every element: y_i = w_i + b_i; loss = mean (y - t)^2. */
    float y[N];
    double factor;
    unsigned short wv[N], bv[N], gw[N], gb[N];
    void *w_data, *b_data, *gw_buffer, *gb_buffer;
    zero_step_stats stats;
    CHECK(zero_pre_forward(engine, linear, stream));
    CHECK(zero_pre_forward(engine, bias_module, stream));
    CHECK(zero_param_data(engine, w, &w_data));
    CHECK(zero_param_data(engine, b, &b_data));
    if (train_to_host(wv, w_data, sizeof wv) || train_to_host(bv, b_data, sizeof bv)) return 1;
    loss = 0;
    for (i = 0; i < N; ++i) {
      y[i] = bf16_to_float(wv[i]) + bf16_to_float(bv[i]);
      loss += (y[i] - target(i)) * (y[i] - target(i)) / N;
    }
    CHECK(zero_post_forward(engine, bias_module, stream));
    CHECK(zero_post_forward(engine, linear, stream));
    if (first_loss < 0) first_loss = loss;

    CHECK(zero_loss_factor(engine, &factor));
    CHECK(zero_pre_backward(engine, bias_module, stream));
    CHECK(zero_grad_buffer(engine, b, &gb_buffer));
    if (train_to_host(gb, gb_buffer, sizeof gb)) return 1;
    for (i = 0; i < N; ++i) {
      float g = (float)(2.0 * (y[i] - target(i)) / N * factor);
      gb[i] = float_to_bf16(bf16_to_float(gb[i]) + g);
    }
    if (train_from_host(gb_buffer, gb, sizeof gb)) return 1;
    CHECK(zero_post_backward(engine, bias_module, stream));
    CHECK(zero_pre_backward(engine, linear, stream));
    CHECK(zero_grad_buffer(engine, w, &gw_buffer));
    if (train_to_host(gw, gw_buffer, sizeof gw)) return 1;
    for (i = 0; i < N; ++i) {
      float g = (float)(2.0 * (y[i] - target(i)) / N * factor);
      gw[i] = float_to_bf16(bf16_to_float(gw[i]) + g);
    }
    if (train_from_host(gw_buffer, gw, sizeof gw)) return 1;
    CHECK(zero_post_backward(engine, linear, stream));
    CHECK(zero_step(engine, &stats));
    if (!stats.stepped || stats.skipped || stats.global_steps != step + 1) {
      fprintf(stderr, "step %d: stepped %d skipped %d global_steps %lld\n", step, stats.stepped,
              stats.skipped, stats.global_steps);
      return 1;
    }
  }
  {
    unsigned long long live = 0, peak = 0;
    CHECK(zero_memory_bytes(engine, ZERO_TIER_DEVICE, ZERO_KIND_MASTER, &live, &peak));
    if (live != 2 * N * 4) {
      fprintf(stderr, "master bytes %llu, expected %d\n", live, 2 * N * 4);
      return 1;
    }
  }
  {
    /* What was reserved holds at least what is live, and NULL is refused. (A tier outside the
     * enum is refused too, but passing one is undefined in the C++ behind the call.) */
    unsigned long long reserved = 0, live = 0, total = 0;
    int kind;
    for (kind = ZERO_KIND_PARAM; kind <= ZERO_KIND_BUFFER; ++kind) {
      CHECK(zero_memory_bytes(engine, ZERO_TIER_DEVICE, (zero_kind)kind, &live, NULL));
      total += live;
    }
    CHECK(zero_memory_reserved(engine, ZERO_TIER_DEVICE, &reserved));
    if (reserved < total + 4096) {
      fprintf(stderr, "device reserved %llu, live %llu\n", reserved, total);
      return 1;
    }
    CHECK(zero_memory_reserved(engine, ZERO_TIER_NVME, &reserved));
    if (reserved != 0) {
      fprintf(stderr, "nvme reserved %llu without offload\n", reserved);
      return 1;
    }
    if (zero_memory_reserved(engine, ZERO_TIER_HOST, NULL) != ZERO_ERROR_USAGE) {
      fprintf(stderr, "zero_memory_reserved accepted NULL\n");
      return 1;
    }
  }
  {
    /* Resolved config values as JSON text: a value from the file, a default, a section, a
     * buffer too small, and a key nothing resolves. */
    char text[256];
    unsigned long long needed = 0;
    CHECK(zero_config_value(engine, "zero_optimization.stage", text, sizeof text, &needed));
    if (strcmp(text, "2") != 0 || needed != 2) {
      fprintf(stderr, "zero_optimization.stage gave '%s' (needed %llu)\n", text, needed);
      return 1;
    }
    CHECK(zero_config_value(engine, "steps_per_print", text, sizeof text, NULL));
    if (strcmp(text, "10") != 0) {
      fprintf(stderr, "steps_per_print gave '%s'\n", text);
      return 1;
    }
    CHECK(zero_config_value(engine, "optimizer.params", text, sizeof text, NULL));
    if (strstr(text, "\"lr\":0.05") == NULL || text[0] != '{') {
      fprintf(stderr, "optimizer.params gave '%s'\n", text);
      return 1;
    }
    CHECK(zero_config_value(engine, "bf16.enabled", text, 3, &needed));
    if (strcmp(text, "tr") != 0 || needed != 5) {
      fprintf(stderr, "bf16.enabled cut to 3 bytes gave '%s' (needed %llu)\n", text, needed);
      return 1;
    }
    if (zero_config_value(engine, "optimizer.params.l", text, sizeof text, NULL) !=
            ZERO_ERROR_USAGE ||
        strstr(zero_last_error(), "optimizer.params.l") == NULL) {
      fprintf(stderr, "an unknown key was not refused by name: %s\n", zero_last_error());
      return 1;
    }
  }
  CHECK(zero_destroy(engine));
  train_memory_release();
  printf("loss %.6f -> %.6f\n", first_loss, loss);
  if (!(loss < first_loss / 100)) {
    fprintf(stderr, "the loss did not fall 100x\n");
    return 1;
  }
  return 0;
}
