/*
 * libacc: Hugging Face Accelerate as native software. The stable C ABI, version 1.
 *
 * Conventions (docs/abi.md has the long form):
 * - Every fallible function returns acc_status (ACC_OK is 0). Out-parameters are zeroed on entry, so a
 *   failure leaves nothing to clean up. The message of the last failure on this thread is read with
 *   acc_last_error_message(); every acc_ call clears it first.
 * - Handles are opaque. What comes back through an out-parameter belongs to the caller and is freed by
 *   the matching _destroy (void, NULL-safe). Handles keep what they depend on alive, so they may be
 *   destroyed in any order. A borrowed `const char*` stays valid until the next call on that handle.
 * - Input strings and host buffers are copied unless a function says otherwise.
 * - Configuration and options cross as JSON text; unknown keys and bad values are errors naming the key.
 * - Different handles may be used from different threads at once; one handle by one thread at a time.
 *   Concurrent use of one handle is reported as ACC_ERR_BUSY.
 * - No name of the OpenACC runtime API is defined here.
 */
#ifndef ACC_ACC_H
#define ACC_ACC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define ACC_NOEXCEPT noexcept
#else
#define ACC_NOEXCEPT
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ACC_API __attribute__((visibility("default")))
#define ACC_NODISCARD __attribute__((warn_unused_result))
#else
#define ACC_API
#define ACC_NODISCARD
#endif

#define ACC_VERSION_MAJOR 1
#define ACC_VERSION_MINOR 0
#define ACC_VERSION_PATCH 0
/** The ABI this header describes; bindings pass it to acc_abi_check at load. It equals the major
 *  version and the soname (libacc.so.1): exports are append-only within it. */
#define ACC_ABI_VERSION 1

/* ---------------------------------------------------------------------------------------------- */
/* Status codes: stable, never reused.                                                             */
typedef int32_t acc_status;
#define ACC_OK 0
#define ACC_ERR_INVALID_ARGUMENT 1 /* a NULL handle or pointer, a bad value, a bad shape */
#define ACC_ERR_INVALID_CONFIG 2   /* config or options JSON: unknown key, wrong type, bad value */
#define ACC_ERR_INVALID_STATE 3    /* call order: e.g. prepared twice, stepped before prepare */
#define ACC_ERR_UNSUPPORTED 4      /* valid, but not available in this build or on this machine */
#define ACC_ERR_IO 5               /* a file could not be read or written */
#define ACC_ERR_OUT_OF_MEMORY 6
#define ACC_ERR_DISTRIBUTED 7      /* rendezvous, a collective, a peer that went away */
#define ACC_ERR_TORCH 8            /* an error raised inside LibTorch (message has its text) */
#define ACC_ERR_ABI_MISMATCH 9
#define ACC_ERR_BUSY 10            /* the handle is in use by another thread */
#define ACC_ERR_CALLBACK 11        /* a caller callback returned non-zero */
#define ACC_ERR_INTERNAL 12

/* Tensor element types. */
typedef int32_t acc_dtype;
#define ACC_FLOAT32 0
#define ACC_FLOAT64 1
#define ACC_BFLOAT16 2
#define ACC_FLOAT16 3
#define ACC_INT32 4
#define ACC_INT64 5
#define ACC_UINT8 6
#define ACC_BOOL 7

/* Reductions for acc_reduce. */
typedef int32_t acc_reduce_op;
#define ACC_REDUCE_SUM 0
#define ACC_REDUCE_MEAN 1
#define ACC_REDUCE_MAX 2

typedef struct acc_accelerator acc_accelerator;
typedef struct acc_tensor acc_tensor;
typedef struct acc_model acc_model;
typedef struct acc_optimizer acc_optimizer;
typedef struct acc_scheduler acc_scheduler;
typedef struct acc_dataset acc_dataset;
typedef struct acc_dataloader acc_dataloader;
/* DLPack >= 1.0 (dlpack/dlpack.h); only pointers cross, so this header does not need its definition. */
struct DLManagedTensorVersioned;

/* ---------------------------------------------------------------------------------------------- */
/* Library, errors, versions                                                                      */

/** Runtime version, "MAJOR.MINOR.PATCH". Static storage. */
ACC_API const char* acc_version(void) ACC_NOEXCEPT;
/** ACC_OK when the loaded library serves `abi_version` (pass ACC_ABI_VERSION); else ACC_ERR_ABI_MISMATCH
 *  with a message naming both versions and the library's path. */
ACC_API ACC_NODISCARD acc_status acc_abi_check(int32_t abi_version) ACC_NOEXCEPT;
/** Build facts as JSON: libacc and torch versions, C++ ABI, compiler, CUDA, git revision. Static. */
ACC_API const char* acc_build_info(void) ACC_NOEXCEPT;
/** Message of the last failed call on this thread; "" when the last call succeeded. Never NULL. */
ACC_API const char* acc_last_error_message(void) ACC_NOEXCEPT;
/** Status of the last call on this thread. */
ACC_API acc_status acc_last_error_code(void) ACC_NOEXCEPT;
/** Name of a status code, e.g. "ACC_ERR_INVALID_CONFIG". Static; "ACC_ERR_UNKNOWN" for others. */
ACC_API const char* acc_status_name(acc_status status) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Accelerator: the context of one training process                                               */

/**
 * Creates the accelerator from a JSON object of Accelerate's constructor keys (NULL or "" = defaults):
 * "cpu", "mixed_precision", "gradient_accumulation_steps", "seed", "dataloader_config" {...},
 * "ddp_kwargs" {"bucket_cap_mb", "broadcast_buffers", "find_unused_parameters", ...}. Values set by the
 * launcher's ACCELERATE_* environment apply beneath the JSON. Process state comes from RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; with WORLD_SIZE > 1 this joins the
 * process group (TCPStore rendezvous; Gloo for CPU tensors, NCCL for CUDA tensors).
 */
ACC_API ACC_NODISCARD acc_status acc_accelerator_create(const char* config_json,
                                                         acc_accelerator** out) ACC_NOEXCEPT;
ACC_API void acc_accelerator_destroy(acc_accelerator* acc) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_process_index(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_local_process_index(const acc_accelerator* acc,
                                                          int32_t* out) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_num_processes(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_is_main_process(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** Device of this process, e.g. "cpu" or "cuda:0". Borrowed from the accelerator. */
ACC_API ACC_NODISCARD acc_status acc_device(const acc_accelerator* acc, const char** out) ACC_NOEXCEPT;
/** Accelerate's DistributedType name: "NO", "MULTI_CPU", "MULTI_GPU". Borrowed from the accelerator. */
ACC_API ACC_NODISCARD acc_status acc_distributed_type(const acc_accelerator* acc,
                                                       const char** out) ACC_NOEXCEPT;
/** The resolved configuration as JSON, each value with where it came from. Borrowed. */
ACC_API ACC_NODISCARD acc_status acc_config_json(const acc_accelerator* acc, const char** out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Tensors (CPU or device memory owned by the library)                                            */

/** Copies `nbytes` from `data` (row-major, `ndim` dims of `shape`) into a new CPU tensor. nbytes must
 *  equal the element count times the element size. ndim may be 0 (a scalar). */
ACC_API ACC_NODISCARD acc_status acc_tensor_from_host(const void* data, size_t nbytes, acc_dtype dtype,
                                                       const int64_t* shape, int32_t ndim,
                                                       acc_tensor** out) ACC_NOEXCEPT;
/** Copies the tensor (from any device, made contiguous) into `dst`, which holds `nbytes` bytes; nbytes
 *  must equal the tensor's byte size. */
ACC_API ACC_NODISCARD acc_status acc_tensor_to_host(const acc_tensor* t, void* dst,
                                                     size_t nbytes) ACC_NOEXCEPT;
ACC_API void acc_tensor_destroy(acc_tensor* t) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_tensor_ndim(const acc_tensor* t, int32_t* out) ACC_NOEXCEPT;
/** Writes min(ndim, capacity) dimensions to `shape`; fails when capacity < ndim. */
ACC_API ACC_NODISCARD acc_status acc_tensor_shape(const acc_tensor* t, int64_t* shape,
                                                   int32_t capacity) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_tensor_numel(const acc_tensor* t, int64_t* out) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_tensor_nbytes(const acc_tensor* t, size_t* out) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_tensor_dtype(const acc_tensor* t, acc_dtype* out) ACC_NOEXCEPT;
/** The value of a one-element tensor, converted to double. */
ACC_API ACC_NODISCARD acc_status acc_tensor_item(const acc_tensor* t, double* out) ACC_NOEXCEPT;
/** Takes ownership of `src` (DLPack >= 1.0) and calls its deleter exactly once, also on failure;
 *  zero-copy: the tensor views src's memory until destroyed. */
ACC_API ACC_NODISCARD acc_status acc_tensor_from_dlpack(struct DLManagedTensorVersioned* src,
                                                         acc_tensor** out) ACC_NOEXCEPT;
/** Exports a zero-copy view; the caller must call (*out)->deleter(*out). Keeps the memory alive
 *  after acc_tensor_destroy(t). */
ACC_API ACC_NODISCARD acc_status acc_tensor_to_dlpack(const acc_tensor* t,
                                                       struct DLManagedTensorVersioned** out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Models                                                                                          */

/**
 * A built-in model family from a JSON spec:
 *  {"type": "mlp", "sizes": [in, hidden..., out], "activation": "relu"|"gelu"|"tanh",
 *   "loss": "mse"|"cross_entropy"}
 *  {"type": "gpt", "vocab_size": V, "block_size": T, "n_layer": L, "n_head": H, "n_embd": C,
 *   "dropout": 0.0, "bias": true}   (decoder-only; tied head; loss: cross entropy over tokens)
 * Parameters are initialised from the CPU generator (seed it through the accelerator's "seed").
 */
ACC_API ACC_NODISCARD acc_status acc_model_create(const char* spec_json, acc_model** out) ACC_NOEXCEPT;
/** Loads a TorchScript module file. options_json: {"loss": "mse"|"cross_entropy"|"none"}. */
ACC_API ACC_NODISCARD acc_status acc_model_load_torchscript(const char* path, const char* options_json,
                                                             acc_model** out) ACC_NOEXCEPT;
ACC_API void acc_model_destroy(acc_model* model) ACC_NOEXCEPT;
/**
 * Runs the model. `targets` may be NULL; when given, *out_loss receives the scalar loss (with its
 * autograd graph, ready for acc_backward). Either out-parameter may be NULL when not wanted.
 */
ACC_API ACC_NODISCARD acc_status acc_model_forward(acc_model* model, const acc_tensor* input,
                                                    const acc_tensor* targets, acc_tensor** out_output,
                                                    acc_tensor** out_loss) ACC_NOEXCEPT;
/** Training (1) or evaluation (0) mode: dropout on or off. */
ACC_API ACC_NODISCARD acc_status acc_model_set_training(acc_model* model, int32_t training) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_model_num_parameters(const acc_model* model, int64_t* out) ACC_NOEXCEPT;
/** Number of named tensors (parameters, then buffers) in the state dict. */
ACC_API ACC_NODISCARD acc_status acc_model_state_size(const acc_model* model, int64_t* out) ACC_NOEXCEPT;
/** Name (borrowed from the model) and a copy of the index-th state tensor. */
ACC_API ACC_NODISCARD acc_status acc_model_state_get(const acc_model* model, int64_t index,
                                                      const char** out_name,
                                                      acc_tensor** out_value) ACC_NOEXCEPT;
/** Writes the model's state dict to a safetensors file, atomically (temporary name, then rename). */
ACC_API ACC_NODISCARD acc_status acc_model_save_safetensors(const acc_model* model,
                                                             const char* path) ACC_NOEXCEPT;
/** Loads a safetensors file into the model; every name and shape must match. */
ACC_API ACC_NODISCARD acc_status acc_model_load_safetensors(acc_model* model, const char* path) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Optimizers and schedulers                                                                      */

/** {"type": "sgd"|"adam"|"adamw", "lr": 1e-3, "momentum": 0 (sgd), "betas": [0.9, 0.999],
 *   "eps": 1e-8, "weight_decay": 0 (adamw: 0.01)} over all parameters of `model`. */
ACC_API ACC_NODISCARD acc_status acc_optimizer_create(acc_model* model, const char* options_json,
                                                       acc_optimizer** out) ACC_NOEXCEPT;
ACC_API void acc_optimizer_destroy(acc_optimizer* opt) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_optimizer_step(acc_optimizer* opt) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_optimizer_zero_grad(acc_optimizer* opt) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_optimizer_lr(const acc_optimizer* opt, double* out) ACC_NOEXCEPT;

/** {"type": "constant"|"linear"|"cosine", "warmup_steps": 0, "total_steps": N (linear, cosine),
 *   "min_lr_ratio": 0.0 (cosine)}: the learning rate is lr * factor(step). */
ACC_API ACC_NODISCARD acc_status acc_scheduler_create(acc_optimizer* opt, const char* options_json,
                                                       acc_scheduler** out) ACC_NOEXCEPT;
ACC_API void acc_scheduler_destroy(acc_scheduler* sched) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_scheduler_step(acc_scheduler* sched) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_scheduler_last_lr(const acc_scheduler* sched, double* out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Data                                                                                            */

/** Samples are rows (dim 0) of `inputs` and, when not NULL, of `targets`. Both are copied. */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_tensors(const acc_tensor* inputs, const acc_tensor* targets,
                                                           acc_dataset** out) ACC_NOEXCEPT;
/** A memory-mapped file of little-endian tokens. options_json: {"block_size": T, "dtype": "uint16"|
 *  "int32"}. Sample i is tokens [i*T, i*T+T) as input and [i*T+1, i*T+T+1) as target (int64). */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_token_file(const char* path, const char* options_json,
                                                              acc_dataset** out) ACC_NOEXCEPT;
/** Fills one sample: creates *input (and *target, or leaves it NULL) with acc_tensor_from_host; the
 *  library takes ownership. Return ACC_OK, or any non-zero value to fail with ACC_ERR_CALLBACK. */
typedef acc_status (*acc_dataset_get_fn)(void* user_data, int64_t index, acc_tensor** input,
                                         acc_tensor** target);
/** A dataset of `length` samples produced by `get` on the calling thread. `free_user_data` (may be
 *  NULL) is called once when the dataset is no longer used. */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_callback(int64_t length, acc_dataset_get_fn get,
                                                            void* user_data,
                                                            void (*free_user_data)(void*),
                                                            acc_dataset** out) ACC_NOEXCEPT;
ACC_API void acc_dataset_destroy(acc_dataset* ds) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_dataset_length(const acc_dataset* ds, int64_t* out) ACC_NOEXCEPT;

/** {"batch_size": 1, "shuffle": false, "seed": the shuffling generator's seed (unset: each epoch seeds one
 *  from the default generator, as torch's RandomSampler does), "drop_last": false}. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_create(acc_dataset* ds, const char* options_json,
                                                        acc_dataloader** out) ACC_NOEXCEPT;
ACC_API void acc_dataloader_destroy(acc_dataloader* dl) ACC_NOEXCEPT;
/**
 * The next batch of this process. At the end of an epoch *has_batch is 0 and both tensors NULL; the
 * next call starts the following epoch (reshuffled: the generator's next permutation, or with the
 * seedable sampler data_seed + epoch). *out_target is NULL when the dataset has no targets.
 */
ACC_API ACC_NODISCARD acc_status acc_dataloader_next(acc_dataloader* dl, acc_tensor** out_input,
                                                      acc_tensor** out_target,
                                                      int32_t* has_batch) ACC_NOEXCEPT;
/** Batches per epoch on this process. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_length(const acc_dataloader* dl, int64_t* out) ACC_NOEXCEPT;
/** Ends the current pass; the next one runs `epoch` (the seedable sampler shuffles with data_seed +
 *  epoch; an iterable dataset's start callback receives it). */
ACC_API ACC_NODISCARD acc_status acc_dataloader_set_epoch(acc_dataloader* dl, int64_t epoch) ACC_NOEXCEPT;
/** 1 while the last batch of the epoch is current (Accelerate's end_of_dataloader). */
ACC_API ACC_NODISCARD acc_status acc_dataloader_end_of_epoch(const acc_dataloader* dl,
                                                              int32_t* out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Training                                                                                        */

/**
 * Prepares any of model, optimizer, scheduler, data loader (each may be NULL) for this process, in
 * place: the model moves to the device and is wrapped for distributed training (DDP: parameters and
 * buffers broadcast from rank 0; gradients all-reduced in buckets during backward); the data loader is
 * sharded across processes as Accelerate shards it. An optimizer must belong to a prepared model (the
 * same call or an earlier one). Preparing an object twice is ACC_ERR_INVALID_STATE.
 */
ACC_API ACC_NODISCARD acc_status acc_prepare(acc_accelerator* acc, acc_model* model, acc_optimizer* opt,
                                              acc_scheduler* sched, acc_dataloader* dl) ACC_NOEXCEPT;
/** Back-propagates `loss` (a scalar from acc_model_forward with targets). */
ACC_API ACC_NODISCARD acc_status acc_backward(acc_accelerator* acc, const acc_tensor* loss) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Gradient accumulation and mixed precision                                                      */

/**
 * Opens Accelerate's accumulate(model) scope for one batch: decides whether this micro-step
 * synchronizes gradients (every gradient_accumulation_steps-th call, and always on the last batch of
 * the active data loader when sync_with_dataloader), and otherwise skips the model's gradient
 * all-reduce (DDP no_sync). While not synchronizing, optimizer and scheduler steps and zero_grad on
 * prepared objects are no-ops. acc_backward always divides the loss by the number of steps.
 */
ACC_API ACC_NODISCARD acc_status acc_accumulate_begin(acc_accelerator* acc, acc_model* model) ACC_NOEXCEPT;
/** Closes the scope acc_accumulate_begin opened for `model`. */
ACC_API ACC_NODISCARD acc_status acc_accumulate_end(acc_accelerator* acc, acc_model* model) ACC_NOEXCEPT;
/** 1 when the current micro-step synchronizes gradients and steps the optimizer (sync_gradients). */
ACC_API ACC_NODISCARD acc_status acc_sync_gradients(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** 1 when the last acc_optimizer_step was skipped: fp16 found inf/nan gradients. */
ACC_API ACC_NODISCARD acc_status acc_optimizer_step_was_skipped(const acc_optimizer* opt,
                                                                 int32_t* out) ACC_NOEXCEPT;
/** The fp16 loss scaler's current scale and growth tracker (clean steps since the last change).
 *  ACC_ERR_INVALID_STATE unless mixed_precision is "fp16". */
ACC_API ACC_NODISCARD acc_status acc_grad_scaler_state(const acc_accelerator* acc, double* out_scale,
                                                        int64_t* out_growth_tracker) ACC_NOEXCEPT;
/** torch.nn.utils.clip_grad_norm_ over the model's gradients (unscaled first under fp16); writes the
 *  total norm before clipping. norm_type 2.0 is the usual Euclidean norm. */
ACC_API ACC_NODISCARD acc_status acc_clip_grad_norm(acc_accelerator* acc, acc_model* model, double max_norm,
                                                     double norm_type, double* out_total_norm) ACC_NOEXCEPT;
/** Clamps every gradient of the model to [-clip_value, clip_value] (unscaled first under fp16). */
ACC_API ACC_NODISCARD acc_status acc_clip_grad_value(acc_accelerator* acc, acc_model* model,
                                                      double clip_value) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Collectives (every process must make the same calls in the same order)                         */

/** Concatenates `t` from every process along dim 0, in rank order (dim-0 sizes may differ). */
ACC_API ACC_NODISCARD acc_status acc_gather(acc_accelerator* acc, const acc_tensor* t,
                                             acc_tensor** out) ACC_NOEXCEPT;
/** acc_gather, then on the last batch of the active prepared data loader drops the samples that
 *  sharding duplicated to even out the processes, so metrics see each sample exactly once. */
ACC_API ACC_NODISCARD acc_status acc_gather_for_metrics(acc_accelerator* acc, const acc_tensor* t,
                                                         acc_tensor** out) ACC_NOEXCEPT;
/** Element-wise reduction across processes; the result is on every process. */
ACC_API ACC_NODISCARD acc_status acc_reduce(acc_accelerator* acc, const acc_tensor* t, acc_reduce_op op,
                                             acc_tensor** out) ACC_NOEXCEPT;
/** Barrier across all processes. */
ACC_API ACC_NODISCARD acc_status acc_wait_for_everyone(acc_accelerator* acc) ACC_NOEXCEPT;
/** A copy of process `from_process`'s tensor on every process (shape and dtype must agree). */
ACC_API ACC_NODISCARD acc_status acc_broadcast(acc_accelerator* acc, const acc_tensor* t, int32_t from_process,
                                                acc_tensor** out) ACC_NOEXCEPT;
/** Pads `t` along `dim` to the largest size any process has, with `pad_index`, at the end (or at the
 *  start when pad_first is 1). A dim outside the tensor returns it unchanged, as Accelerate does. */
ACC_API ACC_NODISCARD acc_status acc_pad_across_processes(acc_accelerator* acc, const acc_tensor* t, int32_t dim,
                                                           double pad_index, int32_t pad_first,
                                                           acc_tensor** out) ACC_NOEXCEPT;
/** This process's contiguous share of `n` items: the first n % num_processes processes get one more.
 *  With apply_padding, *out_padded_count is the common length everyone pads to (repeating the last
 *  item); otherwise it equals *out_count. */
ACC_API ACC_NODISCARD acc_status acc_split_between_processes(const acc_accelerator* acc, int64_t n,
                                                              int32_t apply_padding, int64_t* out_start,
                                                              int64_t* out_count,
                                                              int64_t* out_padded_count) ACC_NOEXCEPT;
/** Rows of `t` (dim 0) for this process, split as acc_split_between_processes; with apply_padding the
 *  share is padded with copies of the tensor's last row to the common length. */
ACC_API ACC_NODISCARD acc_status acc_split_tensor_between_processes(acc_accelerator* acc, const acc_tensor* t,
                                                                     int32_t apply_padding,
                                                                     acc_tensor** out) ACC_NOEXCEPT;
/** main_process_first: other processes wait in _begin until the main process (of the machine, when
 *  local is 1) reaches _end. Every process calls both. */
ACC_API ACC_NODISCARD acc_status acc_main_process_first_begin(acc_accelerator* acc, int32_t local) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_main_process_first_end(acc_accelerator* acc, int32_t local) ACC_NOEXCEPT;
/** set_trigger on this process; check_trigger (a collective) is 1 on every process when any process
 *  set it since the last check, and resets it. For early stopping. */
ACC_API ACC_NODISCARD acc_status acc_set_trigger(acc_accelerator* acc) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_check_trigger(acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** Prints `text` and a newline to stdout on the local main process only. */
ACC_API ACC_NODISCARD acc_status acc_print(const acc_accelerator* acc, const char* text) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_is_local_main_process(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_is_last_process(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Seeds and batch-size search                                                                     */

/** Accelerate's set_seed: seeds every generator of this process with `seed` (plus the process index
 *  when device_specific is 1); deterministic 1 also selects deterministic algorithms. `acc` may be
 *  NULL when device_specific is 0. */
ACC_API ACC_NODISCARD acc_status acc_set_seed(const acc_accelerator* acc, uint64_t seed, int32_t device_specific,
                                               int32_t deterministic) ACC_NOEXCEPT;
/** A caller's training step at a given batch size; return ACC_ERR_OUT_OF_MEMORY to ask for a smaller
 *  one, ACC_OK when it ran, anything else to stop the search with that status. */
typedef acc_status (*acc_batch_size_fn)(void* user_data, int64_t batch_size);
/** find_executable_batch_size: calls fn with starting_batch_size, then 90% of the last size after each
 *  out-of-memory (128, 115, 103, ...), until it succeeds; *out_batch_size is the size that ran.
 *  Fails with ACC_ERR_OUT_OF_MEMORY once the size reaches zero. */
ACC_API ACC_NODISCARD acc_status acc_find_executable_batch_size(int64_t starting_batch_size, acc_batch_size_fn fn,
                                                                 void* user_data,
                                                                 int64_t* out_batch_size) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Data loading, continued: iterable datasets, explicit batches, skip_first_batches, objects       */
/*                                                                                                 */
/* How acc_prepare shards a loader follows the accelerator's dataloader_config, as Accelerate's     */
/* prepare_data_loader does: "split_batches", "even_batches", "dispatch_batches" (unset: only       */
/* iterable datasets are dispatched), "use_seedable_sampler" and "data_seed" (shuffle with a        */
/* generator seeded data_seed + epoch; data_seed unset: the default generator's seed), and          */
/* "non_blocking". With one process a loader is not sharded.                                       */

/** Rewinds an iterable dataset's stream for a pass over `epoch` (Accelerate's set_epoch). Return
 *  ACC_OK, or any non-zero value to fail with ACC_ERR_CALLBACK. */
typedef acc_status (*acc_iterator_start_fn)(void* user_data, int64_t epoch);
/** The next sample of the stream: creates *input (and *target, or leaves it NULL) with
 *  acc_tensor_from_host and sets *has_sample to 1; the library takes ownership. At the end of the
 *  stream sets *has_sample to 0. Return ACC_OK, or any non-zero value to fail with ACC_ERR_CALLBACK. */
typedef acc_status (*acc_iterator_next_fn)(void* user_data, acc_tensor** input, acc_tensor** target,
                                           int32_t* has_sample);
/**
 * An iterable dataset (torch's IterableDataset): no length, no indexing, read in order on the calling
 * thread. `start` (may be NULL) is called at the beginning of every pass; `next` until the stream ends.
 * Loaders over it take {"batch_size", "drop_last"} (not "shuffle"). Prepared with several processes,
 * either only the main process reads the stream and broadcasts each step (DataLoaderDispatcher: the
 * default, or dispatch_batches true), or every process reads all of it and keeps its slices
 * (IterableDatasetShard: dispatch_batches false); both complete the last batch from the first ones.
 * `free_user_data` (may be NULL) is called once when the dataset is no longer used.
 */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_iterator(acc_iterator_start_fn start, acc_iterator_next_fn next,
                                                            void* user_data, void (*free_user_data)(void*),
                                                            acc_dataset** out) ACC_NOEXCEPT;
/** 1 for an iterable dataset (acc_dataset_length fails on one with ACC_ERR_UNSUPPORTED). */
ACC_API ACC_NODISCARD acc_status acc_dataset_is_iterable(const acc_dataset* ds, int32_t* out) ACC_NOEXCEPT;

/**
 * A loader over explicit batches, which may differ in size (a batch sampler without a batch size:
 * Accelerate's batch_size=None). Batch b is the next batch_sizes[b] entries of `indices` (so
 * `indices` holds the sum of batch_sizes); every batch is non-empty and every index inside the
 * dataset. Both arrays are copied. options_json: {"drop_last": false}, the sampler's drop_last: once
 * sharded, an incomplete last round of batches is dropped (else, with even_batches, completed with the
 * first batches). Batches of varying size can be neither split (split_batches) nor dispatched
 * (dispatch_batches true, whose steps are cut in equal parts): acc_prepare refuses both.
 */
ACC_API ACC_NODISCARD acc_status acc_dataloader_create_from_batches(acc_dataset* ds, const int64_t* indices,
                                                                     const int64_t* batch_sizes,
                                                                     int64_t num_batches, const char* options_json,
                                                                     acc_dataloader** out) ACC_NOEXCEPT;
/**
 * skip_first_batches: a new loader over the same data, prepared as `dl` is (or not) and at the same
 * epoch, each pass of which skips its first `num_batches` batches of this process (to resume an epoch
 * mid-way). A loader from a skipping loader skips both counts. Unlike Accelerate, a dispatching
 * loader also counts the batches of this process, not those of the main process's reading.
 */
ACC_API ACC_NODISCARD acc_status acc_dataloader_skip_first_batches(acc_dataloader* dl, int64_t num_batches,
                                                                    acc_dataloader** out) ACC_NOEXCEPT;
/** The epoch the current pass runs, or the next one when between passes (Accelerate's iteration). */
ACC_API ACC_NODISCARD acc_status acc_dataloader_epoch(const acc_dataloader* dl, int64_t* out) ACC_NOEXCEPT;
/** While the last batch of a pass is current and sharding completed it with repeated samples: how many
 *  samples of that global batch are real (gathered in rank order they come first; what
 *  acc_gather_for_metrics keeps). 0 otherwise. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_remainder(const acc_dataloader* dl, int64_t* out) ACC_NOEXCEPT;

/* Objects cross as byte strings the caller serializes (JSON, a binding's own encoding, ...). */
typedef struct acc_bytes_list acc_bytes_list;
ACC_API ACC_NODISCARD acc_status acc_bytes_list_create(acc_bytes_list** out) ACC_NOEXCEPT;
ACC_API void acc_bytes_list_destroy(acc_bytes_list* list) ACC_NOEXCEPT;
/** Appends a copy of `size` bytes at `data` (data may be NULL when size is 0). */
ACC_API ACC_NODISCARD acc_status acc_bytes_list_append(acc_bytes_list* list, const void* data,
                                                        size_t size) ACC_NOEXCEPT;
ACC_API ACC_NODISCARD acc_status acc_bytes_list_count(const acc_bytes_list* list, int64_t* out) ACC_NOEXCEPT;
/** The index-th item: its bytes (borrowed from the list until it is changed or destroyed; never NULL)
 *  and its size. */
ACC_API ACC_NODISCARD acc_status acc_bytes_list_get(const acc_bytes_list* list, int64_t index,
                                                     const void** out_data, size_t* out_size) ACC_NOEXCEPT;

/** gather_object: the items of every process, concatenated in rank order, on every process (a process
 *  may give none). A collective. */
ACC_API ACC_NODISCARD acc_status acc_gather_object(acc_accelerator* acc, const acc_bytes_list* items,
                                                    acc_bytes_list** out) ACC_NOEXCEPT;
/** gather_for_metrics for objects (Accelerate's non-tensor data and use_gather_object=True): one item
 *  per sample of the batch; acc_gather_object, then on the last batch of the active prepared loader only
 *  the real samples are kept, so every sample is counted exactly once. Samples that do not fit one
 *  tensor (rows of different shapes) travel this way too, serialized by the caller. */
ACC_API ACC_NODISCARD acc_status acc_gather_object_for_metrics(acc_accelerator* acc, const acc_bytes_list* items,
                                                                acc_bytes_list** out) ACC_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif
#endif /* ACC_ACC_H */
