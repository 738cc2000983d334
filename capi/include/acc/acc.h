/**
 * @file acc/acc.h
 * libacc: Hugging Face Accelerate as native software. The stable C ABI, version 1.
 *
 * Conventions (docs/abi.md has the long form):
 * - Every fallible function returns acc_status (ACC_OK is 0). Out-parameters are zeroed on entry, so a
 *   failure leaves nothing to clean up. The message of the last failure on this thread is read with
 *   acc_last_error_message(); every call that returns acc_status clears it first.
 * - Handles are opaque. What comes back through an out-parameter belongs to the caller and is freed by
 *   the matching _destroy (void, NULL-safe, never during another call on that handle). Handles keep what
 *   they depend on alive, so they may be destroyed in any order. A borrowed `const char*` stays valid
 *   until the next call on that handle.
 * - Input strings and host buffers are copied unless a function says otherwise.
 * - Configuration and options cross as JSON text; unknown keys and bad values are errors naming the key.
 * - Different handles may be used from different threads at once; one handle by one thread at a time.
 *   Concurrent use of one handle by calls that lock it is reported as ACC_ERR_BUSY.
 * - No name of the OpenACC runtime API is defined here.
 *
 * Every function's comment ends with its ownership and threading, in these terms:
 * @verbatim
 *   Caller owns *out (acc_x_destroy)  the call made it; the caller frees it with that function.
 *   Borrowed    the library's memory: never freed by the caller; valid for as long as the line says.
 *   Locks h     the call marks handle h busy while it runs: a call that locks h from another thread
 *               meanwhile fails with ACC_ERR_BUSY (nothing waits).
 *   Reads h     no busy check: may overlap other reads of h, but not a call that locks or destroys h
 *               (that is a data race, not ACC_ERR_BUSY).
 *   Any thread  touches nothing that changes after creation (or no handle at all).
 *   Collective  every process of the job makes the call, in the same order as the others; a process that
 *               does not leaves the others waiting. With one process it is local.
 *   Local       no other process takes part (said where a collective might be expected).
 * @endverbatim
 * The busy check covers the handles a line names. Objects tied by training (an optimizer and its model,
 * a scheduler and its optimizer, an accelerator and what it prepared) share state: drive one such group
 * from one thread at a time.
 */
#ifndef ACC_ACC_H
#define ACC_ACC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define ACC_NOEXCEPT noexcept
#else
/** `noexcept` in C++ (no libacc function throws), nothing in C. */
#define ACC_NOEXCEPT
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ACC_API __attribute__((visibility("default")))
#define ACC_NODISCARD __attribute__((warn_unused_result))
#else
/** Marks a function libacc exports (default visibility with GCC and Clang). */
#define ACC_API
/** Marks a function whose result (an acc_status) must be checked (warn_unused_result with GCC and Clang). */
#define ACC_NODISCARD
#endif

/** Major version of this header (acc_version() gives the loaded library's). */
#define ACC_VERSION_MAJOR 1
/** Minor version of this header. */
#define ACC_VERSION_MINOR 4
/** Patch version of this header. */
#define ACC_VERSION_PATCH 0
/** The ABI this header describes; bindings pass it to acc_abi_check at load. It equals the major
 *  version and the soname (libacc.so.1): exports are append-only within it. */
#define ACC_ABI_VERSION 1

/* ---------------------------------------------------------------------------------------------- */
/* Status codes: stable, never reused.                                                             */
/** What every fallible function returns: ACC_OK or one of the ACC_ERR_ codes below. */
typedef int32_t acc_status;
#define ACC_OK 0                   /**< success */
#define ACC_ERR_INVALID_ARGUMENT 1 /**< a NULL handle or pointer, a bad value, a bad shape */
#define ACC_ERR_INVALID_CONFIG 2   /**< config or options JSON: unknown key, wrong type, bad value */
#define ACC_ERR_INVALID_STATE 3    /**< call order: e.g. prepared twice, stepped before prepare */
#define ACC_ERR_UNSUPPORTED 4      /**< valid, but not available in this build or on this machine */
#define ACC_ERR_IO 5               /**< a file could not be read or written */
#define ACC_ERR_OUT_OF_MEMORY 6    /**< an allocation failed */
#define ACC_ERR_DISTRIBUTED 7      /**< rendezvous, a collective, a peer that went away */
#define ACC_ERR_TORCH 8            /**< an error raised inside LibTorch (message has its text) */
#define ACC_ERR_ABI_MISMATCH 9     /**< the loaded library does not serve the ABI asked for (acc_abi_check) */
#define ACC_ERR_BUSY 10            /**< the handle is in use by another thread */
#define ACC_ERR_CALLBACK 11        /**< a caller callback returned non-zero */
#define ACC_ERR_INTERNAL 12        /**< a bug in libacc (the message says where) */

/* Tensor element types. */
/** Tensor element type: one of the ACC_ type codes below. */
typedef int32_t acc_dtype;
#define ACC_FLOAT32 0  /**< 32-bit float */
#define ACC_FLOAT64 1  /**< 64-bit float */
#define ACC_BFLOAT16 2 /**< bfloat16 */
#define ACC_FLOAT16 3  /**< IEEE half */
#define ACC_INT32 4    /**< 32-bit signed integer */
#define ACC_INT64 5    /**< 64-bit signed integer */
#define ACC_UINT8 6    /**< 8-bit unsigned integer */
#define ACC_BOOL 7     /**< boolean, one byte */

/* Reductions for acc_reduce. */
/** Reduction of acc_reduce: one of the ACC_REDUCE_ codes below. */
typedef int32_t acc_reduce_op;
#define ACC_REDUCE_SUM 0  /**< element-wise sum */
#define ACC_REDUCE_MEAN 1 /**< element-wise mean */
#define ACC_REDUCE_MAX 2  /**< element-wise maximum */

/* The handles, one section each below (in this order, byte lists after the collectives). */
/** The context of one training process (Accelerate's Accelerator). */
typedef struct acc_accelerator acc_accelerator;
/** A tensor, in CPU or device memory owned by the library. */
typedef struct acc_tensor acc_tensor;
/** A named batch: tensors by name, in order. */
typedef struct acc_batch acc_batch;
/** A model: a built-in family, TorchScript or a Hugging Face architecture. */
typedef struct acc_model acc_model;
/** An optimizer over a model's parameters. */
typedef struct acc_optimizer acc_optimizer;
/** A learning-rate schedule of an optimizer. */
typedef struct acc_scheduler acc_scheduler;
/** A dataset of samples. */
typedef struct acc_dataset acc_dataset;
/** A data loader: batches of a dataset, sharded across processes once prepared. */
typedef struct acc_dataloader acc_dataloader;
/** A list of byte strings (objects serialized by the caller). */
typedef struct acc_bytes_list acc_bytes_list;
/* DLPack >= 1.0 (dlpack/dlpack.h); only pointers cross, so this header does not need its definition. */
struct DLManagedTensorVersioned;

/* ---------------------------------------------------------------------------------------------- */
/* Library and errors: versions, the ABI check, build facts, this thread's last error, status names */

/** Runtime version, "MAJOR.MINOR.PATCH".
 *  Borrowed: static storage. Any thread; leaves the error record alone. */
ACC_API const char* acc_version(void) ACC_NOEXCEPT;
/** ACC_OK when the loaded library serves `abi_version` (pass ACC_ABI_VERSION); else ACC_ERR_ABI_MISMATCH
 *  with a message naming both versions and the library's path.
 *  Any thread. */
ACC_API ACC_NODISCARD acc_status acc_abi_check(int32_t abi_version) ACC_NOEXCEPT;
/** Build facts as JSON: libacc and LibTorch versions, C++ ABI, compiler, CUDA, git revision.
 *  Borrowed: static storage. Any thread; leaves the error record alone. */
ACC_API const char* acc_build_info(void) ACC_NOEXCEPT;
/** Message of the last failed call on this thread; "" when the last call succeeded. Never NULL.
 *  Borrowed, thread-local: valid until this thread's next call that returns acc_status. */
ACC_API const char* acc_last_error_message(void) ACC_NOEXCEPT;
/** Status of the last call on this thread.
 *  Thread-local: this thread's record, never another thread's. */
ACC_API acc_status acc_last_error_code(void) ACC_NOEXCEPT;
/** Name of a status code, e.g. "ACC_ERR_INVALID_CONFIG"; "ACC_ERR_UNKNOWN" for others.
 *  Borrowed: static storage. Any thread; leaves the error record alone. */
ACC_API const char* acc_status_name(acc_status status) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Accelerator: the context of one training process (queries, seeds, process control, printing)    */

/**
 * Creates the accelerator from a JSON object of Accelerate's constructor keys (NULL or "" = defaults):
 * "cpu", "mixed_precision", "gradient_accumulation_steps", "seed", "dataloader_config" {...},
 * "ddp_kwargs" {"bucket_cap_mb", "broadcast_buffers", "find_unused_parameters", ...}. Values set by the
 * launcher's ACCELERATE_* environment apply beneath the JSON. Process state comes from RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; with WORLD_SIZE > 1 this joins the
 * process group (TCPStore rendezvous; Gloo for CPU tensors, NCCL for CUDA tensors).
 * Caller owns *out (acc_accelerator_destroy). Any thread. Collective with WORLD_SIZE > 1 for the first
 * accelerator of a process (the rendezvous); later ones share its process group.
 */
ACC_API ACC_NODISCARD acc_status acc_accelerator_create(const char* config_json, acc_accelerator** out) ACC_NOEXCEPT;
/** Releases the handle; objects it prepared keep the accelerator and its process group alive.
 *  NULL-safe; not during another call on acc. */
ACC_API void acc_accelerator_destroy(acc_accelerator* acc) ACC_NOEXCEPT;
/** This process's rank in the job (RANK). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_process_index(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** This process's rank on its machine (LOCAL_RANK). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_local_process_index(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** The number of processes of the job (WORLD_SIZE). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_num_processes(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** 1 on the process of rank 0, else 0. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_is_main_process(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** 1 on the first process of its machine (local rank 0), else 0. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_is_local_main_process(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** 1 on the process of the highest rank, else 0. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_is_last_process(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** Device of this process, e.g. "cpu" or "cuda:0".
 *  Borrowed: valid until acc is destroyed. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_device(const acc_accelerator* acc, const char** out) ACC_NOEXCEPT;
/** Accelerate's DistributedType name: "NO", "MULTI_CPU", "MULTI_GPU".
 *  Borrowed: valid until acc is destroyed. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_distributed_type(const acc_accelerator* acc, const char** out) ACC_NOEXCEPT;
/** The resolved configuration as JSON, each value with where it came from.
 *  Borrowed: valid until acc is destroyed. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_config_json(const acc_accelerator* acc, const char** out) ACC_NOEXCEPT;

/** Accelerate's set_seed: seeds every generator of this process with `seed` (plus the process index
 *  when device_specific is 1); deterministic 1 also selects deterministic algorithms. `acc` may be
 *  NULL when device_specific is 0.
 *  Reads acc; sets process-wide generators (each under its own lock). Local: no other process takes part. */
ACC_API ACC_NODISCARD acc_status acc_set_seed(const acc_accelerator* acc, uint64_t seed, int32_t device_specific,
                                              int32_t deterministic) ACC_NOEXCEPT;

/** wait_for_everyone: a barrier; returns once every process has reached it.
 *  Locks acc. Collective. */
ACC_API ACC_NODISCARD acc_status acc_wait_for_everyone(acc_accelerator* acc) ACC_NOEXCEPT;
/** main_process_first: other processes wait in _begin until the main process (of the machine, when
 *  local is 1) reaches _end. Every process calls both.
 *  Locks acc. Collective: the others' barrier is here, the main process's in _end. */
ACC_API ACC_NODISCARD acc_status acc_main_process_first_begin(acc_accelerator* acc, int32_t local) ACC_NOEXCEPT;
/** Ends what acc_main_process_first_begin began (pass the same `local`).
 *  Locks acc. Collective. */
ACC_API ACC_NODISCARD acc_status acc_main_process_first_end(acc_accelerator* acc, int32_t local) ACC_NOEXCEPT;
/** set_trigger on this process; check_trigger (a collective) is 1 on every process when any process
 *  set it since the last check, and resets it. For early stopping.
 *  Locks acc. Local: no other process takes part. */
ACC_API ACC_NODISCARD acc_status acc_set_trigger(acc_accelerator* acc) ACC_NOEXCEPT;
/** check_trigger: *out = 1 on every process when any process called acc_set_trigger since the last
 *  check (which it resets), else 0.
 *  Locks acc. Collective. */
ACC_API ACC_NODISCARD acc_status acc_check_trigger(acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** Prints `text` and a newline to stdout on the local main process only.
 *  Any thread (no lock). Local. */
ACC_API ACC_NODISCARD acc_status acc_print(const acc_accelerator* acc, const char* text) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Tensors (CPU or device memory owned by the library). A tensor handle never changes after its      */
/* creation: calls on one may run on any thread.                                                     */

/** Copies `nbytes` from `data` (row-major, `ndim` dims of `shape`) into a new CPU tensor. nbytes must
 *  equal the element count times the element size. ndim may be 0 (a scalar).
 *  Caller owns *out (acc_tensor_destroy). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_from_host(const void* data, size_t nbytes, acc_dtype dtype,
                                                      const int64_t* shape, int32_t ndim,
                                                      acc_tensor** out) ACC_NOEXCEPT;
/** Copies the tensor (from any device, made contiguous) into `dst`, which holds `nbytes` bytes; nbytes
 *  must equal the tensor's byte size.
 *  Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_to_host(const acc_tensor* t, void* dst, size_t nbytes) ACC_NOEXCEPT;
/** Releases the handle; batches, other handles and DLPack exports that share its data keep the data.
 *  NULL-safe; not during another call on t. */
ACC_API void acc_tensor_destroy(acc_tensor* t) ACC_NOEXCEPT;
/** Number of dimensions (0 for a scalar). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_ndim(const acc_tensor* t, int32_t* out) ACC_NOEXCEPT;
/** Writes min(ndim, capacity) dimensions to `shape`; fails when capacity < ndim.
 *  Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_shape(const acc_tensor* t, int64_t* shape, int32_t capacity) ACC_NOEXCEPT;
/** Number of elements. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_numel(const acc_tensor* t, int64_t* out) ACC_NOEXCEPT;
/** Size in bytes: elements times element size. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_nbytes(const acc_tensor* t, size_t* out) ACC_NOEXCEPT;
/** Element type; a tensor of a type without an acc_dtype fails with ACC_ERR_INVALID_ARGUMENT.
 *  Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_dtype(const acc_tensor* t, acc_dtype* out) ACC_NOEXCEPT;
/** The value of a one-element tensor, converted to double.
 *  Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_item(const acc_tensor* t, double* out) ACC_NOEXCEPT;
/** Takes ownership of `src` (DLPack >= 1.0) and calls its deleter exactly once, also on failure;
 *  zero-copy: the tensor views src's memory until destroyed.
 *  Caller owns *out (acc_tensor_destroy); src is the library's from the call on. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_from_dlpack(struct DLManagedTensorVersioned* src,
                                                        acc_tensor** out) ACC_NOEXCEPT;
/** Exports a zero-copy view; the caller must call (*out)->deleter(*out). Keeps the memory alive
 *  after acc_tensor_destroy(t).
 *  Caller owns *out (its deleter). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tensor_to_dlpack(const acc_tensor* t,
                                                      struct DLManagedTensorVersioned** out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Named batches: tensors by name, the dict Accelerate hands to a model                            */
/*                                                                                                 */
/* A batch is an ordered mapping name -> tensor ("input_ids", "attention_mask", "labels", ...).     */
/* Datasets hold such samples, loaders yield them (acc_dataloader_next_batch), and a model takes one */
/* and returns its outputs as one (acc_model_forward_batch: "loss", "logits"). The two-tensor calls  */
/* keep working: a dataset of (input, target) pairs names them "input" and "targets", the token     */
/* file "input_ids" and "targets"; acc_dataloader_next hands out a batch of one or two tensors as    */
/* (input, target), in the batch's order. Like every handle, a batch is used by one thread at a      */
/* time: acc_batch_set locks it (ACC_ERR_BUSY when another thread's acc_batch_set runs); the other  */
/* calls only read it.                                                                             */

/** An empty batch. The caller owns it and destroys it with acc_batch_destroy.
 *  Caller owns *out (acc_batch_destroy). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_batch_create(acc_batch** out) ACC_NOEXCEPT;
/** Destroys a batch the caller owns. Tensors taken from it stay valid.
 *  NULL-safe; not during another call on batch. */
ACC_API void acc_batch_destroy(acc_batch* batch) ACC_NOEXCEPT;
/** Adds `name` -> `t`, or replaces the tensor of `name` in its place. The batch shares t's data (no
 *  copy); `t` stays the caller's to destroy. `name`: a non-empty string, copied.
 *  Locks batch. */
ACC_API ACC_NODISCARD acc_status acc_batch_set(acc_batch* batch, const char* name, const acc_tensor* t) ACC_NOEXCEPT;
/** The number of tensors in the batch.
 *  Reads batch. */
ACC_API ACC_NODISCARD acc_status acc_batch_count(const acc_batch* batch, int64_t* out) ACC_NOEXCEPT;
/** The index-th name (0-based, in insertion order), borrowed from the batch until it is changed or
 *  destroyed.
 *  Borrowed: *out, as said. Reads batch. */
ACC_API ACC_NODISCARD acc_status acc_batch_name(const acc_batch* batch, int64_t index, const char** out) ACC_NOEXCEPT;
/** *out = 1 when the batch has a tensor named `name`, else 0.
 *  Reads batch. */
ACC_API ACC_NODISCARD acc_status acc_batch_contains(const acc_batch* batch, const char* name,
                                                    int32_t* out) ACC_NOEXCEPT;
/** A new handle to the tensor of `name` (sharing its data), which the caller destroys. A missing name is
 *  ACC_ERR_INVALID_ARGUMENT, whose message lists the names present.
 *  Caller owns *out (acc_tensor_destroy). Reads batch. */
ACC_API ACC_NODISCARD acc_status acc_batch_get(const acc_batch* batch, const char* name, acc_tensor** out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Models                                                                                          */

/**
 * A built-in model family from a JSON spec:
 *  {"type": "mlp", "sizes": [in, hidden..., out], "activation": "relu"|"gelu"|"tanh",
 *   "loss": "mse"|"cross_entropy"}   (parameters "layers.N.weight" [out, in], "layers.N.bias")
 *  {"type": "gpt", "vocab_size": V, "block_size": T, "n_layer": L, "n_head": H, "n_embd": C,
 *   "dropout": 0.0, "bias": true}   (decoder-only; tied head; loss: cross entropy over tokens; Hugging
 *   Face GPT-2's names and Conv1D layout: "transformer.h.0.attn.c_attn.weight" [C, 3C], ...)
 * Either may add "device": "meta" (shapes without storage). Parameters are initialised from the CPU
 * generator (seed it through the accelerator's "seed"). acc_model_forward's input is the MLP's "input"
 * and the GPT's "input_ids" [batch, time]; targets are the next token of each position (-1 ignored).
 * Caller owns *out (acc_model_destroy). Any thread (draws from the process-wide CPU generator).
 */
ACC_API ACC_NODISCARD acc_status acc_model_create(const char* spec_json, acc_model** out) ACC_NOEXCEPT;
/** Loads a TorchScript module file. options_json: {"loss": "mse"|"cross_entropy"|"none"}. Its forward
 *  gets the batch's tensors by argument name (one argument not in the batch: "input"), and returns a
 *  tensor (named "output") or a Dict[str, Tensor] (its entries; a "loss" entry is the loss, otherwise the
 *  configured loss of the first output against "targets").
 *  Caller owns *out (acc_model_destroy). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_model_load_torchscript(const char* path, const char* options_json,
                                                            acc_model** out) ACC_NOEXCEPT;
/**
 * transformers' from_pretrained: a Hugging Face model directory (config.json, and model.safetensors or
 * the shards model.safetensors.index.json lists). config.json's "architectures"[0] picks the model:
 * LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or MixtralForCausalLM (another is
 * ACC_ERR_UNSUPPORTED, naming it and listing these). The model is built without weight memory, then the
 * tensors are read through memory maps (the mapped tensors become the parameters where the dtype is the
 * file's: no copy). With "device_map" the weights go where Accelerate's load_checkpoint_and_dispatch would
 * put them: "device_map" (a mode, or an explicit map {"model.layers.0": "cpu", "lm_head": "disk", ...} naming
 * modules or parameters the model has and placing every weight), "max_memory", "no_split_module_classes" as
 * acc_infer_auto_device_map takes them,
 * "offload_folder" for weights converted on their way to the disk; weights on the "disk" stay in the mapped
 * file and their memory is given back after each layer's use (inference only: they do not require grad);
 * accelerators are ACC_ERR_UNSUPPORTED in this build (docs/big-models.md). options_json (NULL: {}):
 * {"dtype": "auto" | "float32" | "bfloat16" | "float16"}; "auto", the default (as in transformers 5), is
 * the dtype config.json records, float32 when none. Every parameter name and shape must
 * match transformers': ACC_ERR_INVALID_ARGUMENT lists what is missing, unexpected and mismatched; a
 * missing file is ACC_ERR_IO naming it. The model comes in eval mode (acc_model_set_training to fine-tune); it
 * takes the named batch "input_ids" with optional "attention_mask", "position_ids" and "labels" (shifted
 * inside, -100 ignored) and returns "logits" (and "loss"); acc_model_forward's input is "input_ids" and
 * its targets "labels". See docs/hf-models.md.
 * Caller owns *out (acc_model_destroy). Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_model_from_pretrained(const char* dir, const char* options_json,
                                                           acc_model** out) ACC_NOEXCEPT;
/**
 * transformers' from_config: the architecture a config.json text names (as acc_model_from_pretrained
 * knows them), with fresh weights initialised as transformers does (normal(0, initializer_range), zero
 * biases, unit norms) from the CPU generator (seed it through the accelerator's "seed"). options_json as
 * acc_model_from_pretrained's, and "device": "meta" for Accelerate's init_empty_weights (names and
 * shapes without memory: for acc_infer_auto_device_map). acc_model_save_pretrained writes it with its config.
 * Caller owns *out (acc_model_destroy). Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_model_from_config(const char* config_json, const char* options_json,
                                                       acc_model** out) ACC_NOEXCEPT;
/** Called by acc_generate after every step with the `batch` tokens just chosen (one per sequence; a finished
 *  sequence gets the pad token), valid during the call. Return 0 to go on, anything else to stop there. */
typedef int32_t (*acc_generate_token_fn)(void* user_data, const int64_t* tokens, int64_t batch);
/**
 * transformers' generate for a causal LM from acc_model_from_pretrained: continues input_ids [batch, time]
 * (integer token ids; left-padded where attention_mask, [batch, time] of 0/1, has zeros; NULL: no padding)
 * with a key/value cache, and sets *out to the whole sequences [batch, time + n] (int64), n <= max_new_tokens:
 * fewer when every sequence has emitted a stop token or on_tokens stopped it. options_json (NULL: {}) over
 * the model's generation_config.json: {"max_new_tokens": 20, "do_sample": false, "temperature": 1.0,
 * "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0, "eos_token_id": id or [ids] ([]: none), "pad_token_id": id,
 * "seed": n} (sampling draws from a generator of its own seeded with "seed": the same seed, the same
 * tokens; without one, from the process's CPU generator). Greedy decoding equals transformers'. on_tokens
 * may be NULL. A model that is not a causal LM is ACC_ERR_INVALID_ARGUMENT; one prepared under ZeRO-3 / FSDP
 * (parameters sharded) is ACC_ERR_INVALID_STATE.
 * Caller owns *out (acc_tensor_destroy). Locks model; on_tokens runs on the calling thread.
 */
ACC_API ACC_NODISCARD acc_status acc_generate(acc_model* model, const acc_tensor* input_ids,
                                              const acc_tensor* attention_mask, const char* options_json,
                                              acc_generate_token_fn on_tokens, void* user_data,
                                              acc_tensor** out) ACC_NOEXCEPT;
/**
 * torch.set_grad_enabled for the calling thread: with enabled 0, forward passes record no autograd graph
 * (evaluation and inference: less memory and time; acc_backward of such a loss fails), with 1 they do again
 * (the default). *previous (may be NULL) receives the setting before, to restore it. Thread-local, as in
 * PyTorch: it affects this thread's calls only.
 */
ACC_API ACC_NODISCARD acc_status acc_set_grad_enabled(int32_t enabled, int32_t* previous) ACC_NOEXCEPT;
/**
 * Accelerate's compute_module_sizes: the bytes of every module and tensor by dotted name ("" the whole
 * model), as JSON ({"": 13476839424, "model": ..., "model.layers.0": ...}), counting floating tensors in
 * `dtype` ("float32", "bfloat16", "float16"; NULL: their own). A tied output embedding counts once.
 * Borrowed: *out_json is valid until the next such call on model or its destruction. Locks model.
 */
ACC_API ACC_NODISCARD acc_status acc_model_module_sizes(acc_model* model, const char* dtype,
                                                        const char** out_json) ACC_NOEXCEPT;
/**
 * Accelerate's device-map planning (infer_auto_device_map, with get_balanced_memory for "auto",
 * "balanced" and "balanced_low_0") for the model, which may be empty (acc_model_from_config with
 * {"device": "meta"}). options_json (NULL: {}): {"device_map": "auto" | "balanced" | "balanced_low_0" |
 * "sequential", "max_memory": {"0": "10GiB", "1": 8000000000, "cpu": "30GB", "disk": ...} (accelerators by
 * index; sizes as Accelerate's convert_file_size_to_int reads them; default: the CPU's available memory),
 * "no_split_module_classes": [...] (default: the model's own, e.g. ["LlamaDecoderLayer"]), "dtype",
 * "offload_buffers", "fallback_allocation"}. *out_json is the map, {"model.embed_tokens": 0, ...,
 * "lm_head": "cpu"} (accelerators as integers), the same as Accelerate's for the same sizes and budget.
 * Borrowed: *out_json is valid until the next such call on model or its destruction. Locks model.
 */
ACC_API ACC_NODISCARD acc_status acc_infer_auto_device_map(acc_model* model, const char* options_json,
                                                           const char** out_json) ACC_NOEXCEPT;
/** Releases the handle; an optimizer over the model keeps it alive.
 *  NULL-safe; not during another call on model. */
ACC_API void acc_model_destroy(acc_model* model) ACC_NOEXCEPT;
/**
 * Runs the model. `targets` may be NULL; when given, *out_loss receives the scalar loss (with its
 * autograd graph, ready for acc_backward). Either out-parameter may be NULL when not wanted.
 * Caller owns *out_output and *out_loss (acc_tensor_destroy). Locks model. Collective when DDP
 * broadcasts buffers: a prepared model with buffers, in training mode, with several processes
 * (ddp_kwargs.broadcast_buffers, on by default).
 */
ACC_API ACC_NODISCARD acc_status acc_model_forward(acc_model* model, const acc_tensor* input, const acc_tensor* targets,
                                                   acc_tensor** out_output, acc_tensor** out_loss) ACC_NOEXCEPT;
/**
 * Runs the model on a named batch, as Accelerate's model(**batch), and returns its outputs as a new
 * batch the caller owns. The built-in MLP takes "input" (and "targets") and returns "output" (and
 * "loss"); the GPT takes "input_ids" with either "targets" (aligned, -1 ignored) or Hugging Face's
 * "labels" (shifted inside, -100 ignored) and returns "logits" (and "loss"); a name the model does not
 * take is refused. A TorchScript module gets the batch's tensors by its forward's argument names. The
 * loss keeps its autograd graph, ready for acc_backward.
 * Caller owns *out (acc_batch_destroy). Locks model; reads batch. Collective as acc_model_forward.
 */
ACC_API ACC_NODISCARD acc_status acc_model_forward_batch(acc_model* model, const acc_batch* batch,
                                                         acc_batch** out) ACC_NOEXCEPT;
/** Training (1) or evaluation (0) mode: dropout on or off.
 *  Locks model. */
ACC_API ACC_NODISCARD acc_status acc_model_set_training(acc_model* model, int32_t training) ACC_NOEXCEPT;
/** Number of parameter elements. Reads model. */
ACC_API ACC_NODISCARD acc_status acc_model_num_parameters(const acc_model* model, int64_t* out) ACC_NOEXCEPT;
/** Number of named tensors (parameters, then buffers) in the state dict.
 *  Reads model. */
ACC_API ACC_NODISCARD acc_status acc_model_state_size(const acc_model* model, int64_t* out) ACC_NOEXCEPT;
/** Name (borrowed from the model) and a copy of the index-th state tensor; either out-parameter may be
 *  NULL. Under ZeRO-3 / FSDP, and under ZeRO / FSDP with a mixed-precision policy (float32 masters behind
 *  compute-dtype copies), the tensor is gathered from the shards as acc_save_model writes it (Accelerate's
 *  get_state_dict): then a collective, every process calls it with the same index. Since 1.4 (symbol
 *  version ACC_1.4); a program built against 1.0-1.2 binds ACC_1.0, which keeps their meaning: never a
 *  collective, ACC_ERR_INVALID_STATE for sharded parameters (docs/abi.md, "Versioned symbols").
 *  Borrowed: *out_name, until the model handle is destroyed. Caller owns *out_value (a CPU copy;
 *  acc_tensor_destroy). Reads model. */
ACC_API ACC_NODISCARD acc_status acc_model_state_get(const acc_model* model, int64_t index, const char** out_name,
                                                     acc_tensor** out_value) ACC_NOEXCEPT;
/** Writes the model's state dict to a safetensors file, atomically (temporary name, then rename). Where
 *  acc_model_state_get gathers, the whole state is gathered from the shards: a collective, the main process
 *  writes and the others wait. Versioned as acc_model_state_get (ACC_1.4; ACC_1.0 refuses sharded
 *  parameters). Reads model. */
ACC_API ACC_NODISCARD acc_status acc_model_save_safetensors(const acc_model* model, const char* path) ACC_NOEXCEPT;
/** Loads a safetensors file into the model; every name and shape must match. Under ZeRO-3 / FSDP every
 *  process calls it (each keeps its shards of the file's tensors). Versioned as acc_model_state_get
 *  (ACC_1.4; ACC_1.0 refuses sharded parameters).
 *  Locks model. */
ACC_API ACC_NODISCARD acc_status acc_model_load_safetensors(acc_model* model, const char* path) ACC_NOEXCEPT;

/** Freezes (requires_grad 0) or unfreezes (1) every parameter whose whole dotted name the regular
 *  expression `pattern` matches (Python's re syntax run by RE2, in linear time, as "param_groups";
 *  "model\\.embed_tokens\\..*", ".*bias"; docs/c-api.md, "Regular expressions"),
 *  as torch's p.requires_grad_(). A frozen parameter gets no gradient, no optimizer state (create the
 *  optimizer after freezing) and no gradient all-reduce, and clip_grad_norm ignores it. *out_matched
 *  (may be NULL) gets how many parameters matched. A pattern matching nothing, or a bad expression, is
 *  ACC_ERR_INVALID_ARGUMENT naming it; a prepared model is ACC_ERR_INVALID_STATE (freeze before
 *  acc_prepare, as DDP and FSDP read requires_grad when they wrap). Since 1.2.
 *  Locks model. */
ACC_API ACC_NODISCARD acc_status acc_model_set_requires_grad(acc_model* model, const char* pattern,
                                                             int32_t requires_grad, int64_t* out_matched) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Optimizers                                                                                      */

/** {"type": "sgd"|"adam"|"adamw", "lr", "momentum", "dampening", "nesterov", "betas", "eps",
 *   "weight_decay", "amsgrad", "fused", "param_groups"} over the trainable parameters of `model`.
 *   Defaults are PyTorch's. "param_groups": [{"params": [regular expressions over whole parameter
 *   names], "lr", "weight_decay", ...}, ...] (a parameter in two groups is an error; the rest get the
 *   top-level options), or "transformers" (the Trainer's split: no weight decay for biases and norm
 *   weights). The table of keys and defaults is in docs/c-api.md, "Optimizer options". A model with
 *   no trainable parameter (all frozen) is ACC_ERR_INVALID_ARGUMENT, as torch.optim refuses an empty
 *   parameter list (since 1.4; before, an optimizer that stepped nothing).
 *  Caller owns *out (acc_optimizer_destroy); it keeps model alive. Reads model. */
ACC_API ACC_NODISCARD acc_status acc_optimizer_create(acc_model* model, const char* options_json,
                                                      acc_optimizer** out) ACC_NOEXCEPT;
/** Releases the handle; a scheduler over the optimizer keeps it alive.
 *  NULL-safe; not during another call on opt. */
ACC_API void acc_optimizer_destroy(acc_optimizer* opt) ACC_NOEXCEPT;
/** One optimizer step. Once prepared: a no-op on a micro-step that does not synchronize gradients;
 *  under fp16 the gradients are unscaled first and the step skipped on inf/nan; DeepSpeed's
 *  gradient_clipping clips first. Under ZeRO / FSDP it steps this process's shards and gathers them:
 *  collective. Locks opt (not the model whose parameters it changes). */
ACC_API ACC_NODISCARD acc_status acc_optimizer_step(acc_optimizer* opt) ACC_NOEXCEPT;
/** Sets the parameters' gradients to none; once prepared, a no-op on a micro-step that does not
 *  synchronize gradients.
 *  Locks opt. */
ACC_API ACC_NODISCARD acc_status acc_optimizer_zero_grad(acc_optimizer* opt) ACC_NOEXCEPT;
/** The learning rate of the first parameter group.
 *  Reads opt. */
ACC_API ACC_NODISCARD acc_status acc_optimizer_lr(const acc_optimizer* opt, double* out) ACC_NOEXCEPT;
/** 1 when the last acc_optimizer_step was skipped: fp16 found inf/nan gradients.
 *  Reads opt. */
ACC_API ACC_NODISCARD acc_status acc_optimizer_step_was_skipped(const acc_optimizer* opt, int32_t* out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Schedulers                                                                                      */

/** {"type": "constant"|"linear"|"cosine", "warmup_steps": 0, "total_steps": N (linear, cosine),
 *   "min_lr_ratio": 0.0 (cosine)}: the learning rate is lr * factor(step).
 *  Caller owns *out (acc_scheduler_destroy); it keeps opt alive. Sets opt's learning rate at once,
 *  without locking opt. */
ACC_API ACC_NODISCARD acc_status acc_scheduler_create(acc_optimizer* opt, const char* options_json,
                                                      acc_scheduler** out) ACC_NOEXCEPT;
/** Destroys the scheduler; the optimizer keeps its current learning rate.
 *  NULL-safe; not during another call on sched. */
ACC_API void acc_scheduler_destroy(acc_scheduler* sched) ACC_NOEXCEPT;
/** Advances the schedule and sets the optimizer's learning rate. Once prepared: no step while
 *  gradients do not synchronize or when the optimizer skipped its step; num_processes steps per call
 *  unless split_batches (as Accelerate's AcceleratedScheduler).
 *  Locks sched (not its optimizer, whose learning rate it sets). */
ACC_API ACC_NODISCARD acc_status acc_scheduler_step(acc_scheduler* sched) ACC_NOEXCEPT;
/** The optimizer's current learning rate (of its first parameter group).
 *  Reads sched. */
ACC_API ACC_NODISCARD acc_status acc_scheduler_last_lr(const acc_scheduler* sched, double* out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Datasets: map-style (a length, samples by index) or iterable (a stream). A dataset handle has no   */
/* busy check: the library never changes one after creation; callbacks run on the thread that     */
/* iterates a loader over the dataset, so loaders on several threads call them concurrently.        */

/** Samples are rows (dim 0) of `inputs` and, when not NULL, of `targets`. Both are copied.
 *  Caller owns *out (acc_dataset_destroy). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_tensors(const acc_tensor* inputs, const acc_tensor* targets,
                                                          acc_dataset** out) ACC_NOEXCEPT;
/** A memory-mapped file of little-endian tokens. options_json: {"block_size": T, "dtype": "uint16"|
 *  "int32"}. Sample i is tokens [i*T, i*T+T) as input and [i*T+1, i*T+T+1) as target (int64).
 *  Caller owns *out (acc_dataset_destroy). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_token_file(const char* path, const char* options_json,
                                                             acc_dataset** out) ACC_NOEXCEPT;
/** A dataset whose samples are the rows (dim 0) of every tensor of `columns` (torch's TensorDataset,
 *  named): sample i is {name: columns[name][i]}. The tensors must agree in their number of rows; they
 *  are copied, so `columns` may be destroyed at once. The caller owns the dataset.
 *  Caller owns *out (acc_dataset_destroy). Reads columns. */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_batch(const acc_batch* columns, acc_dataset** out) ACC_NOEXCEPT;

/** Fills one sample: creates *input (and *target, or leaves it NULL) with acc_tensor_from_host; the
 *  library takes ownership. Return ACC_OK, or any non-zero value to fail with ACC_ERR_CALLBACK.
 *  Runs on the thread that asks a loader for a batch. */
typedef acc_status (*acc_dataset_get_fn)(void* user_data, int64_t index, acc_tensor** input, acc_tensor** target);
/** A dataset of `length` samples produced by `get` on the calling thread. `free_user_data` (may be
 *  NULL) is called once when the dataset is no longer used.
 *  Caller owns *out (acc_dataset_destroy); user_data stays the caller's until free_user_data (also
 *  called at once if creation fails). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_callback(int64_t length, acc_dataset_get_fn get, void* user_data,
                                                           void (*free_user_data)(void*),
                                                           acc_dataset** out) ACC_NOEXCEPT;
/** Fills sample `index` into `sample`, an empty batch the library owns (add tensors with acc_batch_set;
 *  do not destroy it: acc_batch_destroy on it fails the callback with ACC_ERR_CALLBACK). Every sample
 *  names the same tensors in the same order. Return ACC_OK, or any non-zero value to fail with
 *  ACC_ERR_CALLBACK.
 *  Runs on the thread that asks a loader for a batch. */
typedef acc_status (*acc_dataset_get_batch_fn)(void* user_data, int64_t index, acc_batch* sample);
/** A dataset of `length` named samples produced by `get` on the thread that asks for a batch (see
 *  acc_dataset_from_callback). `free_user_data` (may be NULL) is called once when the dataset is no
 *  longer used, or at once if creation fails. The caller owns the dataset.
 *  Caller owns *out (acc_dataset_destroy). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_batch_callback(int64_t length, acc_dataset_get_batch_fn get,
                                                                 void* user_data, void (*free_user_data)(void*),
                                                                 acc_dataset** out) ACC_NOEXCEPT;

/** Rewinds an iterable dataset's stream for a pass over `epoch` (Accelerate's set_epoch). Return
 *  ACC_OK, or any non-zero value to fail with ACC_ERR_CALLBACK.
 *  Runs on the thread that starts a loader's pass. */
typedef acc_status (*acc_iterator_start_fn)(void* user_data, int64_t epoch);
/** The next sample of the stream: creates *input (and *target, or leaves it NULL) with
 *  acc_tensor_from_host and sets *has_sample to 1; the library takes ownership. At the end of the
 *  stream sets *has_sample to 0. Return ACC_OK, or any non-zero value to fail with ACC_ERR_CALLBACK.
 *  Runs on the thread that asks a loader for a batch. */
typedef acc_status (*acc_iterator_next_fn)(void* user_data, acc_tensor** input, acc_tensor** target,
                                           int32_t* has_sample);
/**
 * An iterable dataset (PyTorch's IterableDataset): no length, no indexing, read in order on the calling
 * thread. `start` (may be NULL) is called at the beginning of every pass; `next` until the stream ends.
 * Loaders over it take {"batch_size", "drop_last"} (not "shuffle"). Prepared with several processes,
 * either only the main process reads the stream and broadcasts each step (DataLoaderDispatcher: the
 * default, or dispatch_batches true), or every process reads all of it and keeps its slices
 * (IterableDatasetShard: dispatch_batches false); both complete the last batch from the first ones.
 * `free_user_data` (may be NULL) is called once when the dataset is no longer used.
 * Caller owns *out (acc_dataset_destroy); user_data as in acc_dataset_from_callback. Any thread; the
 * stream is one, so run one pass over it at a time.
 */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_iterator(acc_iterator_start_fn start, acc_iterator_next_fn next,
                                                           void* user_data, void (*free_user_data)(void*),
                                                           acc_dataset** out) ACC_NOEXCEPT;
/** The next sample of an iterable stream, filled into `sample` (an empty batch the library owns: do not
 *  destroy it), with *has_sample set to 1; at the end of the stream *has_sample = 0. Return ACC_OK, or
 *  any non-zero value to fail with ACC_ERR_CALLBACK.
 *  Runs on the thread that asks a loader for a batch. */
typedef acc_status (*acc_iterator_next_batch_fn)(void* user_data, acc_batch* sample, int32_t* has_sample);
/** An iterable dataset of named samples: acc_dataset_from_iterator with acc_batch samples.
 *  Caller owns *out (acc_dataset_destroy). Any thread; one pass over the stream at a time. */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_batch_iterator(acc_iterator_start_fn start,
                                                                 acc_iterator_next_batch_fn next, void* user_data,
                                                                 void (*free_user_data)(void*),
                                                                 acc_dataset** out) ACC_NOEXCEPT;

/** Releases the handle; loaders over the dataset keep it alive (free_user_data runs when the last one
 *  lets go, on that thread). NULL-safe; not during another call on ds. */
ACC_API void acc_dataset_destroy(acc_dataset* ds) ACC_NOEXCEPT;
/** Number of samples; ACC_ERR_UNSUPPORTED for an iterable dataset.
 *  Any thread. */
ACC_API ACC_NODISCARD acc_status acc_dataset_length(const acc_dataset* ds, int64_t* out) ACC_NOEXCEPT;
/** 1 for an iterable dataset (acc_dataset_length fails on one with ACC_ERR_UNSUPPORTED).
 *  Any thread. */
ACC_API ACC_NODISCARD acc_status acc_dataset_is_iterable(const acc_dataset* ds, int32_t* out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Data loaders                                                                                    */
/*                                                                                                 */
/* How acc_prepare shards a loader follows the accelerator's dataloader_config, as Accelerate's     */
/* prepare_data_loader does: "split_batches", "even_batches", "dispatch_batches" (unset: only       */
/* iterable datasets are dispatched), "use_seedable_sampler" and "data_seed" (shuffle with a        */
/* generator seeded data_seed + epoch; data_seed unset: the default generator's seed), and          */
/* "non_blocking". With one process a loader is not sharded.                                       */

/** {"batch_size": 1, "shuffle": false, "seed": the shuffling generator's seed (unset: each epoch seeds one
 *  from the default generator, as PyTorch's RandomSampler does), "drop_last": false}.
 *  Caller owns *out (acc_dataloader_destroy); it keeps ds alive. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_create(acc_dataset* ds, const char* options_json,
                                                       acc_dataloader** out) ACC_NOEXCEPT;
/**
 * A loader over explicit batches, which may differ in size (a batch sampler without a batch size:
 * Accelerate's batch_size=None). Batch b is the next batch_sizes[b] entries of `indices`, whose
 * `num_indices` entries must be the sum of batch_sizes; every batch is non-empty and every index inside the
 * dataset. Both arrays are copied. options_json: {"drop_last": false}, the sampler's drop_last: once
 * sharded, an incomplete last round of batches is dropped (else, with even_batches, completed with the
 * first batches). Batches of varying size can be neither split (split_batches) nor dispatched
 * (dispatch_batches true, whose steps are cut in equal parts): acc_prepare refuses both.
 * Caller owns *out (acc_dataloader_destroy); it keeps ds alive. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_dataloader_create_from_batches(acc_dataset* ds, const int64_t* indices,
                                                                    size_t num_indices, const int64_t* batch_sizes,
                                                                    int64_t num_batches, const char* options_json,
                                                                    acc_dataloader** out) ACC_NOEXCEPT;
/** Destroys the loader (ending its pass) and releases its dataset; loaders made from it by
 *  acc_dataloader_skip_first_batches are separate. NULL-safe; not during another call on dl. */
ACC_API void acc_dataloader_destroy(acc_dataloader* dl) ACC_NOEXCEPT;
/**
 * The next batch of this process. At the end of an epoch *has_batch is 0 and both tensors NULL; the
 * next call starts the following epoch (reshuffled: the generator's next permutation, or with the
 * seedable sampler data_seed + epoch). *out_target is NULL when the dataset has no targets.
 * Caller owns *out_input and *out_target (acc_tensor_destroy). Locks dl. Collective when prepared with
 * several processes and either dispatching (rank 0 broadcasts each step) or, at a pass's start, with
 * rng_types "torch" (rank 0's generator).
 */
ACC_API ACC_NODISCARD acc_status acc_dataloader_next(acc_dataloader* dl, acc_tensor** out_input,
                                                     acc_tensor** out_target, int32_t* has_batch) ACC_NOEXCEPT;
/** The next batch of this process as a new batch the caller owns and destroys, or *out = NULL at the end
 *  of an epoch (the next call starts the following one, as acc_dataloader_next).
 *  Caller owns *out (acc_batch_destroy). Locks dl. Collective as acc_dataloader_next. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_next_batch(acc_dataloader* dl, acc_batch** out) ACC_NOEXCEPT;
/** Batches per epoch on this process; ACC_ERR_UNSUPPORTED over an iterable dataset.
 *  Reads dl. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_length(const acc_dataloader* dl, int64_t* out) ACC_NOEXCEPT;
/** Ends the current pass; the next one runs `epoch` (the seedable sampler shuffles with data_seed +
 *  epoch; an iterable dataset's start callback receives it).
 *  Locks dl. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_set_epoch(acc_dataloader* dl, int64_t epoch) ACC_NOEXCEPT;
/** The epoch the current pass runs, or the next one when between passes (Accelerate's iteration).
 *  Reads dl. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_epoch(const acc_dataloader* dl, int64_t* out) ACC_NOEXCEPT;
/** 1 while the last batch of the epoch is current (Accelerate's end_of_dataloader).
 *  Reads dl. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_end_of_epoch(const acc_dataloader* dl, int32_t* out) ACC_NOEXCEPT;
/** While the last batch of a pass is current and sharding completed it with repeated samples: how many
 *  samples of that global batch are real (gathered in rank order they come first; what
 *  acc_gather_for_metrics keeps). 0 otherwise.
 *  Reads dl. */
ACC_API ACC_NODISCARD acc_status acc_dataloader_remainder(const acc_dataloader* dl, int64_t* out) ACC_NOEXCEPT;
/**
 * skip_first_batches: a new loader over the same data, prepared as `dl` is (or not) and at the same
 * epoch, each pass of which skips its first `num_batches` batches of this process (to resume an epoch
 * mid-way). A loader from a skipping loader skips both counts. Unlike Accelerate, a dispatching
 * loader also counts the batches of this process, not those of the main process's reading.
 * Caller owns *out (acc_dataloader_destroy); it shares dl's dataset and shuffling generator. Locks dl.
 */
ACC_API ACC_NODISCARD acc_status acc_dataloader_skip_first_batches(acc_dataloader* dl, int64_t num_batches,
                                                                   acc_dataloader** out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Training: prepare, backward, gradient accumulation, mixed precision, clipping, batch-size search */

/**
 * Prepares any of model, optimizer, scheduler, data loader (each may be NULL) for this process, in
 * place: the model moves to the device and is wrapped for distributed training as the config says (DDP:
 * parameters and buffers broadcast from rank 0, gradients all-reduced in buckets during backward; FSDP or
 * DeepSpeed ZeRO: parameters, gradients and optimizer state sharded, docs/sharding.md; a sharded model's
 * optimizer is rebuilt over its shards and must not have stepped yet); the data loader is
 * sharded across processes as Accelerate shards it. An optimizer must belong to a prepared model (the
 * same call or an earlier one). Preparing an object twice is ACC_ERR_INVALID_STATE.
 * Locks acc and every object given. Collective with several processes when it prepares a model (its
 * state comes from rank 0) or a sharded shuffling loader without the seedable sampler (its generator).
 */
ACC_API ACC_NODISCARD acc_status acc_prepare(acc_accelerator* acc, acc_model* model, acc_optimizer* opt,
                                             acc_scheduler* sched, acc_dataloader* dl) ACC_NOEXCEPT;
/**
 * Accelerate's prepare_pippy: the model (a built-in GPT or a Hugging Face family that pipelines) cut into one
 * stage per process, every process keeping its stage (rank 0's weights), for pipelined inference. options_json
 * (NULL: {}): {"split_points": "auto" (the default: where the balanced device map Accelerate plans over
 * num_chunks devices starts each one) or the blocks stages 1, 2, ... begin with (["model.layers.2"]),
 * "no_split_module_classes": [...] ("auto"'s; default: the model's own), "num_chunks": micro-batches
 * (default: the number of processes; "auto" plans over the processes, where Accelerate plans over num_chunks
 * devices, the same split where the two are equal), "gather_output": false}. Then acc_model_forward with inputs alone (no
 * targets; every process passes the same batch, its rows padded with zeros to a multiple of num_chunks)
 * runs the micro-batches through the stages and writes the logits on the last process, or with
 * gather_output on every process; on the others *out_output is NULL (Accelerate returns None there).
 * One process: the model runs whole. Locks acc and model. Collective. Since 1.4.
 */
ACC_API ACC_NODISCARD acc_status acc_prepare_pippy(acc_accelerator* acc, acc_model* model,
                                                   const char* options_json) ACC_NOEXCEPT;
/** Back-propagates `loss` (a scalar from acc_model_forward with targets).
 *  Locks acc (not the models). Collective with several processes on a micro-step that synchronizes
 *  gradients (DDP's all-reduce, ZeRO's reduce-scatter; under ZeRO-3 on every micro-step: it gathers). */
ACC_API ACC_NODISCARD acc_status acc_backward(acc_accelerator* acc, const acc_tensor* loss) ACC_NOEXCEPT;

/**
 * Opens Accelerate's accumulate(model) scope for one batch: decides whether this micro-step
 * synchronizes gradients (every gradient_accumulation_steps-th call, and always on the last batch of
 * the active data loader when sync_with_dataloader), and otherwise skips the model's gradient
 * all-reduce (DDP no_sync). While not synchronizing, optimizer and scheduler steps and zero_grad on
 * prepared objects are no-ops. acc_backward always divides the loss by the number of steps.
 * Locks acc (not model). Local.
 */
ACC_API ACC_NODISCARD acc_status acc_accumulate_begin(acc_accelerator* acc, acc_model* model) ACC_NOEXCEPT;
/** Closes the scope acc_accumulate_begin opened for `model`.
 *  Locks acc (not model). Local. */
ACC_API ACC_NODISCARD acc_status acc_accumulate_end(acc_accelerator* acc, acc_model* model) ACC_NOEXCEPT;
/** 1 when the current micro-step synchronizes gradients and steps the optimizer (sync_gradients).
 *  Reads acc. */
ACC_API ACC_NODISCARD acc_status acc_sync_gradients(const acc_accelerator* acc, int32_t* out) ACC_NOEXCEPT;
/** The fp16 loss scaler's current scale and growth tracker (clean steps since the last change).
 *  ACC_ERR_INVALID_STATE unless mixed_precision is "fp16".
 *  Reads acc (acc_optimizer_step updates the scaler). */
ACC_API ACC_NODISCARD acc_status acc_grad_scaler_state(const acc_accelerator* acc, double* out_scale,
                                                       int64_t* out_growth_tracker) ACC_NOEXCEPT;
/** PyTorch's clip_grad_norm_ over the model's gradients (unscaled first under fp16); writes the
 *  total norm before clipping. norm_type 2.0 is the usual Euclidean norm.
 *  Locks acc and model. Local under DDP (its gradients are already the same everywhere); collective
 *  under ZeRO / FSDP (the norm over every process's shards). */
ACC_API ACC_NODISCARD acc_status acc_clip_grad_norm(acc_accelerator* acc, acc_model* model, double max_norm,
                                                    double norm_type, double* out_total_norm) ACC_NOEXCEPT;
/** Clamps every gradient of the model to [-clip_value, clip_value] (unscaled first under fp16).
 *  Locks acc and model. Local. */
ACC_API ACC_NODISCARD acc_status acc_clip_grad_value(acc_accelerator* acc, acc_model* model,
                                                     double clip_value) ACC_NOEXCEPT;

/** A caller's training step at a given batch size; return ACC_ERR_OUT_OF_MEMORY to ask for a smaller
 *  one, ACC_OK when it ran, anything else to stop the search with that status.
 *  Runs on the thread that called acc_find_executable_batch_size. */
typedef acc_status (*acc_batch_size_fn)(void* user_data, int64_t batch_size);
/** find_executable_batch_size: calls fn with starting_batch_size, then 90% of the last size after each
 *  out-of-memory (128, 115, 103, ...), until it succeeds; *out_batch_size is the size that ran.
 *  Fails with ACC_ERR_OUT_OF_MEMORY once the size reaches zero.
 *  Any thread; user_data stays the caller's. */
ACC_API ACC_NODISCARD acc_status acc_find_executable_batch_size(int64_t starting_batch_size, acc_batch_size_fn fn,
                                                                void* user_data, int64_t* out_batch_size) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Collectives (every process must make the same calls in the same order), and the local splits    */

/** Concatenates `t` from every process along dim 0, in rank order (dim-0 sizes may differ).
 *  Caller owns *out (acc_tensor_destroy). Locks acc. Collective. */
ACC_API ACC_NODISCARD acc_status acc_gather(acc_accelerator* acc, const acc_tensor* t, acc_tensor** out) ACC_NOEXCEPT;
/** acc_gather, then on the last batch of the active prepared data loader drops the samples that
 *  sharding duplicated to even out the processes, so metrics see each sample exactly once.
 *  Caller owns *out (acc_tensor_destroy). Locks acc. Collective. */
ACC_API ACC_NODISCARD acc_status acc_gather_for_metrics(acc_accelerator* acc, const acc_tensor* t,
                                                        acc_tensor** out) ACC_NOEXCEPT;
/** Element-wise reduction across processes; the result is on every process.
 *  Caller owns *out (acc_tensor_destroy). Locks acc. Collective. */
ACC_API ACC_NODISCARD acc_status acc_reduce(acc_accelerator* acc, const acc_tensor* t, acc_reduce_op op,
                                            acc_tensor** out) ACC_NOEXCEPT;
/** A copy of process `from_process`'s tensor on every process (shape and dtype must agree).
 *  Caller owns *out (acc_tensor_destroy). Locks acc. Collective. */
ACC_API ACC_NODISCARD acc_status acc_broadcast(acc_accelerator* acc, const acc_tensor* t, int32_t from_process,
                                               acc_tensor** out) ACC_NOEXCEPT;
/** Pads `t` along `dim` to the largest size any process has, with `pad_index`, at the end (or at the
 *  start when pad_first is 1). A dim outside the tensor returns it unchanged, as Accelerate does.
 *  Caller owns *out (acc_tensor_destroy). Locks acc. Collective (unless dim is outside the tensor). */
ACC_API ACC_NODISCARD acc_status acc_pad_across_processes(acc_accelerator* acc, const acc_tensor* t, int32_t dim,
                                                          double pad_index, int32_t pad_first,
                                                          acc_tensor** out) ACC_NOEXCEPT;
/** This process's contiguous share of `n` items: the first n % num_processes processes get one more.
 *  With apply_padding, *out_padded_count is the common length everyone pads to (repeating the last
 *  item); otherwise it equals *out_count.
 *  Any thread. Local: computed from the process layout. */
ACC_API ACC_NODISCARD acc_status acc_split_between_processes(const acc_accelerator* acc, int64_t n,
                                                             int32_t apply_padding, int64_t* out_start,
                                                             int64_t* out_count,
                                                             int64_t* out_padded_count) ACC_NOEXCEPT;
/** Rows of `t` (dim 0) for this process, split as acc_split_between_processes; with apply_padding the
 *  share is padded with copies of the tensor's last row to the common length.
 *  Caller owns *out (acc_tensor_destroy). Any thread (no lock). Local. */
ACC_API ACC_NODISCARD acc_status acc_split_tensor_between_processes(acc_accelerator* acc, const acc_tensor* t,
                                                                    int32_t apply_padding,
                                                                    acc_tensor** out) ACC_NOEXCEPT;
/** gather_object: the items of every process, concatenated in rank order, on every process (a process
 *  may give none). A collective.
 *  Caller owns *out (acc_bytes_list_destroy). Locks acc; reads items. Collective. */
ACC_API ACC_NODISCARD acc_status acc_gather_object(acc_accelerator* acc, const acc_bytes_list* items,
                                                   acc_bytes_list** out) ACC_NOEXCEPT;
/** broadcast_object_list: a copy of process `from_process`'s items on every process (the other
 *  processes' items are not read).
 *  Caller owns *out (acc_bytes_list_destroy). Locks acc; reads items. Collective. */
ACC_API ACC_NODISCARD acc_status acc_broadcast_object(acc_accelerator* acc, const acc_bytes_list* items,
                                                      int32_t from_process, acc_bytes_list** out) ACC_NOEXCEPT;
/** gather_for_metrics for objects (Accelerate's non-tensor data and use_gather_object=True): one item
 *  per sample of the batch; acc_gather_object, then on the last batch of the active prepared loader only
 *  the real samples are kept, so every sample is counted exactly once. Samples that do not fit one
 *  tensor (rows of different shapes) travel this way too, serialized by the caller.
 *  Caller owns *out (acc_bytes_list_destroy). Locks acc; reads items. Collective. */
ACC_API ACC_NODISCARD acc_status acc_gather_object_for_metrics(acc_accelerator* acc, const acc_bytes_list* items,
                                                               acc_bytes_list** out) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Byte lists: objects cross as byte strings the caller serializes (JSON, a binding's own         */
/* encoding, ...).                                                                                */

/** An empty list.
 *  Caller owns *out (acc_bytes_list_destroy). Any thread. */
ACC_API ACC_NODISCARD acc_status acc_bytes_list_create(acc_bytes_list** out) ACC_NOEXCEPT;
/** Destroys a list the caller owns; bytes borrowed from it go with it.
 *  NULL-safe; not during another call on list. */
ACC_API void acc_bytes_list_destroy(acc_bytes_list* list) ACC_NOEXCEPT;
/** Appends a copy of `size` bytes at `data` (data may be NULL when size is 0; a size no buffer can have,
 *  such as SIZE_MAX, is ACC_ERR_INVALID_ARGUMENT).
 *  Locks list. */
ACC_API ACC_NODISCARD acc_status acc_bytes_list_append(acc_bytes_list* list, const void* data,
                                                       size_t size) ACC_NOEXCEPT;
/** The number of items.
 *  Reads list. */
ACC_API ACC_NODISCARD acc_status acc_bytes_list_count(const acc_bytes_list* list, int64_t* out) ACC_NOEXCEPT;
/** The index-th item: its bytes (borrowed from the list until it is changed or destroyed; never NULL)
 *  and its size.
 *  Borrowed: *out_data, as said. Reads list. */
ACC_API ACC_NODISCARD acc_status acc_bytes_list_get(const acc_bytes_list* list, int64_t index, const void** out_data,
                                                    size_t* out_size) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Checkpoints: Accelerate's save_state / load_state (docs/checkpoints.md describes every file)   */

/**
 * Saves everything prepared with `acc` into directory `dir`: every model (model.safetensors,
 * model_1.safetensors, ...), optimizer (optimizer.safetensors + optimizer.json: moments, step counts,
 * learning rates), scheduler, the fp16 gradient scaler, every data loader's position (epoch and batches
 * given out, so a resume continues mid-epoch), the accumulation step, each process's random states and
 * the registered objects. No pickles: tensors in safetensors, the rest in JSON. The files are written into
 * ".<name>.acc-staging" beside `dir` (claimed with a lock: a second job saving there at the same time gets
 * ACC_ERR_IO), synced, completed by manifest.json and put in place: a crash leaves the previous checkpoint
 * (or none), never a partial one under `dir`. An existing folder keeps the files that are not the
 * checkpoint's (a file of the user's under a checkpoint file's name is refused, ACC_ERR_IO naming it); a
 * regular file at `dir` is refused. `dir` must be on a filesystem every process sees.
 * `dir` NULL: ProjectConfiguration's automatic naming ("project_config": {"automatic_checkpoint_naming":
 * true, "project_dir": ...}): {project_dir}/checkpoints/checkpoint_{iteration}, keeping the newest
 * "total_limit" ones (only folders named checkpoint_{n} holding a libacc manifest count, and only their own
 * files are removed); the iteration then advances.
 *  Locks acc. Collective.
 */
ACC_API ACC_NODISCARD acc_status acc_save_state(acc_accelerator* acc, const char* dir) ACC_NOEXCEPT;
/**
 * Restores a checkpoint of acc_save_state into the objects prepared with `acc` (the same kinds and
 * numbers, prepared in the same order). A directory without manifest.json, or with a file shorter than
 * the manifest says, is refused naming the file. From a different number of processes, models,
 * optimizers, schedulers, the scaler and registered objects are restored and the per-process random
 * states and loader positions are not (the main process says so on stderr). `dir` NULL: the newest
 * complete checkpoint under {project_dir}/checkpoints (an interrupted save is never picked); the
 * automatic naming continues after it.
 *  Locks acc. Collective.
 */
ACC_API ACC_NODISCARD acc_status acc_load_state(acc_accelerator* acc, const char* dir) ACC_NOEXCEPT;
/** Loads what the config's "resume_from_checkpoint" names: "latest", the newest complete checkpoint under
 *  {project_dir}/checkpoints, or none yet (a fresh start: *resumed = 0); or a checkpoint directory. Unset:
 *  nothing (*resumed = 0). Call it after acc_prepare and acc_register_for_checkpointing: a job restarted by
 *  `acc launch --max_restarts` then continues from its last save.
 *  Locks acc. Collective. */
ACC_API ACC_NODISCARD acc_status acc_resume_from_checkpoint(acc_accelerator* acc, int32_t* resumed) ACC_NOEXCEPT;
/** Writes an object's bytes for acc_save_state: append them to `out` (several items are concatenated;
 *  the list is the library's: acc_bytes_list_destroy on it fails the save with ACC_ERR_CALLBACK).
 *  Return ACC_OK, or any non-zero value to fail the save with ACC_ERR_CALLBACK. */
typedef acc_status (*acc_checkpoint_save_fn)(void* user_data, acc_bytes_list* out);
/** Restores an object from the bytes its save function wrote (borrowed for the call). Return ACC_OK, or
 *  any non-zero value to fail the load with ACC_ERR_CALLBACK. */
typedef acc_status (*acc_checkpoint_load_fn)(void* user_data, const void* data, size_t size);
/** Accelerate's register_for_checkpointing: the object is saved (custom_checkpoint_{i}.bin, in
 *  registration order) on the main process and restored on every process. `free_user_data` (may be NULL)
 *  is called once when the accelerator is destroyed, or at once if registering fails.
 *  Locks acc. */
ACC_API ACC_NODISCARD acc_status acc_register_for_checkpointing(acc_accelerator* acc, acc_checkpoint_save_fn save,
                                                                acc_checkpoint_load_fn load, void* user_data,
                                                                void (*free_user_data)(void*)) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Experiment trackers: Accelerate's log_with, init_trackers, log, end_training (docs/trackers.md) */

/**
 * Starts the trackers the accelerator's `log_with` names ("tensorboard", "jsonl", "csv", "mlflow", "wandb",
 * or "all") for a run named `project_name`, on the main process only; the other processes check the
 * arguments and return. `config_json` (NULL for none) is a JSON object of hyperparameters every tracker
 * records (nested objects flattened to "a.b", lists as their JSON text; wandb keeps them as given).
 * `init_kwargs_json` (NULL for none) holds options per tracker: {"tensorboard": {"filename_suffix"},
 * "mlflow": {"run_name", "tags", "description"}, "wandb": {"name", "entity", "tags", "notes", "group",
 * "job_type", "id", "dir", "mode", "config"}}. Files go under `<logging_dir>/<project_name>/`
 * (logging_dir: project_config.logging_dir, by default project_dir); MLflow's file store under
 * MLFLOW_TRACKING_URI, else `<logging_dir>/mlruns`; a W&B offline run under `<WANDB_DIR or logging_dir>/wandb/`.
 * ACC_ERR_INVALID_STATE while an earlier run's trackers still run (acc_end_training ends them).
 *  Locks acc. Local.
 */
ACC_API ACC_NODISCARD acc_status acc_init_trackers(acc_accelerator* acc, const char* project_name,
                                                   const char* config_json, const char* init_kwargs_json) ACC_NOEXCEPT;
/**
 * Logs `values_json`, a JSON object, to every tracker at `step` (negative: no step, Accelerate's
 * step=None). Numbers and booleans are scalars (NaN, Infinity and -Infinity are accepted, as Python's
 * json writes them); a string is text (TensorBoard's add_text; MLflow skips it); an object of numbers
 * puts several scalars under one name (add_scalars); null is skipped. On the main process only; the
 * others check the JSON and return. Without log_with a no-op; ACC_ERR_INVALID_STATE before
 * acc_init_trackers or after acc_end_training.
 *  Locks acc. Local.
 */
ACC_API ACC_NODISCARD acc_status acc_log(acc_accelerator* acc, const char* values_json, int64_t step) ACC_NOEXCEPT;
/** Finishes the trackers: files synced and closed, the TensorBoard session and the MLflow run marked
 *  finished. A no-op when none run (and on the processes other than the main one). Unlike Accelerate's
 *  end_training it keeps the process group, which lives until the accelerator is destroyed (which also
 *  finishes trackers still running).
 *  Locks acc. Local. */
ACC_API ACC_NODISCARD acc_status acc_end_training(acc_accelerator* acc) ACC_NOEXCEPT;

/**
 * Accelerate's save_model: the unwrapped model's state (tied weights once) in Hugging Face format under
 * `dir` (created when missing): `model.safetensors`, or, when the tensor data is larger than
 * `max_shard_size`, shards `model-00001-of-0000N.safetensors` (tensors in state order, a new shard when
 * the next tensor would pass the limit, a tensor larger than it alone) and `model.safetensors.index.json`
 * ({"metadata": {"total_size"}, "weight_map"}); every file with {"format": "pt"} metadata, written
 * atomically. Shards and the index an earlier save left under other names are removed. `max_shard_size`:
 * "10GB" (10 * 10^9 bytes), "10GiB" (10 * 2^30), "500MB", "2KB", or a number of bytes; NULL for "10GB";
 * anything else is ACC_ERR_INVALID_ARGUMENT naming the string. A model that is not prepared is saved by
 * this process; a prepared one on the main process, the others waiting (an error anywhere fails it on
 * every process). See docs/checkpoints.md, "save_model".
 *  Reads model. Collective (for a prepared model).
 */
ACC_API ACC_NODISCARD acc_status acc_save_model(const acc_model* model, const char* dir,
                                                const char* max_shard_size) ACC_NOEXCEPT;

/**
 * transformers' save_pretrained for a model from acc_model_from_pretrained: acc_save_model's files
 * (model.safetensors, or shards past max_shard_size with model.safetensors.index.json) plus config.json
 * (its "dtype" set to the weights') and generation_config.json, so that acc_model_from_pretrained and
 * transformers' from_pretrained load `dir`. Another model is ACC_ERR_INVALID_ARGUMENT. Prepared: the main
 * process writes, the others wait, as acc_save_model.
 *  Reads model. Collective (for a prepared model).
 */
ACC_API ACC_NODISCARD acc_status acc_model_save_pretrained(const acc_model* model, const char* dir,
                                                           const char* max_shard_size) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Adapters (LoRA, as Hugging Face peft)                                                           */

/**
 * peft's get_peft_model with a LoraConfig: `lora_config_json` holds LoraConfig's fields ("r",
 * "lora_alpha", "lora_dropout", "target_modules" (a list of names or dotted suffixes, one regular
 * expression matching whole module names, or "all-linear"), "exclude_modules", "bias" ("none" | "all" |
 * "lora_only"), "use_rslora", "modules_to_save", "init_lora_weights" (true | "gaussian" | false),
 * "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern", "task_type"; peft's defaults,
 * peft's matching rules). Each targeted linear layer computes base(x) + B(A(dropout(x))) * scaling
 * (alpha / r, or alpha / sqrt(r) with use_rslora); every other parameter is frozen, as peft does. The
 * LoRA weights are parameters named as peft names them without "base_model.model." and the adapter
 * name ("model.layers.0.self_attn.q_proj.lora_A.weight"). Targets matching no module is
 * ACC_ERR_INVALID_ARGUMENT listing the model's linear layers; r <= 0, an unknown key or a wrong type is
 * ACC_ERR_INVALID_ARGUMENT naming it. A model with an adapter, or a prepared one, is ACC_ERR_INVALID_STATE.
 * Draws A from the process-wide CPU generator (seed it through the accelerator's "seed"). Since 1.2.
 *  Locks model.
 */
ACC_API ACC_NODISCARD acc_status acc_model_add_lora(acc_model* model, const char* lora_config_json) ACC_NOEXCEPT;
/**
 * peft's PeftModel.from_pretrained / load_adapter: reads `dir`'s adapter_config.json and
 * adapter_model.safetensors (as peft or acc_model_save_adapter wrote them), adds the adapter and loads its
 * weights. options_json (NULL: {}): {"is_trainable": false} (peft's default: the adapter is frozen too).
 * A tensor the adapter does not have, one it lacks, or a shape that differs is ACC_ERR_INVALID_ARGUMENT
 * naming it (peft only warns); the model is unchanged then. Since 1.2.
 *  Locks model.
 */
ACC_API ACC_NODISCARD acc_status acc_model_load_adapter(acc_model* model, const char* dir,
                                                        const char* options_json) ACC_NOEXCEPT;
/**
 * peft's save_pretrained of the adapter: writes adapter_config.json and adapter_model.safetensors into
 * `dir` (created if missing) with peft's names ("base_model.model.<module>.lora_A.weight"), atomically;
 * other files in `dir` are kept. A model without an adapter is ACC_ERR_INVALID_STATE. Prepared: the main
 * process writes, the others wait, as acc_model_save_pretrained. Since 1.2.
 *  Reads model. Collective (for a prepared model).
 */
ACC_API ACC_NODISCARD acc_status acc_model_save_adapter(const acc_model* model, const char* dir) ACC_NOEXCEPT;
/**
 * peft's merge_and_unload: adds each LoRA layer's B A * scaling to its base weight, puts trained
 * modules_to_save copies in place of the originals and removes the adapter, leaving a plain model
 * (acc_model_save_pretrained then writes a transformers checkpoint). Parameters keep their
 * requires_grad. A model without an adapter, or a prepared one, is ACC_ERR_INVALID_STATE. Since 1.2.
 *  Locks model.
 */
ACC_API ACC_NODISCARD acc_status acc_model_merge_adapter(acc_model* model) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Profiling (Accelerate's profile() with ProfileKwargs: LibTorch's Kineto profiler)               */

/**
 * Accelerate's profile(): starts torch.profiler's Kineto profiler on the calling thread, configured by the
 * accelerator's "profile_kwargs" or, when `profile_kwargs_json` is neither NULL nor "", by that object instead (as
 * profile(profile_handler) replaces the accelerator's handler): ProfileKwargs' keys "activities" (["cpu"],
 * ["cuda"] with a CUDA device; null: cpu, and cuda on a CUDA device), "schedule_option" ({"wait", "warmup",
 * "active", "repeat", "skip_first", "skip_first_wait"}: torch.profiler.schedule), "record_shapes",
 * "profile_memory", "with_stack", "with_flops", "with_modules", "output_trace_dir" (docs/configuration.md,
 * "Profiling"). Without a schedule everything until acc_profile_end is recorded; with one, acc_profile_step
 * ends each step and the schedule picks the recorded ones, each inside a "ProfilerStep#N" range. libacc's
 * phases are ranges of their own: "acc::data", "acc::forward", "acc::backward", "acc::gradient_sync",
 * "acc::optimizer_step". A profile already running in this process is ACC_ERR_INVALID_STATE; an unknown
 * key or a bad value is ACC_ERR_INVALID_CONFIG naming it; an activity this machine lacks ("cuda" without a
 * CUDA device) is ACC_ERR_UNSUPPORTED naming it. Since 1.3.
 *  Locks acc. Local. Profiles the calling thread: make the other profile calls, and train, on it.
 */
ACC_API ACC_NODISCARD acc_status acc_profile_begin(acc_accelerator* acc, const char* profile_kwargs_json) ACC_NOEXCEPT;
/** torch.profiler's step(): the current step ends and the next begins; the schedule starts or stops
 *  recording here. ACC_ERR_INVALID_STATE without a profile, or from another thread than acc_profile_begin's.
 *  Since 1.3.
 *  Locks acc. Local. */
ACC_API ACC_NODISCARD acc_status acc_profile_step(acc_accelerator* acc) ACC_NOEXCEPT;
/** Ends the profile (the end of Accelerate's `with accelerator.profile()`): recording stops; with
 *  output_trace_dir (created if missing) the last recorded cycle is written there as the Chrome trace
 *  `profile_<process index>.json` (atomically), then every process waits for the others (Accelerate's
 *  wait_for_everyone). A schedule that recorded nothing writes no file and says so on stderr.
 *  ACC_ERR_INVALID_STATE without a profile, or from another thread than acc_profile_begin's; the profile
 *  ends even when writing fails. A trace that cannot be written (a full or read-only disk) is ACC_ERR_IO naming
 *  the file; the previous trace is kept and nothing else is left. Destroying the accelerator ends a running
 *  profile without writing, and so does the end of the thread that began it. Since 1.3.
 *  Locks acc. Collective with output_trace_dir (the wait); local otherwise. */
ACC_API ACC_NODISCARD acc_status acc_profile_end(acc_accelerator* acc) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Text: Hugging Face tokenizers and chat templates (the `tokenizers` crate and minijinja inside)  */

/** A tokenizer as transformers' AutoTokenizer loads it. Thread-safe: encode, decode, look-ups and
 *  chat templates may run on many threads at once (data-loader workers); set_special_token may not. */
typedef struct acc_tokenizer acc_tokenizer;
/** Encoded rows (transformers' BatchEncoding): one per text, more with overflowing windows. */
typedef struct acc_encoding acc_encoding;
/** Receives a piece of generated text (UTF-8, never half a character, not NUL-terminated); return 0 to go
 *  on, anything else to stop generating. */
typedef int32_t (*acc_text_fn)(void* user_data, const char* piece, size_t length);

/** Frees a string libacc returned to the caller (acc_tokenizer_decode, ...). NULL is fine. Since 1.4. */
ACC_API void acc_text_free(char* text) ACC_NOEXCEPT;
/**
 * AutoTokenizer.from_pretrained(dir): tokenizer.json with tokenizer_config.json (special tokens, padding and
 * truncation sides, model_max_length, the model class's own pipeline: LlamaTokenizer, GemmaTokenizer,
 * Qwen2Tokenizer, GPT2Tokenizer, BertTokenizer as transformers 5 rebuilds them), special_tokens_map.json,
 * chat_template.jinja and additional_chat_templates/. A folder with tokenizer.model only is
 * ACC_ERR_INVALID_ARGUMENT saying how to convert it; a malformed file names itself. Since 1.4.
 * Caller owns *out (acc_tokenizer_destroy). Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_from_pretrained(const char* dir, acc_tokenizer** out) ACC_NOEXCEPT;
/**
 * A byte-level BPE tokenizer (GPT-2 / Llama-3's kind) trained on count texts (lengths[i] bytes each, UTF-8) by
 * tokenizers' BpeTrainer: a from-scratch model's first step. options_json: {"vocab_size": 1000,
 * "min_frequency": 2, "special_tokens": [..] (the first ids), "bos_token", "eos_token", "pad_token", "unk_token"
 * (each one of special_tokens), "chat_template": "...", "model_max_length": n}. Since 1.4.
 * Caller owns *out. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_train_bpe(const char* const* texts, const size_t* lengths, int64_t count,
                                                         const char* options_json, acc_tokenizer** out) ACC_NOEXCEPT;
/** NULL is fine. Since 1.4. */
ACC_API void acc_tokenizer_destroy(acc_tokenizer* tok) ACC_NOEXCEPT;
/** Writes tokenizer.json, tokenizer_config.json and chat_template.jinja (each atomically) into dir (created
 *  if missing), which transformers' AutoTokenizer loads. Since 1.4. Any thread. */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_save_pretrained(const acc_tokenizer* tok, const char* dir) ACC_NOEXCEPT;
/**
 * What the tokenizer is, as JSON: {"vocab_size", "len" (with added tokens), "model_type", "special_tokens"
 * ({"bos_token": "<s>", ...}, transformers' special_tokens_map), "special_token_ids", "all_special_tokens",
 * "all_special_ids", "chat_templates" (names), "model_max_length" (null: none), "padding_side",
 * "truncation_side"}. Caller frees *out_json with acc_text_free. Since 1.4. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_info(const acc_tokenizer* tok, char** out_json) ACC_NOEXCEPT;
/** transformers' `tok.pad_token = "..."`: sets a named special token (bos_token, eos_token, unk_token,
 *  sep_token, pad_token, cls_token, mask_token); token NULL unsets it. Since 1.4. Not while other threads use
 *  tok. */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_set_special_token(acc_tokenizer* tok, const char* name,
                                                                 const char* token) ACC_NOEXCEPT;
/** The id of a token of the vocabulary (added tokens included); *out is -1 when it has none. Since 1.4. */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_token_to_id(const acc_tokenizer* tok, const char* token,
                                                           int64_t* out) ACC_NOEXCEPT;
/** The token of an id; *out is NULL for an id outside the vocabulary. Caller frees *out with acc_text_free.
 *  Since 1.4. */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_id_to_token(const acc_tokenizer* tok, int64_t id,
                                                           char** out) ACC_NOEXCEPT;
/**
 * transformers' tok(texts, text_pair=pairs, ...): count texts (lengths[i] bytes of UTF-8 each; invalid UTF-8
 * is ACC_ERR_INVALID_ARGUMENT naming the text and byte), with pairs (may be NULL). options_json (NULL: {}):
 * {"add_special_tokens": true, "truncation": false | true | "longest_first" | "only_first" | "only_second",
 * "max_length": n (default model_max_length), "stride": 0, "return_overflowing_tokens": false,
 * "padding": false | true | "longest" | "max_length", "pad_to_multiple_of": n, "padding_side": "left" |
 * "right", "truncation_side": ..., "threads": 1}. Padding without a pad token is ACC_ERR_INVALID_ARGUMENT.
 * Caller owns *out (acc_encoding_destroy). Since 1.4. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_encode(const acc_tokenizer* tok, const char* const* texts,
                                                      const size_t* lengths, const char* const* pairs,
                                                      const size_t* pair_lengths, int64_t count,
                                                      const char* options_json, acc_encoding** out) ACC_NOEXCEPT;
/** The number of rows. Since 1.4. */
ACC_API ACC_NODISCARD acc_status acc_encoding_count(const acc_encoding* enc, int64_t* out) ACC_NOEXCEPT;
/**
 * One row's field: "input_ids", "attention_mask", "token_type_ids", "special_tokens_mask", "offsets" (2 per
 * token: [start, end) byte offsets into the text of the token's sequence), "sequence_ids" (0 text, 1 pair, -1
 * special or padding), "assistant_masks" (acc_tokenizer_apply_chat_template's only). Borrowed: *data is valid
 * while enc lives; *length counts the int64 values. A row's input, for overflowing windows, is
 * acc_encoding_sample. Since 1.4.
 */
ACC_API ACC_NODISCARD acc_status acc_encoding_get(const acc_encoding* enc, int64_t row, const char* field,
                                                  const int64_t** data, int64_t* length) ACC_NOEXCEPT;
/** The index of the text a row encodes (transformers' overflow_to_sample_mapping). Since 1.4. */
ACC_API ACC_NODISCARD acc_status acc_encoding_sample(const acc_encoding* enc, int64_t row, int64_t* out) ACC_NOEXCEPT;
/** The rows as a batch of int64 tensors [rows, length]: input_ids, attention_mask, token_type_ids (and
 *  assistant_masks where present). Rows of different lengths (no padding) are ACC_ERR_INVALID_ARGUMENT. Caller
 *  owns *out (acc_batch_destroy). Since 1.4. */
ACC_API ACC_NODISCARD acc_status acc_encoding_to_batch(const acc_encoding* enc, acc_batch** out) ACC_NOEXCEPT;
/** NULL is fine. Since 1.4. */
ACC_API void acc_encoding_destroy(acc_encoding* enc) ACC_NOEXCEPT;
/**
 * transformers' decode: options_json (NULL: {}) {"skip_special_tokens": false, "clean_up_tokenization_spaces":
 * the tokenizer's}. Ids outside the vocabulary are skipped (as transformers); a negative one is
 * ACC_ERR_INVALID_ARGUMENT. Caller frees *out_text (NUL-terminated; a decoded NUL stays in it, so
 * *out_length, which may be NULL, gives the length) with acc_text_free. Since 1.4. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_decode(const acc_tokenizer* tok, const int64_t* ids, int64_t count,
                                                      const char* options_json, char** out_text,
                                                      size_t* out_length) ACC_NOEXCEPT;
/**
 * transformers' apply_chat_template. messages_json: [{"role", "content", ...}, ...]. options_json (NULL: {}):
 * {"chat_template": a template or the name of one of the tokenizer's ("default", "tool_use"),
 * "add_generation_prompt": false, "continue_final_message": false | true | a field name, "tools": [schemas],
 * "documents": [...], "template_variables": {"enable_thinking": false, ...}, "now": seconds since the epoch
 * for strftime_now (default: now), and acc_tokenizer_encode's options for the ids}. *out_text (caller frees
 * with acc_text_free) is the rendered text; out_encoding (may be NULL) gets its ids encoded without special
 * tokens (the template writes them), with "assistant_masks" from {% generation %} blocks (all 0 without).
 * A template that raises (raise_exception), loops past its budget or fails names the template and line.
 * Since 1.4. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_tokenizer_apply_chat_template(const acc_tokenizer* tok, const char* messages_json,
                                                                   const char* options_json, char** out_text,
                                                                   acc_encoding** out_encoding) ACC_NOEXCEPT;
/**
 * Text generation: the prompt encoded with tok (options "add_special_tokens": true; false for a prompt a chat
 * template rendered), acc_generate's options and stopping (generation_config.json's eos ids), then
 * {"stop_strings": [...] (the text contains one: stop; kept in the text, as transformers),
 * "skip_special_tokens": true}. on_text (may be NULL) receives the text in pieces as transformers'
 * TextStreamer gives them. *out_text is the new text only; caller frees it with acc_text_free.
 * Since 1.4. Locks model; on_text runs on the calling thread.
 */
ACC_API ACC_NODISCARD acc_status acc_generate_text(acc_model* model, const acc_tokenizer* tok, const char* prompt,
                                                   const char* options_json, acc_text_fn on_text, void* user_data,
                                                   char** out_text) ACC_NOEXCEPT;

/* ---------------------------------------------------------------------------------------------- */
/* Datasets from files: JSONL, CSV, Parquet and Arrow files (save_to_disk folders too), tokenized,  */
/* grouped or prepared as TRL's SFTTrainer prepares them, batched by transformers' or TRL's        */
/* collators (docs/data.md, "Datasets from files"). The dataset is map-style: loaders over it      */
/* batch, shuffle and shard it as any other (acc_dataloader_create, acc_prepare), and each batch   */
/* is the collator's padded batch of its rows, int64 tensors named as the collator names them      */
/* (input_ids, attention_mask, labels, position_ids, ...), of lengths that vary from batch to batch. */

/**
 * Reads `path` (a file or a folder; NULL when the options give "files"), prepares its rows with tok and
 * keeps them in memory (or in "cache_dir"). options_json (NULL: {}), every key optional:
 * {"files": path or [paths] (instead of `path`), "format": "auto" | "jsonl" | "csv" | "parquet" | "arrow" |
 * "arrow_file", "columns": [names to read; one the files lack is an error listing theirs],
 * "mode": "sft" (default: TRL's SFT preparation of text, messages or prompt/completion rows) | "tokenize"
 * (tok(text), as datasets.map) | "group_texts" (run_clm's blocks), "text_column": "text",
 * "add_special_tokens": true, "truncation": false (tokenize), "max_length": n or null (sft: 1024; tokenize:
 * none), "truncation_mode": "keep_start" | "keep_end", "block_size": 1024, "map_batch_size": 1000,
 * "packing": false, "packing_strategy": "bfd" | "bfd_split" | "wrapped", "completion_only_loss": null (on for
 * prompt/completion rows), "assistant_only_loss": false, "chat_template": text or name, "eos_token",
 * "pad_token", "padding_free": false, "collator": "trl" (sft's default) | "default" (group_texts') |
 * "language_modeling" (tokenize's) | "with_padding", "padding_side": "right" | "left" (unset: the tokenizer's;
 * TRL's collator: right), "pad_to_multiple_of": n, "threads": 1, "cache_dir": a folder for the processed rows
 * (datasets.map's cache, keyed by the files, the tokenizer and these settings)}.
 * An unknown key or a bad value is ACC_ERR_INVALID_CONFIG naming it; a missing column ACC_ERR_INVALID_ARGUMENT
 * listing the columns there are; a file that cannot be read or holds bad data ACC_ERR_IO naming it (and the line).
 * Caller owns *out (acc_dataset_destroy); the dataset does not keep tok. Since 1.4. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_files(const char* path, const acc_tokenizer* tok,
                                                        const char* options_json, acc_dataset** out) ACC_NOEXCEPT;
/**
 * acc_dataset_from_files with the accelerator's resolved `data` settings (data.files, data.mode, ...: the keys
 * of docs/configuration.md, from the environment or acc_accelerator_create's JSON, recorded with their sources
 * in the run record), so that a run's data pipeline is its configuration. A bad setting is
 * ACC_ERR_INVALID_CONFIG naming the key, its value and its source.
 * Caller owns *out (acc_dataset_destroy). Since 1.4. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_dataset_from_config(const acc_accelerator* acc, const acc_tokenizer* tok,
                                                         acc_dataset** out) ACC_NOEXCEPT;
/**
 * The batch a loader makes of the samples `indices[0..count)` of a map-style dataset, in that order (for a
 * files dataset, the collator's padded batch of those rows): to look at a dataset without a loader.
 * Caller owns *out (acc_batch_destroy). Since 1.4. Any thread.
 */
ACC_API ACC_NODISCARD acc_status acc_dataset_get_batch(const acc_dataset* ds, const int64_t* indices, int64_t count,
                                                       acc_batch** out) ACC_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif
#endif /* ACC_ACC_H */
