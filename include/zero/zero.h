/*
 * zero.h - the public C API of zero, a ZeRO data-parallel training engine.
 *
 * This is the only header a program embedding zero needs. It is C99 and self-contained.
 *
 * Conventions
 *   - Every function returns a zero_status (or a value that cannot fail). ZERO_OK is 0.
 *   - On failure, zero_last_error() returns a message saying what failed, where, and what to
 *     do about it. The message is per thread and stays valid until the next failing call on
 *     that thread.
 *   - No C++ exception, exit() or abort() crosses this boundary.
 *   - Handles are opaque pointers; each is created and destroyed by the functions named for it.
 *
 * Versioning: ZERO_VERSION_{MAJOR,MINOR,PATCH} give the header's version and zero_version()
 * the library's; a program may compare the two.
 */
#ifndef ZERO_ZERO_H
#define ZERO_ZERO_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ZERO_API __attribute__((visibility("default")))
#else
#define ZERO_API
#endif

#define ZERO_VERSION_MAJOR 0
#define ZERO_VERSION_MINOR 1
#define ZERO_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define ZERO_VERSION_CODE \
  (ZERO_VERSION_MAJOR * 10000 + ZERO_VERSION_MINOR * 100 + ZERO_VERSION_PATCH)

/* Status codes. Each failure category of the library maps to one code. */
typedef enum zero_status {
  ZERO_OK = 0,
  ZERO_ERROR_CONFIG = 1,        /* a config key, value or combination is invalid */
  ZERO_ERROR_USAGE = 2,         /* an API contract was broken: bad argument, wrong call order */
  ZERO_ERROR_COMM = 3,          /* a collective or the communicator failed */
  ZERO_ERROR_TIMEOUT = 4,       /* an operation did not complete within its timeout */
  ZERO_ERROR_IO = 5,            /* a file or disk operation failed */
  ZERO_ERROR_DEVICE = 6,        /* the accelerator runtime failed, or no usable device */
  ZERO_ERROR_OUT_OF_MEMORY = 7, /* an arena, the device or the host ran out of memory */
  ZERO_ERROR_INTERNAL = 8       /* a bug in zero: please report it with the message */
} zero_status;

/* A short, static, human-readable name of a status ("config error", ...). Never NULL;
 * unknown values give "unknown status". */
ZERO_API const char* zero_status_string(zero_status status);

/* The message of the last failing call on this thread, or "" when none has failed. Never
 * NULL. Valid until the next failing call on the same thread. */
ZERO_API const char* zero_last_error(void);

/* The library's version, "MAJOR.MINOR.PATCH". Never NULL. */
ZERO_API const char* zero_version(void);

/* The library's version as ZERO_VERSION_CODE computes it. */
ZERO_API int zero_version_code(void);

/* ---------------------------------------------------------------------------------------
 * The engine
 *
 * A zero_engine is one rank's share of a ZeRO data-parallel run. Its life:
 *
 *   zero_create / zero_create_from_file        config, device and communicator
 *   zero_add_group, zero_add_module,           the model's parameter groups, its modules in
 *   zero_add_param                              forward order, and its parameters
 *   zero_init                                   layout, allocation, initial values
 *   per micro-batch:
 *     zero_pre_forward(m) ... zero_post_forward(m)       for each module, in forward order
 *     multiply the mean loss by zero_loss_factor()
 *     zero_pre_backward(m) ... zero_post_backward(m)     for each module, in reverse order
 *     zero_step                                           every micro-batch (DeepSpeed's
 *                                                         engine.step()); the optimizer runs at
 *                                                         the accumulation boundary
 *   zero_destroy
 *
 * Collective order. zero_init, the four hooks, zero_step, zero_read_param and zero_destroy
 * are collective over the engine's communicator: every rank calls them in the same order with
 * the same module and parameter indices. A module whose hooks one rank skips must be skipped by
 * all of them in that micro-step. The registration calls are local, but every rank must make
 * the same ones in the same order (zero_init checks, and names the first difference).
 *
 * Thread safety. An engine is driven by one thread at a time. Different engines are
 * independent. zero_last_error() is per thread.
 *
 * Streams. The hooks take the caller's stream: a cudaStream_t of the engine's GPU, or NULL for
 * the legacy default stream; on the CPU always NULL, the calling thread. A hook's work is
 * ordered after the caller's work already queued on that stream (a post_backward's reductions
 * read the gradients the caller wrote), and the caller's later work there is ordered after
 * what the hook provides (a pre hook's gathered parameters, pre_backward's zeroed gradient
 * buffers): through events, without the host waiting, except on the CPU, where the calling
 * thread waits for them before the hook returns. The engine's reductions and gathers run on
 * the communicator's own stream (NCCL) or thread (MPI), overlapping the caller's compute, and
 * what follows a reduction (the add into the owned gradient shard, or with optimizer offload
 * the copy of the reduced block to the CPU and the add there) on a stream of the engine's
 * own, so the caller's stream never waits for a reduction. wall_clock_breakdown logs how much
 * of each ran concurrently with the caller's compute, from the streams' timing events.
 * zero_step is ordered after the stream of the latest hook and returns with the step done.
 * Use one stream per engine for the hooks of a micro-step.
 *
 * Teardown. The engine never synchronizes a caller's stream, and uses one only inside the
 * calls given it (and the zero_step after them). A caller may destroy its stream, and its own
 * buffers, once the last such call has returned: before zero_destroy too, which waits for the
 * engine's own work on the device once and then frees its memory. The buffers zero_param_data
 * and zero_grad_buffer gave are the engine's and go with zero_destroy.
 *
 * Memory. zero_param_data and zero_grad_buffer give device memory: on a GPU the host must not
 * read or write it; zero_data_location says which it is. ZERO_CPU_DEVICE=guarded (or
 * zero_create_options.cpu_device ZERO_CPU_DEVICE_GUARDED) makes the CPU catch the same mistakes:
 * that memory faults on host access while a zero_ call runs, and streams run on worker threads.
 *
 * Indices. Groups, modules and parameters are numbered from 0 in registration order.
 * ------------------------------------------------------------------------------------- */

typedef struct zero_engine zero_engine;

/* The dtype of param_data and grad_buffer. */
typedef enum zero_dtype { ZERO_FP32 = 0, ZERO_FP16 = 1, ZERO_BF16 = 2 } zero_dtype;

/* zero_create_options.device: where the engine runs. */
typedef enum zero_device_kind {
  ZERO_DEVICE_AUTO = 0, /* a GPU when there is one, else the CPU */
  ZERO_DEVICE_CPU = 1,
  ZERO_DEVICE_CUDA = 2
} zero_device_kind;

/* zero_create_options.cpu_device: how the CPU device runs, when the device is the CPU. */
typedef enum zero_cpu_device_mode {
  ZERO_CPU_DEVICE_FROM_ENV = 0, /* the environment variable ZERO_CPU_DEVICE (sync, async,
                                 * guarded or timed; unset: sync) */
  ZERO_CPU_DEVICE_SYNC = 1,     /* every call completes on the calling thread */
  ZERO_CPU_DEVICE_ASYNC = 2,    /* a worker thread per stream, like a GPU's queues */
  ZERO_CPU_DEVICE_GUARDED = 3,  /* asynchronous, and host code touching the memory
                                 * zero_param_data and zero_grad_buffer give faults while a
                                 * zero_ call runs, as it would on a GPU */
  ZERO_CPU_DEVICE_TIMED = 4     /* asynchronous, and each copy and kernel lasts what it would
                                 * on a GPU behind the link ZERO_TIMED_LINK describes */
} zero_cpu_device_mode;

/* Optional settings of zero_create. Initialise it with ZERO_CREATE_OPTIONS_INIT (which sets
 * `size` and zeroes the rest) and set what you need:
 *   zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
 * The struct grows at its end as zero does: a library reads the first `size` bytes, takes the
 * defaults for fields a caller's older header did not have, and refuses fields a newer header
 * set that it does not know (as NCCL's ncclConfig_t). */
typedef struct zero_create_options {
  /* sizeof(zero_create_options) as the caller compiled it; 0 is refused (an options struct
   * zeroed without ZERO_CREATE_OPTIONS_INIT). */
  unsigned long long size;
  /* "dotted.key=value" strings filling "auto" values or replacing the file's, e.g.
   * "train_micro_batch_size_per_gpu=4", "optimizer.params.lr=3e-4". */
  const char* const* overrides;
  int override_count;
  /* Run on this MPI communicator (a pointer to an MPI_Comm) instead of the launcher's world;
   * zero duplicates it and never frees it. NULL: from the launcher (mpirun, srun, zero-run),
   * or a world of one without a launcher. */
  const void* mpi_comm;
  /* A zero_device_kind: ZERO_DEVICE_AUTO (0), ZERO_DEVICE_CPU or ZERO_DEVICE_CUDA. */
  int device;
  /* OpenMP threads of the CPU optimizer; 0: one. */
  int optimizer_threads;
  /* Seed of bf16 optimizer state's stochastic rounding. */
  unsigned long long seed;
  /* Run on this NCCL communicator (an ncclComm_t) instead of making one; the device must then be
   * CUDA (ZERO_DEVICE_CUDA, or automatic with a GPU), on the communicator's GPU. zero never
   * frees it and aborts it only through zero_abort. At most one of mpi_comm and nccl_comm. */
  void* nccl_comm;
  /* A zero_cpu_device_mode: ZERO_CPU_DEVICE_FROM_ENV (0), _SYNC, _ASYNC, _GUARDED or _TIMED;
   * the last three are for testing an embedder's and zero's ordering on the CPU, and timing
   * zero's GPU schedule there. */
  int cpu_device;
} zero_create_options;

/* sizeof(zero_create_options) in `size`, every other field zero (each named, for -Wextra). */
#define ZERO_CREATE_OPTIONS_INIT \
  { sizeof(zero_create_options), 0, 0, 0, 0, 0, 0, 0, 0 }

/* Creates an engine from a JSON config text. `options` may be NULL (every default). On success
 * *engine is the new engine; on failure it is NULL. Collective: every rank of the job calls
 * it. */
ZERO_API zero_status zero_create(const char* config_json, const zero_create_options* options,
                                 zero_engine** engine);
/* The same, reading the config from a file. */
ZERO_API zero_status zero_create_from_file(const char* path, const zero_create_options* options,
                                           zero_engine** engine);

/* Collective: finishes outstanding communication and frees the engine and its memory. NULL
 * is accepted and does nothing. */
ZERO_API zero_status zero_destroy(zero_engine* engine);

/* Where the buffers zero_param_data and zero_grad_buffer give live: host memory (the CPU
 * device) or a GPU's memory, which the host must not read or write directly. */
typedef enum zero_memory_kind { ZERO_MEMORY_HOST = 0, ZERO_MEMORY_CUDA = 1 } zero_memory_kind;

/* The engine's device memory: *kind, and *ordinal the GPU's index as the CUDA runtime numbers
 * it (-1 for host memory). Either pointer may be NULL. Valid from zero_create on: check before
 * touching param_data or grad_buffer from the host. */
ZERO_API zero_status zero_data_location(const zero_engine* engine, zero_memory_kind* kind,
                                        int* ordinal);

ZERO_API zero_status zero_rank(const zero_engine* engine, int* rank);
ZERO_API zero_status zero_world_size(const zero_engine* engine, int* world_size);
ZERO_API zero_status zero_compute_dtype(const zero_engine* engine, zero_dtype* dtype);

/* The resolved value of a config key as JSON text ("8", "true", "\"cpu\"", "[0.9,0.95]"):
 * `key` is a dotted path such as "train_micro_batch_size_per_gpu" or
 * "activation_checkpointing.cpu_checkpointing", after "auto" values, overrides and defaults are
 * resolved; a section's path ("zero_optimization.offload_optimizer") gives an object of its
 * resolved keys. Written into buffer (size bytes, always NUL-terminated when size > 0); *needed
 * (may be NULL) gets the full length + 1. ZERO_ERROR_USAGE for a key the config does not
 * resolve. */
ZERO_API zero_status zero_config_value(const zero_engine* engine, const char* key, char* buffer,
                                       unsigned long long size, unsigned long long* needed);

/* No engine needed: DeepSpeed config `text` read as zero_create reads it (`//` and block comments
 * allowed, a key given twice in one object refused, malformed JSON reported with its line and
 * column, `source` naming it in messages: a path, or NULL for "<string>") and written back as
 * plain JSON, for a program that edits a config before zero_create (the Python front end).
 * Written into buffer (size bytes, always NUL-terminated when size > 0); *needed (may be NULL)
 * gets the full length + 1. ZERO_ERROR_CONFIG for text zero_create would refuse to parse. */
ZERO_API zero_status zero_read_config_text(const char* text, const char* source, char* buffer,
                                           unsigned long long size, unsigned long long* needed);

/* ---- Registration (before zero_init) ---- */

/* A parameter group: weight decay and learning-rate scale for the parameters in it (e.g. no
 * decay for biases and norms). Group 0, "default", exists with the optimizer's weight decay. */
ZERO_API zero_status zero_add_group(zero_engine* engine, const char* name, double weight_decay,
                                    double lr_scale, int* group);

/* A module: the unit of the hooks. Register modules in forward order. */
ZERO_API zero_status zero_add_module(zero_engine* engine, const char* name, int* module);

/* Fills out[0, count) with the values of elements [offset, offset + count) of the flattened
 * parameter. Called during zero_init for the ranges this rank needs, so that the values do not
 * depend on the number of ranks. */
typedef void (*zero_initializer)(void* user, int param, unsigned long long offset,
                                 unsigned long long count, float* out);

typedef struct zero_param_desc {
  const char* name;
  const long long* shape; /* ndim dims, each >= 0; ndim 0 is a scalar */
  int ndim;
  int trainable; /* 0: frozen (no gradient, no optimizer state) */
  int group;
  const int* modules; /* the modules that use it (a tied weight lists several) */
  int module_count;
  /* The first value, one of (or neither, for zeros):
   *   initial: numel floats read on rank 0 only (broadcast at zero_init; must stay valid
   *            until then); other ranks may pass NULL;
   *   initializer (+ initializer_user): called per range (every rank passes one, or none). */
  const float* initial;
  zero_initializer initializer;
  void* initializer_user;
} zero_param_desc;

ZERO_API zero_status zero_add_param(zero_engine* engine, const zero_param_desc* desc, int* param);

/* Collective. Checks that every rank registered the same, lays out the model state, checks that
 * it fits the machine, allocates it, and sets the initial values. Registration is closed
 * afterwards. The fit check adds up, per pool the ranks share (host memory per machine, a GPU's
 * memory, the file system under an nvme_path), what zero_memory_reserved will report and what
 * zero_declare_memory declared, against what was free at zero_create; when a pool is short it
 * returns ZERO_ERROR_OUT_OF_MEMORY on every rank before reserving anything, and the last error
 * names the pool, the figures and the config keys to lower. The environment variable
 * ZERO_MEMORY_CHECK=warn logs the shortfall and goes on; =off skips the check (rank 0's
 * setting holds for every rank). */
ZERO_API zero_status zero_init(zero_engine* engine);

/* ---- Training ---- */

/* The module hooks, collective in the sense that every rank calls the same hooks in the same
 * order. Stage 3 gathers a module's parameters in its pre hooks and releases them in its post
 * hooks. The first training micro-step and the first evaluation pass record the order of the
 * pre hooks; later passes gather ahead along it (stage3_prefetch_bucket_size elements ahead,
 * within stage3_max_live_parameters) and keep parameters used again within
 * stage3_max_reuse_distance elements. A pass in another order is recorded again with a
 * warning (after three changes prefetching stops); an evaluation pass ends where the next
 * begins (the forward of its first module with no hook open) or at zero_set_train(1). */
ZERO_API zero_status zero_pre_forward(zero_engine* engine, int module, void* stream);
ZERO_API zero_status zero_post_forward(zero_engine* engine, int module, void* stream);
ZERO_API zero_status zero_pre_backward(zero_engine* engine, int module, void* stream);
ZERO_API zero_status zero_post_backward(zero_engine* engine, int module, void* stream);

/* The compute copy of a parameter (zero_compute_dtype, numel elements, row-major).
 * Stages 0-2: valid from zero_init to zero_destroy; its values change only in zero_step.
 * Stage 3: valid only between the pre and post hook of a module that uses the parameter. */
ZERO_API zero_status zero_param_data(zero_engine* engine, int param, void** data);

/* The gradient buffer a module's backward adds (+=) its gradient into (zero_compute_dtype,
 * numel elements). Valid between zero_pre_backward and zero_post_backward of a module that
 * uses the parameter. It is zero at the first of them in a micro-step (stages 2-3) or in an
 * accumulation window (stages 0-1, which keep the sum over the window's micro-steps). */
ZERO_API zero_status zero_grad_buffer(zero_engine* engine, int param, void** data);

/* *zero = 1 while zero_grad_buffer's buffer still holds the zeros it was given: no module using
 * the parameter has had its zero_post_backward since (in the micro-step at stages 2-3, in the
 * accumulation window at stages 0-1). A module's backward may then write its gradient (=)
 * instead of adding it, skipping a read and, for a matrix product, an accumulation; a second
 * module sharing the parameter (a tied weight) still adds after it, and so does a second write
 * within the same backward. Valid where zero_grad_buffer is. */
ZERO_API zero_status zero_grad_is_zero(zero_engine* engine, int param, int* zero);

/* What to multiply the micro-batch's mean loss by before backward: the fp16 loss scale
 * divided by gradient_accumulation_steps (1 / steps in bf16 and fp32). */
ZERO_API zero_status zero_loss_factor(const zero_engine* engine, double* factor);
/* The current loss scale (1 unless fp16). */
ZERO_API zero_status zero_loss_scale(const zero_engine* engine, double* scale);

/* Training (1) or evaluation (0) mode. Evaluation passes call only the forward hooks. A usage
 * error inside a pass (a pre hook without its post hook, or a backward before zero_step). */
ZERO_API zero_status zero_set_train(zero_engine* engine, int train);

/* *boundary = 1 when the next zero_step ends an accumulation window (runs the optimizer). */
ZERO_API zero_status zero_is_accumulation_boundary(const zero_engine* engine, int* boundary);

typedef struct zero_step_stats {
  int stepped;            /* 1 at an accumulation boundary */
  int skipped;            /* 1 when non-finite gradients (fp16 overflow, or bf16 with
                           * bf16.check_grad_overflow) skipped the optimizer and the schedule */
  double loss_scale;      /* the scale this window's gradients carried */
  double grad_norm;       /* global norm of the unscaled gradients (before clipping); 0 when
                           * skipped */
  double lr;              /* the learning rate of this optimizer step; when skipped, the one the
                           * schedule still holds (the next step's) */
  long long global_steps; /* optimizer steps so far, skipped ones included */
  long long micro_steps;  /* zero_step calls so far */
} zero_step_stats;

/* Collective. Call after every micro-batch's backward. `stats` may be NULL. When an optimizer
 * step fails (an I/O error on the NVMe swap, a communication error), the optimizer state may
 * be half updated: later zero_step calls return ZERO_ERROR_USAGE, and the NVMe swap files are
 * kept for inspection, with a warning naming them, however the process ends (zero_destroy,
 * zero_abort, exit, SIGTERM/SIGINT/SIGHUP). Destroy it and resume from a checkpoint.
 * Otherwise swap files are removed on each of those ends.
 * With super_offload at stage 3 beside a GPU, the optimizer on the CPU (not NVMe) and the
 * parameters not on NVMe, it may return while the CPU optimizer still steps the last groups
 * (with gradient_clipping or an overflow check, once their verdict keeps the step): the next
 * forward's hooks wait (zero_pre_forward may block) for each parameter's update, and every other
 * call that reads or writes the state for all of them (the next backward's first hook, zero_step
 * without a backward, zero_set_train when it changes the mode, zero_read_param,
 * zero_write_param, checkpoints and zero_load_pretrained); a failure of one is reported there,
 * and fails the engine as here (docs/offload.md, "The step's tail").
 * Where the optimizer runs on the engine's device (not offloaded) in bf16 or fp32, the step's
 * verdict (the non-finite check, the gradient norm, the clip factor) is computed there and the
 * optimizer reads it there: with `stats` NULL the host does not wait for it, and the step is
 * queued behind the backward (at stages 1-2 with each group's all-gather of the updated shards
 * queued behind its update on NCCL; on CPU ranks MPI's all-gathers are waited for). Its skipped and
 * grad_norm are then known at zero_last_step_stats; the next boundary applies the verdict
 * before its own step (a skipped step's count goes back, and its warning is logged then).
 * With `stats` given, zero_step waits for them after queuing the step. */
ZERO_API zero_status zero_step(zero_engine* engine, zero_step_stats* stats);
/* The stats of the last zero_step call (nothing stepped before any), waiting for the device's
 * verdict where that call was given no `stats` and left it pending. A trainer that reports a step's
 * norm while the next one runs calls it after queuing the next step's work. */
ZERO_API zero_status zero_last_step_stats(zero_engine* engine, zero_step_stats* stats);

/* Collective: the full current value of a parameter as numel floats, on every rank (the fp32
 * master for trainable parameters in mixed precision, else the compute copy). */
ZERO_API zero_status zero_read_param(zero_engine* engine, int param, float* out,
                                     unsigned long long count);

/* With no hook open (between passes, or after a backward and before its zero_step except with
 * super_offload), on every rank with the same `values` (count = numel floats): sets a
 * parameter's full value, its compute copy or this rank's shard of it and, for a trainable
 * parameter, its fp32 master, wherever they live (device, host memory, NVMe). Not collective:
 * each rank writes the part it keeps, so ranks given different values diverge. The optimizer's
 * moments and the step counters are kept (DeepSpeed's safe_set_full_fp32_param). An I/O error
 * part way leaves the engine failed. */
ZERO_API zero_status zero_write_param(zero_engine* engine, int param, const float* values,
                                      unsigned long long count);

/* Collective: each of the `count` values replaced by its mean over the ranks (summed in fp32),
 * e.g. the loss a trainer prints. After zero_init. It waits for the engine's earlier collectives
 * (the communicator runs them in order), not for its other work queued on the device. */
ZERO_API zero_status zero_mean_across_ranks(zero_engine* engine, double* values, int count);

/* Collective: the `bytes` bytes at `data` (host memory, as many on every rank) on rank `root`
 * copied into every rank's `data`, e.g. a module's buffers, which zero does not own, made the
 * same on every rank as DeepSpeed does at initialisation. After zero_init. */
ZERO_API zero_status zero_broadcast(zero_engine* engine, void* data, unsigned long long bytes,
                                    int root);

/* ---- Checkpoints ----
 *
 * DIR/<tag>/ holds one safetensors file per rank (its shard of every parameter: the fp32 master
 * and the optimizer's moments for trainable parameters, the value for frozen ones) and
 * meta.json (the config, the parameters, world size and stage, step counters, loss-scale state,
 * the rounding seed, your user data, every file's xxHash checksums, and a checksum of meta.json
 * itself, so an edited meta.json is refused). DIR/latest names the
 * newest complete tag. A checkpoint loads at any world size and any stage. */

/* Collective; call it at an accumulation boundary (after the zero_step that ran the optimizer),
 * with no pass open. Writes DIR/<tag>/ (tag NULL or "": "global_step<N>") and then moves
 * DIR/latest to it. Atomic: the files are written under temporary names, checksummed, fsynced
 * and renamed, and DIR/latest moves only after every rank's files are durable, so a failure
 * or a crash at any point leaves the previous checkpoint loadable; saving to an existing tag
 * replaces it in one step. `user_data` (user_bytes bytes; NULL when 0), e.g. the data loader's
 * position, is kept with the checkpoint: rank 0's copy is saved. The config key
 * checkpoint.keep_last = K removes all but the newest K tags after a successful save. */
ZERO_API zero_status zero_save_checkpoint(zero_engine* engine, const char* dir, const char* tag,
                                          const void* user_data, unsigned long long user_bytes);

/* zero_load_checkpoint flags. */
#define ZERO_LOAD_MODULE_ONLY \
  1u /* the values only: the optimizer state and counters start afresh */

/* Collective, with the same conditions as zero_save_checkpoint. Loads DIR/<tag> (tag NULL or
 * "": the tag DIR/latest names; DIR may also be a tag directory itself) into the registered
 * model, whatever world size and stage saved it: values, fp32 masters, moments, step counters,
 * loss-scale state and the rounding seed, so that training continues as if never stopped.
 * Every byte read is checked against its checksum. A checkpoint of another model (a parameter
 * missing, extra or of another shape) or of another optimizer is refused before anything
 * changes, naming the first difference; a damaged file found while reading fails the load and
 * leaves the engine refusing steps (ZERO_ERROR_USAGE): destroy it. */
ZERO_API zero_status zero_load_checkpoint(zero_engine* engine, const char* dir, const char* tag,
                                          unsigned flags);

/* The user data of the last checkpoint loaded: up to `size` bytes into buffer; *bytes (may be
 * NULL) gets its full length. Zero bytes before any load. */
ZERO_API zero_status zero_checkpoint_user_data(const zero_engine* engine, void* buffer,
                                               unsigned long long size, unsigned long long* bytes);

/* Optimizer steps taken so far, skipped ones included (zero_step_stats.global_steps): 0 after
 * zero_init, restored by zero_load_checkpoint. A trainer checks its saved data position
 * against it when it resumes. */
ZERO_API zero_status zero_global_steps(const zero_engine* engine, long long* steps);

/* The learning rate the next optimizer step will use, before any group's lr_scale: the
 * config's schedule at that step's iteration; its first value before any step, the resumed
 * schedule's after zero_load_checkpoint. A skipped step leaves it as it was. What DeepSpeed's
 * engine.get_lr() returns between steps (zero_step_stats.lr is the step's own). */
ZERO_API zero_status zero_learning_rate(const zero_engine* engine, double* lr);

/* Sets the learning rate of every optimizer step from the next on, before any group's
 * lr_scale, in place of the config's (for a schedule the caller runs, as a torch LR scheduler
 * given to DeepSpeed is): zero_learning_rate and zero_step_stats.lr report it. After zero_init;
 * ZERO_ERROR_USAGE when the config has a scheduler section, or for a negative or non-finite
 * lr, or for a new lr during an accumulation boundary's backward (from its first backward hook
 * to its zero_step) with super_offload and neither gradient_clipping nor an overflow check:
 * its groups are being stepped in place with the current one, with no copy to redo them from.
 * Local (every rank sets the same value); not saved by zero_save_checkpoint: set it again after
 * a load. */
ZERO_API zero_status zero_set_learning_rate(zero_engine* engine, double lr);

/* With zero_optimization.zero_quantized_error_check (and ZeRO++'s zero_quantized_weights or
 * zero_quantized_gradients): the last optimizer step's relative L2 error, over every rank, of
 * the quantized stage-3 gathers (*weights) and of the quantized reduce-scatter's results
 * (*gradients) against exact ones: sqrt(sum |quantized - exact|^2 / sum |exact|^2) over what
 * was gathered and reduced since the step before it (evaluation passes' gathers included). -1
 * where nothing was measured (not quantized, no check, no step yet).
 * Either pointer may be NULL. */
ZERO_API zero_status zero_quantization_error(const zero_engine* engine, double* weights,
                                             double* gradients);

/* ---- Pretrained weights ---- */

/* How zero_load_pretrained maps tensors onto parameters. Zero-initialise it ({0}); every list
 * may be NULL with a count of 0. */
typedef struct zero_pretrained_options {
  /* Pairs: names[2k] is a registered parameter, names[2k + 1] its tensor's name in the files
   * (unlisted parameters: the same name). */
  const char* const* names;
  int name_pairs;
  /* 2-D parameters [rows, cols] whose tensor is stored [cols, rows] (Hugging Face GPT-2's
   * Conv1D weights c_attn, c_proj, c_fc). */
  const char* const* transposed;
  int transposed_count;
  /* Tensors in the files that no parameter takes (buffers such as attention masks). */
  const char* const* ignore;
  int ignore_count;
  /* Parameters the files do not hold: they keep their values. */
  const char* const* skip;
  int skip_count;
} zero_pretrained_options;

/* Collective, after zero_init, between passes. Sets the parameters' values from safetensors
 * files: `path` is a .safetensors file, an index JSON as Hugging Face writes it
 * (model.safetensors.index.json, whose "weight_map" names each tensor's file), or a directory
 * holding either. Each rank reads only the byte ranges it keeps (at stage 3 its shards), and F64,
 * F32, F16 and BF16 convert to the engine's dtypes. Optimizer moments are zeroed; step counters
 * stay. A parameter without its tensor, a tensor no parameter takes, or a shape that differs is
 * refused before anything changes, naming it. `options` may be NULL. */
ZERO_API zero_status zero_load_pretrained(zero_engine* engine, const char* path,
                                          const zero_pretrained_options* options);

/* ---- Memory and failure ---- */

/* Tiers and kinds of model state, as zero_memory_bytes reports them. */
typedef enum zero_tier {
  ZERO_TIER_DEVICE = 0,
  ZERO_TIER_PINNED = 1,
  ZERO_TIER_HOST = 2,
  ZERO_TIER_NVME = 3
} zero_tier;
typedef enum zero_kind {
  ZERO_KIND_PARAM = 0,
  ZERO_KIND_GRAD = 1,
  ZERO_KIND_MASTER = 2,
  ZERO_KIND_MOMENT = 3,
  ZERO_KIND_BUFFER = 4
} zero_kind;

/* Bytes of one tier and kind on this rank: live now, and the most there ever were. */
ZERO_API zero_status zero_memory_bytes(const zero_engine* engine, zero_tier tier, zero_kind kind,
                                       unsigned long long* live, unsigned long long* peak);

/* Bytes the engine reserved in one tier: its arenas' capacities (an NVMe arena: its swap
 * file's size) and its scratch. Fixed at zero_init; `zero-mem` predicts it before launch. */
ZERO_API zero_status zero_memory_reserved(const zero_engine* engine, zero_tier tier,
                                          unsigned long long* bytes);

/* Declares memory the program will hold beside the engine from now on (its model's activations
 * and workspaces), in `tier` (device, pinned or host: on the CPU device all three are host
 * memory), so that zero_init's fit check counts it; `what` names it in the check's message
 * (may be NULL). Memory the program holds already at zero_create needs no declaring: the check
 * compares with what was free then. Before zero_init. */
ZERO_API zero_status zero_declare_memory(zero_engine* engine, zero_tier tier,
                                         unsigned long long bytes, const char* what);

/* A text report of the same (every tier and kind in use), written into buffer (size bytes,
 * always NUL-terminated when size > 0); *needed (may be NULL) gets the full length + 1. */
ZERO_API zero_status zero_memory_report(const zero_engine* engine, char* buffer,
                                        unsigned long long size, unsigned long long* needed);

/* Ends the whole job after a failure this rank cannot recover from (a collective error, a
 * timeout): reports `reason` and terminates every rank with exit_code. This rank's NVMe swap
 * directories are removed first (kept and named after a failed step); the other ranks remove
 * theirs when the launcher's SIGTERM ends them. Does not return when the engine has a
 * communicator; returns ZERO_ERROR_USAGE for a NULL engine. */
ZERO_API zero_status zero_abort(zero_engine* engine, int exit_code, const char* reason);

#ifdef __cplusplus
}
#endif

#endif /* ZERO_ZERO_H */
