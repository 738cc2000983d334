package ai.acc;

import ai.acc.internal.AccRaw;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A trainable model: a built-in family (MLP, GPT), a TorchScript module, or a Hugging Face causal LM
 * ({@link #fromPretrained}, {@link #fromConfig}).
 */
public final class Model extends NativeObject {
  private Model(long ptr) {
    super(ptr, AccRaw::acc_model_destroy);
  }

  /**
   * A built-in model from its JSON spec, e.g. {@code {"type": "mlp", "sizes": [4, 32, 1],
   * "activation": "tanh", "loss": "mse"}}. Parameters come from the CPU generator (seed it through
   * the accelerator's "seed").
   *
   * @param specJson the model's spec, a JSON object
   * @return the model; close it
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} for a bad spec (no or an unknown type, an unknown key,
   *     a bad value)
   */
  public static Model create(String specJson) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_model_create(specJson, out);
    return new Model(out[0]);
  }

  /**
   * Loads a TorchScript module; options: {@code {"loss": "mse"|"cross_entropy"|"none"}}.
   *
   * @param path the TorchScript file
   * @param optionsJson the options, a JSON object; null for the defaults (no loss)
   * @return the model; close it
   * @throws AccException {@link ErrorCode#IO} when the file cannot be opened; {@link ErrorCode#INVALID_CONFIG}
   *     for bad options
   */
  public static Model loadTorchScript(String path, String optionsJson) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_model_load_torchscript(path, optionsJson, out);
    return new Model(out[0]);
  }

  /**
   * transformers' {@code from_pretrained}: a Hugging Face model directory ({@code config.json}, and
   * {@code model.safetensors} or the shards {@code model.safetensors.index.json} lists) of a
   * LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or MixtralForCausalLM. Options ({@code
   * null}: {@code {}}): {@code {"dtype": "auto" | "float32" | "bfloat16" | "float16"}}, {@code "auto"}
   * being the dtype {@code config.json} records; with {@code "device_map"} ({@code "auto"}, {@code
   * "balanced"}, {@code "balanced_low_0"}, {@code "sequential"}), {@code "max_memory"}, {@code
   * "no_split_module_classes"} and {@code "offload_folder"} it is Accelerate's {@code
   * load_checkpoint_and_dispatch}: each weight goes where {@link #inferAutoDeviceMap} plans it, in
   * memory ({@code "cpu"}) or left on the disk (the mapped checkpoint, read layer by layer; for
   * inference). A missing file is {@link ErrorCode#IO} naming it;
   * names or shapes that differ from transformers' are {@link ErrorCode#INVALID_ARGUMENT}, listing
   * them. The model comes in eval mode; it takes the named batch {@code "input_ids"} (with optional
   * {@code "attention_mask"}, {@code "position_ids"}, {@code "labels"}) and returns {@code "logits"}
   * (and {@code "loss"}). {@link #generate} continues token sequences with it. See docs/hf-models.md.
   *
   * @param dir the model directory
   * @param optionsJson the options, a JSON object; {@code null} for {@code {}}
   * @return the model, in eval mode; close it
   * @throws AccException {@link ErrorCode#IO} for a missing file; {@link ErrorCode#INVALID_ARGUMENT} for names
   *     or shapes that differ from transformers'; {@link ErrorCode#UNSUPPORTED} for another architecture
   */
  public static Model fromPretrained(String dir, String optionsJson) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_model_from_pretrained(dir, optionsJson, out);
    return new Model(out[0]);
  }

  /**
   * {@link #fromPretrained(String, String)} with the default options.
   *
   * @param dir the model directory
   * @return the model, in eval mode; close it
   * @throws AccException as {@link #fromPretrained(String, String)}
   */
  public static Model fromPretrained(String dir) {
    return fromPretrained(dir, null);
  }

  /**
   * transformers' {@code from_config}: the architecture a {@code config.json} text names (those
   * {@link #fromPretrained} knows; another is {@link ErrorCode#UNSUPPORTED}, naming it) with fresh
   * weights initialised as transformers does (normal(0, initializer_range), zero biases, unit norms)
   * from the CPU generator (seed it through the accelerator's "seed"). Options as {@link
   * #fromPretrained}'s ({@code null}: {@code {}}), plus {@code {"device": "meta"}}: Accelerate's {@code
   * init_empty_weights}, the names and shapes without weight memory (for {@link #moduleSizes} and {@link
   * #inferAutoDeviceMap}). {@link #savePretrained} writes it with its config.
   *
   * @param configJson the text of a {@code config.json}
   * @param optionsJson the options, a JSON object; {@code null} for {@code {}}
   * @return the model; close it
   * @throws AccException {@link ErrorCode#UNSUPPORTED} for an architecture {@link #fromPretrained} does not know,
   *     naming it
   */
  public static Model fromConfig(String configJson, String optionsJson) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_model_from_config(configJson, optionsJson, out);
    return new Model(out[0]);
  }

  /**
   * {@link #fromConfig(String, String)} with the default options.
   *
   * @param configJson the text of a {@code config.json}
   * @return the model; close it
   * @throws AccException as {@link #fromConfig(String, String)}
   */
  public static Model fromConfig(String configJson) {
    return fromConfig(configJson, null);
  }

  /** Receives the tokens of every step of {@link #generate}. */
  @FunctionalInterface
  public interface TokenListener {
    /**
     * The tokens just chosen, one per sequence (a finished sequence gets the pad token); return true
     * to go on, false to stop there. An exception stops generation and fails {@link #generate} with
     * {@link ErrorCode#CALLBACK}, with the exception as the cause.
     *
     * @param tokens the tokens chosen at this step, one per sequence
     * @return true to go on, false to stop
     * @throws Exception any failure: it stops generation and fails {@link #generate} with {@link
     *     ErrorCode#CALLBACK}
     */
    boolean onTokens(long[] tokens) throws Exception;
  }

  /**
   * transformers' {@code generate} for a model of {@link #fromPretrained}: continues {@code inputIds}
   * [batch, time] (integer token ids, left-padded where {@code attentionMask}, [batch, time] of 0/1,
   * has zeros; {@code null}: no padding) and returns the whole sequences [batch, time + n] (int64),
   * n &lt;= max_new_tokens: fewer when every sequence has emitted a stop token or {@code onTokens}
   * stopped it. Options ({@code null}: the model's generation_config.json): {@code {"max_new_tokens":
   * 20, "do_sample": false, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0,
   * "eos_token_id": id or [ids], "pad_token_id": id, "seed": n}}; greedy decoding equals
   * transformers'. {@code onTokens} ({@code null}: none) runs on this thread after every step while
   * the model is in use (calling the model from it fails with {@link ErrorCode#BUSY}).
   *
   * @param inputIds the prompts, [batch, time] integer token ids
   * @param attentionMask [batch, time] of 0/1, zeros where {@code inputIds} is padded; {@code null}: no padding
   * @param optionsJson the generation options, a JSON object; {@code null} for the model's
   *     generation_config.json
   * @param onTokens called after every step; {@code null} for none
   * @return the whole sequences, [batch, time + n] int64; close it
   * @throws AccException {@link ErrorCode#CALLBACK} when {@code onTokens} throws (the exception is the cause);
   *     {@link ErrorCode#INVALID_ARGUMENT} for a model that is not a causal LM
   */
  public Tensor generate(Tensor inputIds, Tensor attentionMask, String optionsJson, TokenListener onTokens) {
    TokenAdapter adapter = onTokens == null ? null : new TokenAdapter(onTokens);
    long p = enter();
    long x = enter(inputIds), mask = enter(attentionMask);
    try {
      long[] out = new long[1];
      AccRaw.accx_generate_java(p, x, mask, optionsJson, adapter, out);
      Tensor result = new Tensor(out[0]);
      Throwable failure = adapter == null ? null : adapter.failure;
      if (failure != null) {
        result.close();
        AccException e = new AccException(ErrorCode.CALLBACK,
            "the token listener threw at step " + adapter.steps + " (generation stopped): " + failure);
        e.initCause(failure);
        throw e;
      }
      return result;
    } finally {
      leave(attentionMask, mask);
      leave(inputIds, x);
      leave(p);
    }
  }

  /**
   * {@link #generate(Tensor, Tensor, String, TokenListener)} without padding or a listener.
   *
   * @param inputIds the prompts, [batch, time] integer token ids, not padded
   * @param optionsJson the generation options, a JSON object; {@code null} for the model's
   *     generation_config.json
   * @return the whole sequences, [batch, time + n] int64; close it
   * @throws AccException as {@link #generate(Tensor, Tensor, String, TokenListener)}
   */
  public Tensor generate(Tensor inputIds, String optionsJson) {
    return generate(inputIds, null, optionsJson, null);
  }

  /** Receives the text of {@link #generateText} in pieces, as transformers' TextStreamer gives them. */
  @FunctionalInterface
  public interface TextListener {
    /**
     * The next piece of the generated text (never half a character); return true to go on, false to
     * stop there. An exception stops generation and fails {@link #generateText} with {@link
     * ErrorCode#CALLBACK}, with the exception as the cause.
     *
     * @param piece the new text
     * @return true to go on, false to stop
     * @throws Exception any failure: it stops generation and fails {@link #generateText} with {@link
     *     ErrorCode#CALLBACK}
     */
    boolean onText(String piece) throws Exception;
  }

  /**
   * Text generation (transformers' generate with a tokenizer and a TextStreamer): {@code prompt} is
   * encoded with {@code tokenizer} (options {@code "add_special_tokens": true}; false for a prompt a
   * chat template rendered), generated with {@link #generate}'s options, then {@code {"stop_strings":
   * [...], "skip_special_tokens": true}}. {@code onText} ({@code null}: none) gets the text in pieces on
   * this thread while the model is in use.
   *
   * @param tokenizer the tokenizer
   * @param prompt the prompt
   * @param optionsJson the options, a JSON object; {@code null} for the model's generation_config.json
   * @param onText called with each piece; {@code null} for none
   * @return the new text only
   * @throws AccException {@link ErrorCode#CALLBACK} when {@code onText} throws (the exception is the
   *     cause); {@link ErrorCode#INVALID_CONFIG} for bad options, naming them
   */
  public String generateText(Tokenizer tokenizer, String prompt, String optionsJson, TextListener onText) {
    TextAdapter adapter = onText == null ? null : new TextAdapter(onText);
    long p = enter();
    long t = enter(tokenizer);
    try {
      byte[][] out = new byte[1][];
      AccRaw.accx_generate_text_java(p, t, Tokenizer.utf8(prompt), Tokenizer.utf8(optionsJson), adapter, out);
      Throwable failure = adapter == null ? null : adapter.failure;
      if (failure != null) {
        AccException e = new AccException(ErrorCode.CALLBACK,
            "the text listener threw at piece " + adapter.pieces + " (generation stopped): " + failure);
        e.initCause(failure);
        throw e;
      }
      return Tokenizer.string(out[0]);
    } finally {
      leave(tokenizer, t);
      leave(p);
    }
  }

  /**
   * {@link #generateText(Tokenizer, String, String, TextListener)} without a listener.
   *
   * @param tokenizer the tokenizer
   * @param prompt the prompt
   * @param optionsJson the options; {@code null} for the model's generation_config.json
   * @return the new text only
   */
  public String generateText(Tokenizer tokenizer, String prompt, String optionsJson) {
    return generateText(tokenizer, prompt, optionsJson, null);
  }

  /** What the C trampoline of generateText calls: never throws; records the listener's failure. */
  static final class TextAdapter {
    private final TextListener listener;
    int pieces;
    Throwable failure;

    TextAdapter(TextListener listener) {
      this.listener = listener;
    }

    /** Called from C on the generating thread: false to stop, also on failure. */
    boolean onText(byte[] utf8) {
      ++pieces;
      try {
        return listener.onText(Tokenizer.string(utf8));
      } catch (Throwable t) {
        failure = t;
        return false;
      }
    }
  }

  /** What the C trampoline calls: never throws; records the listener's failure for the caller. */
  static final class TokenAdapter {
    private final TokenListener listener;
    int steps;
    Throwable failure;

    TokenAdapter(TokenListener listener) {
      this.listener = listener;
    }

    /** Called from C on the generating thread: false to stop, also on failure. */
    boolean onTokens(long[] tokens) {
      ++steps;
      try {
        return listener.onTokens(tokens);
      } catch (Throwable t) {
        failure = t;
        return false;
      }
    }
  }

  /** The result of {@link #forward}: the output and, with targets, the loss. Closes both. */
  public record Output(Tensor output, Tensor loss) implements AutoCloseable {
    @Override
    public void close() {
      if (output != null) output.close();
      if (loss != null) loss.close();
    }
  }

  /**
   * Runs the model; with targets the result also holds the scalar loss (ready for backward).
   *
   * @param input the input
   * @param targets the targets; null for none
   * @return the output and the loss (null without targets); close it
   */
  public Output forward(Tensor input, Tensor targets) {
    long p = enter();
    long x = enter(input), y = enter(targets);
    try {
      long[] out = new long[1];
      long[] loss = targets == null ? null : new long[1];
      AccRaw.acc_model_forward(p, x, y, out, loss);
      return new Output(Tensor.orNull(out[0]), loss == null ? null : Tensor.orNull(loss[0]));
    } finally {
      leave(targets, y);
      leave(input, x);
      leave(p);
    }
  }

  /**
   * Runs the model and returns only the scalar loss (a training step).
   *
   * @param input the input
   * @param targets the targets
   * @return the scalar loss, with its autograd graph; close it
   */
  public Tensor loss(Tensor input, Tensor targets) {
    long p = enter();
    long x = enter(input), y = enter(targets);
    try {
      long[] loss = new long[1];
      AccRaw.acc_model_forward(p, x, y, null, loss);
      return new Tensor(loss[0]);
    } finally {
      leave(targets, y);
      leave(input, x);
      leave(p);
    }
  }

  /**
   * Runs the model and returns only its output.
   *
   * @param input the input
   * @return the output; close it
   */
  public Tensor predict(Tensor input) {
    long p = enter();
    long x = enter(input);
    try {
      long[] out = new long[1];
      AccRaw.acc_model_forward(p, x, 0, out, null);
      return new Tensor(out[0]);
    } finally {
      leave(input, x);
      leave(p);
    }
  }

  /**
   * Runs the model on a named batch, as Accelerate's {@code model(**batch)}, and returns its outputs as
   * a batch (close it). The built-in MLP takes {@code "input"} (and {@code "targets"}) and returns
   * {@code "output"} (and {@code "loss"}); the GPT takes {@code "input_ids"} with {@code "targets"}
   * (aligned, -1 ignored) or Hugging Face's {@code "labels"} (shifted inside, -100 ignored) and returns
   * {@code "logits"} (and {@code "loss"}); a TorchScript module gets the tensors by its forward's
   * argument names. A name the model does not take is refused. The loss keeps its graph, ready for
   * {@link Accelerator#backward}.
   *
   * @param batch the inputs by name
   * @return the outputs by name; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a name the model does not take
   */
  public Batch forwardBatch(Batch batch) {
    long p = enter();
    long b = enter(batch);
    try {
      long[] out = new long[1];
      AccRaw.acc_model_forward_batch(p, b, out);
      return new Batch(out[0]);
    } finally {
      leave(batch, b);
      leave(p);
    }
  }

  /**
   * Training (dropout on) or evaluation mode.
   *
   * @param training true for training mode, false for evaluation mode
   */
  public void setTraining(boolean training) {
    long p = enter();
    try {
      AccRaw.acc_model_set_training(p, training ? 1 : 0);
    } finally {
      leave(p);
    }
  }

  /**
   * The number of scalar parameters.
   *
   * @return the number of parameter elements
   */
  public long numParameters() {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_model_num_parameters(p, n);
      return n[0];
    } finally {
      leave(p);
    }
  }

  /**
   * Accelerate's {@code compute_module_sizes}: the bytes of every module and tensor by dotted name
   * ({@code ""} the whole model, {@code "model.layers.0"}, ...), in the model's order, counting floating
   * tensors in {@code dtype} ({@code "float32"}, {@code "bfloat16"}, {@code "float16"}; {@code null}:
   * their own; as Accelerate, a dtype wider than a tensor's own does not grow it). A tied output
   * embedding counts once. Works on an empty model ({@link #fromConfig} with {@code {"device":
   * "meta"}}). See docs/big-models.md.
   *
   * @param dtype the dtype floating tensors are counted in; {@code null} for their own
   * @return the bytes by dotted name, in the model's order, {@code ""} first
   */
  public Map<String, Long> moduleSizes(String dtype) {
    long p = enter();
    String json;
    try {
      String[] out = new String[1];
      AccRaw.acc_model_module_sizes(p, dtype, out);
      json = out[0];
    } finally {
      leave(p);
    }
    Map<String, Long> sizes = new LinkedHashMap<>();
    FlatJson.parse(json).forEach((name, v) -> {
      if (!(v instanceof Long n)) {
        throw new AccException(ErrorCode.INTERNAL, "module size of " + name + ": " + v);
      }
      sizes.put(name, n);
    });
    return sizes;
  }

  /**
   * Accelerate's {@code infer_auto_device_map} (with {@code get_balanced_memory} for {@code "auto"},
   * {@code "balanced"} and {@code "balanced_low_0"}) for this model, which may be empty ({@link
   * #fromConfig} with {@code {"device": "meta"}}). Options ({@code null}: {@code {}}): {@code
   * {"device_map": "auto" | "balanced" | "balanced_low_0" | "sequential", "max_memory": {"0": "10GiB",
   * "1": 8000000000, "cpu": "30GB", "disk": ...}, "no_split_module_classes": [...], "dtype",
   * "offload_buffers", "fallback_allocation"}}; an unknown key, device or size is {@link
   * ErrorCode#INVALID_CONFIG} naming it. See docs/big-models.md.
   *
   * @param optionsJson the options, a JSON object; {@code null} for {@code {}}
   * @return module name to device, in the model's order: an {@link Integer} for an accelerator's
   *     index, the {@link String} {@code "cpu"} or {@code "disk"} otherwise, e.g. {@code
   *     {"model.embed_tokens": 0, ..., "lm_head": "cpu"}}, as Accelerate's for the same sizes and budget
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} for an unknown key, device or size, naming it
   */
  public Map<String, Object> inferAutoDeviceMap(String optionsJson) {
    long p = enter();
    String json;
    try {
      String[] out = new String[1];
      AccRaw.acc_infer_auto_device_map(p, optionsJson, out);
      json = out[0];
    } finally {
      leave(p);
    }
    Map<String, Object> devices = new LinkedHashMap<>();
    FlatJson.parse(json)
        .forEach((name, v) -> devices.put(name, v instanceof Long i ? Math.toIntExact(i) : v));
    return devices;
  }

  /**
   * Copies of the named parameters and buffers, in order. Close the tensors.
   *
   * <p>Under ZeRO-3 or FSDP each tensor is gathered from the shards (Accelerate's get_state_dict): a collective,
   * every process calls it.
   *
   * @return the copies by name, parameters then buffers
   */
  public Map<String, Tensor> stateDict() {
    long p = enter();
    Map<String, Tensor> out = new LinkedHashMap<>();
    try {
      long[] n = new long[1];
      AccRaw.acc_model_state_size(p, n);
      for (long i = 0; i < n[0]; ++i) {
        String[] name = new String[1];
        long[] t = new long[1];
        AccRaw.acc_model_state_get(p, i, name, t);
        out.put(name[0], new Tensor(t[0]));
      }
      return out;
    } catch (RuntimeException e) {
      out.values().forEach(Tensor::close);
      throw e;
    } finally {
      leave(p);
    }
  }

  /**
   * Writes the state dict to a safetensors file, atomically.
   *
   * <p>Under ZeRO-3 or FSDP the state is gathered from the shards: a collective, every process calls it and the
   * main process writes.
   *
   * @param path the file to write
   */
  public void saveSafetensors(String path) {
    long p = enter();
    try {
      AccRaw.acc_model_save_safetensors(p, path);
    } finally {
      leave(p);
    }
  }

  /**
   * Accelerate's {@code save_model}: the unwrapped model in Hugging Face format under {@code dir}:
   * {@code model.safetensors}, or shards {@code model-00001-of-0000N.safetensors} with {@code
   * model.safetensors.index.json} when it is larger than {@code maxShardSize} ({@code "10GB"}: 10^10
   * bytes, {@code "10GiB"}: 10 * 2^30, or a number of bytes; {@code null} for {@code "10GB"}). A prepared
   * model is written by the main process, every process calling (collective). See docs/checkpoints.md.
   *
   * @param dir the directory, created when missing
   * @param maxShardSize the largest shard, e.g. {@code "10GB"}; {@code null} for {@code "10GB"}
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a {@code maxShardSize} it cannot read, naming it
   */
  public void saveModel(String dir, String maxShardSize) {
    long p = enter();
    try {
      AccRaw.acc_save_model(p, dir, maxShardSize);
    } finally {
      leave(p);
    }
  }

  /**
   * transformers' {@code save_pretrained} for a model of {@link #fromPretrained} or {@link
   * #fromConfig}: {@link #saveModel}'s files ({@code model.safetensors}, or shards past {@code
   * maxShardSize} with {@code model.safetensors.index.json}; {@code null} for {@code "10GB"}) plus
   * {@code config.json} (its "dtype" the weights') and {@code generation_config.json}, so that {@link
   * #fromPretrained} and transformers' {@code from_pretrained} load {@code dir}. Another model is
   * {@link ErrorCode#INVALID_ARGUMENT}. A prepared model is written by the main process, every process
   * calling (collective).
   *
   * @param dir the directory
   * @param maxShardSize the largest shard, as {@link #saveModel}'s; {@code null} for {@code "10GB"}
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a model not of {@link #fromPretrained} or {@link
   *     #fromConfig}
   */
  public void savePretrained(String dir, String maxShardSize) {
    long p = enter();
    try {
      AccRaw.acc_model_save_pretrained(p, dir, maxShardSize);
    } finally {
      leave(p);
    }
  }

  /**
   * Loads a safetensors file; every name and shape must match.
   *
   * @param path the safetensors file
   * @throws AccException {@link ErrorCode#IO} when the file cannot be read; {@link ErrorCode#INVALID_ARGUMENT}
   *     for a name or shape that does not match
   */
  public void loadSafetensors(String path) {
    long p = enter();
    try {
      AccRaw.acc_model_load_safetensors(p, path);
    } finally {
      leave(p);
    }
  }

  /**
   * Freezes ({@code requiresGrad} false) or unfreezes every parameter whose whole dotted name the regular
   * expression {@code pattern} matches (Python's re syntax, matched by RE2 in linear time, as
   * {@code "param_groups"}: {@code model\.embed_tokens\..*}, {@code .*bias}), as torch's {@code p.requires_grad_()}.
   * A frozen parameter gets no gradient, no optimizer state (create the optimizer after freezing) and no
   * gradient all-reduce, and {@link Accelerator#clipGradNorm} ignores it.
   *
   * @param pattern a regular expression over whole parameter names
   * @param requiresGrad false to freeze, true to unfreeze
   * @return how many parameters matched
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a pattern matching nothing or a bad expression,
   *     naming it; {@link ErrorCode#INVALID_STATE} for a prepared model (freeze before {@link
   *     Accelerator#prepare})
   */
  public long setRequiresGrad(String pattern, boolean requiresGrad) {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_model_set_requires_grad(p, pattern, requiresGrad ? 1 : 0, n);
      return n[0];
    } finally {
      leave(p);
    }
  }

  /**
   * peft's {@code get_peft_model} with a {@code LoraConfig} as JSON: {@code "r"}, {@code "lora_alpha"},
   * {@code "lora_dropout"}, {@code "target_modules"} (names, one regular expression, or {@code "all-linear"}),
   * {@code "bias"}, {@code "use_rslora"}, {@code "modules_to_save"}, {@code "init_lora_weights"}, {@code
   * "layers_to_transform"}, {@code "rank_pattern"}, {@code "alpha_pattern"}, ... with peft's defaults, e.g.
   * {@code {"r": 8, "lora_alpha": 16, "target_modules": "all-linear"}}. Each targeted linear layer computes
   * {@code base(x) + B(A(dropout(x))) * scaling} and every other parameter is frozen. A comes from the CPU
   * generator (seed it through the accelerator's "seed").
   *
   * @param loraConfigJson the LoraConfig, a JSON object
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for targets matching nothing (listing the model's
   *     linear layers) or a bad key or value, naming it; {@link ErrorCode#INVALID_STATE} for a model that has an
   *     adapter, or a prepared one
   */
  public void addLora(String loraConfigJson) {
    long p = enter();
    try {
      AccRaw.acc_model_add_lora(p, loraConfigJson);
    } finally {
      leave(p);
    }
  }

  /**
   * peft's {@code PeftModel.from_pretrained}: reads {@code dir}'s {@code adapter_config.json} and {@code
   * adapter_model.safetensors} (as peft or {@link #saveAdapter} wrote them), adds the adapter and loads its
   * weights.
   *
   * @param dir the adapter directory
   * @param optionsJson {@code {"is_trainable": false}} (peft's default: the adapter is frozen too); {@code null}
   *     for {@code {}}
   * @throws AccException {@link ErrorCode#IO} for a missing file; {@link ErrorCode#INVALID_ARGUMENT} for a
   *     tensor the adapter does not have, one it lacks, or another shape, naming it (the model unchanged)
   */
  public void loadAdapter(String dir, String optionsJson) {
    long p = enter();
    try {
      AccRaw.acc_model_load_adapter(p, dir, optionsJson);
    } finally {
      leave(p);
    }
  }

  /**
   * peft's {@code save_pretrained} of the adapter: {@code adapter_config.json} and {@code
   * adapter_model.safetensors} in {@code dir} (created if missing), with peft's tensor names, so that peft's
   * {@code PeftModel.from_pretrained} and {@link #loadAdapter} read it. A prepared model is written by the main
   * process, every process calling (collective).
   *
   * @param dir the directory
   * @throws AccException {@link ErrorCode#INVALID_STATE} for a model without an adapter
   */
  public void saveAdapter(String dir) {
    long p = enter();
    try {
      AccRaw.acc_model_save_adapter(p, dir);
    } finally {
      leave(p);
    }
  }

  /**
   * peft's {@code merge_and_unload}: each LoRA layer's {@code B A * scaling} is added to its base weight and
   * the adapter removed, leaving a plain model ({@link #savePretrained} then writes a transformers checkpoint).
   *
   * @throws AccException {@link ErrorCode#INVALID_STATE} for a model without an adapter, or a prepared one
   */
  public void mergeAdapter() {
    long p = enter();
    try {
      AccRaw.acc_model_merge_adapter(p);
    } finally {
      leave(p);
    }
  }
}
