package ai.acc;

import ai.acc.internal.AccRaw;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The context of one training process (Accelerate's {@code Accelerator}): process state, the process
 * group, preparation of models, optimizers and data, backward, collectives and checkpoints ({@link
 * #saveState}, {@link #loadState}, {@link #resumeFromCheckpoint}, {@link
 * #registerForCheckpointing(Checkpointable)}).
 *
 * <pre>{@code
 * try (Accelerator acc = Accelerator.create("{\"seed\": 1234}")) {
 *   ...
 * }
 * }</pre>
 *
 * One handle is used by one thread at a time; different handles may be used concurrently
 * (concurrent use of one handle fails with {@link ErrorCode#BUSY}).
 */
public final class Accelerator extends NativeObject {
  /**
   * What a registered object's save or load left for the caller of saveState / loadState; shared
   * with the adapters, which never refer to the accelerator (the C side holds them globally, so the
   * accelerator would never become unreachable).
   */
  private final AtomicReference<Throwable> checkpointFailure = new AtomicReference<>();

  private Accelerator(long ptr) {
    super(ptr, AccRaw::acc_accelerator_destroy);
  }

  /**
   * An accelerator with the defaults (and whatever {@code acc launch} set in the environment).
   *
   * @return the accelerator; close it
   * @throws AccException as {@link #create(String)}
   */
  public static Accelerator create() {
    return create(null);
  }

  /**
   * An accelerator from Accelerate's constructor keys as JSON ({@code null} or "" for defaults):
   * "cpu", "mixed_precision", "gradient_accumulation_steps", "seed", "dataloader_config",
   * "ddp_kwargs", ... With WORLD_SIZE &gt; 1 in the environment this joins the process group.
   *
   * @param configJson a JSON object of Accelerate's constructor keys; {@code null} or "" for the defaults
   * @return the accelerator; close it
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} for malformed JSON, an unknown key or a bad value;
   *     {@link ErrorCode#UNSUPPORTED} for a valid value this build does not support (e.g. a tracker it lacks);
   *     {@link ErrorCode#DISTRIBUTED} when joining the process group fails
   */
  public static Accelerator create(String configJson) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_accelerator_create(configJson, out);
    return new Accelerator(out[0]);
  }

  private int intQuery(java.util.function.BiConsumer<Long, int[]> f) {
    long p = enter();
    try {
      int[] v = new int[1];
      f.accept(p, v);
      return v[0];
    } finally {
      leave(p);
    }
  }

  private String stringQuery(java.util.function.BiConsumer<Long, String[]> f) {
    long p = enter();
    try {
      String[] v = new String[1];
      f.accept(p, v);
      return v[0];
    } finally {
      leave(p);
    }
  }

  /**
   * This process's global rank.
   *
   * @return the rank, from 0 to {@link #numProcesses()} - 1 (RANK)
   */
  public int processIndex() {
    return intQuery(AccRaw::acc_process_index);
  }

  /**
   * This process's rank on its machine.
   *
   * @return the rank on this machine (LOCAL_RANK)
   */
  public int localProcessIndex() {
    return intQuery(AccRaw::acc_local_process_index);
  }

  /**
   * The number of processes.
   *
   * @return the number of processes of the job (WORLD_SIZE)
   */
  public int numProcesses() {
    return intQuery(AccRaw::acc_num_processes);
  }

  /**
   * Whether this is the global main process.
   *
   * @return true on the process of rank 0
   */
  public boolean isMainProcess() {
    return intQuery(AccRaw::acc_is_main_process) != 0;
  }

  /**
   * This process's device, e.g. "cpu" or "cuda:0".
   *
   * @return the device's name
   */
  public String device() {
    return stringQuery(AccRaw::acc_device);
  }

  /**
   * Accelerate's DistributedType name: "NO", "MULTI_CPU", "MULTI_GPU".
   *
   * @return the DistributedType name
   */
  public String distributedType() {
    return stringQuery(AccRaw::acc_distributed_type);
  }

  /**
   * The resolved configuration as JSON, each value with where it came from.
   *
   * @return the configuration, a JSON object
   */
  public String configJson() {
    return stringQuery(AccRaw::acc_config_json);
  }

  /**
   * Prepares any of model, optimizer, scheduler and data loader (each may be null) for this process,
   * in place. An optimizer needs its model prepared (now or before); preparing twice fails with
   * {@link ErrorCode#INVALID_STATE}.
   *
   * @param model the model, or null
   * @param opt an optimizer, or null; its model must be prepared (in this call or before)
   * @param sched a scheduler, or null
   * @param dl a data loader, or null
   * @throws AccException {@link ErrorCode#INVALID_STATE} for an object prepared before or an optimizer whose
   *     model is not prepared; {@link ErrorCode#INVALID_ARGUMENT} when all four are null
   */
  public void prepare(Model model, Optimizer opt, Scheduler sched, DataLoader dl) {
    long p = enter();
    long m = enter(model), o = enter(opt), s = enter(sched), d = enter(dl);
    try {
      AccRaw.acc_prepare(p, m, o, s, d);
    } finally {
      leave(dl, d);
      leave(sched, s);
      leave(opt, o);
      leave(model, m);
      leave(p);
    }
  }

  /**
   * Back-propagates a scalar loss from {@link Model#forward}.
   *
   * @param loss the scalar loss, with its autograd graph
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a tensor of more than one element or without
   *     an autograd graph
   */
  public void backward(Tensor loss) {
    long p = enter();
    long l = enter(loss);
    try {
      AccRaw.acc_backward(p, l);
    } finally {
      leave(loss, l);
      leave(p);
    }
  }

  private interface TensorOp {
    void apply(long acc, long t, long[] out);
  }

  private Tensor tensorOp(Tensor t, TensorOp f) {
    long p = enter();
    long tp = enter(t);
    try {
      long[] out = new long[1];
      f.apply(p, tp, out);
      return new Tensor(out[0]);
    } finally {
      leave(t, tp);
      leave(p);
    }
  }

  /**
   * Concatenates {@code t} from every process along dim 0, in rank order (a collective).
   *
   * @param t this process's tensor (the processes' dim-0 sizes may differ)
   * @return the concatenation, on every process; close it
   */
  public Tensor gather(Tensor t) {
    return tensorOp(t, AccRaw::acc_gather);
  }

  /**
   * {@link #gather}, but on the last batch of the active prepared data loader drops the samples that
   * sharding duplicated, so metrics see each sample exactly once.
   *
   * @param t this process's tensor
   * @return the concatenation without the duplicated samples, on every process; close it
   */
  public Tensor gatherForMetrics(Tensor t) {
    return tensorOp(t, AccRaw::acc_gather_for_metrics);
  }

  /**
   * Element-wise reduction across processes; every process gets the result.
   *
   * @param t this process's tensor
   * @param op the reduction
   * @return the result; close it
   */
  public Tensor reduce(Tensor t, ReduceOp op) {
    return tensorOp(t, (a, x, out) -> AccRaw.acc_reduce(a, x, op.value, out));
  }

  /** Reduction by raw operation number (for tests of the error path). */
  Tensor reduce(Tensor t, int op) {
    return tensorOp(t, (a, x, out) -> AccRaw.acc_reduce(a, x, op, out));
  }

  private interface ObjectOp {
    void apply(long acc, long items, long[] out);
  }

  private List<byte[]> objectOp(List<byte[]> items, ObjectOp f) {
    long[] list = new long[1];
    AccRaw.acc_bytes_list_create(list);
    long p = enter();
    try {
      for (byte[] item : items) AccRaw.acc_bytes_list_append(list[0], item == null ? new byte[0] : item);
      long[] out = new long[1];
      f.apply(p, list[0], out);
      try {
        long[] n = new long[1];
        AccRaw.acc_bytes_list_count(out[0], n);
        List<byte[]> result = new ArrayList<>((int) n[0]);
        for (long i = 0; i < n[0]; ++i) {
          long[] address = new long[1];
          long[] size = new long[1];
          AccRaw.acc_bytes_list_get(out[0], i, address, size);
          byte[] b = new byte[Math.toIntExact(size[0])];
          if (b.length > 0) AccRaw.accx_direct_buffer(address[0], size[0]).get(b);
          result.add(b);
        }
        return result;
      } finally {
        AccRaw.acc_bytes_list_destroy(out[0]);
      }
    } finally {
      leave(p);
      AccRaw.acc_bytes_list_destroy(list[0]);
    }
  }

  /**
   * Accelerate's gather_object: the items of every process (byte strings the caller serializes, e.g.
   * JSON), concatenated in rank order, on every process. A collective; a process may give none.
   *
   * @param items this process's items (a null item is sent as no bytes)
   * @return the items of every process, in rank order
   */
  public List<byte[]> gatherObject(List<byte[]> items) {
    return objectOp(items, AccRaw::acc_gather_object);
  }

  /**
   * {@link #gatherForMetrics} for objects, one item per sample of the batch: on the last batch of the
   * active prepared loader only the real samples are kept.
   *
   * @param items this process's items, one per sample (a null item is sent as no bytes)
   * @return the items of every process, in rank order, without the duplicated samples
   */
  public List<byte[]> gatherObjectForMetrics(List<byte[]> items) {
    return objectOp(items, AccRaw::acc_gather_object_for_metrics);
  }

  /** The scope {@link #accumulate} opens; closing it closes Accelerate's accumulate(model) scope. */
  public final class AccumulateScope implements AutoCloseable {
    private final Model model;
    private boolean open = true;

    private AccumulateScope(Model model) {
      this.model = model;
    }

    /** Closes the scope. Idempotent. */
    @Override
    public void close() {
      if (!open) return;
      open = false;
      long p = enter();
      long m = enter(model);
      try {
        AccRaw.acc_accumulate_end(p, m);
      } finally {
        leave(model, m);
        leave(p);
      }
    }
  }

  /**
   * Opens Accelerate's accumulate(model) scope for one batch; use it with try-with-resources. With
   * gradient_accumulation_steps = N only every N-th scope (and the last batch of the active loader)
   * synchronizes gradients; in the others the gradient all-reduce is skipped and optimizer steps,
   * scheduler steps and zeroGrad on prepared objects do nothing. {@link #backward} divides by N.
   *
   * @param model the model being trained
   * @return the scope; close it after the batch's backward and optimizer step
   */
  public AccumulateScope accumulate(Model model) {
    long p = enter();
    long m = enter(model);
    try {
      AccRaw.acc_accumulate_begin(p, m);
      return new AccumulateScope(model);
    } finally {
      leave(model, m);
      leave(p);
    }
  }

  /**
   * Whether the current micro-step synchronizes gradients and steps the optimizer.
   *
   * @return true when this micro-step synchronizes gradients
   */
  public boolean syncGradients() {
    return intQuery(AccRaw::acc_sync_gradients) != 0;
  }

  /**
   * Clips the model's gradients to a total norm of {@code maxNorm} ({@code normType} 2 is Euclidean;
   * under fp16 they are unscaled first); returns the total norm before clipping.
   *
   * @param model the model whose gradients are clipped
   * @param maxNorm the largest total norm
   * @param normType the order of the norm (2: Euclidean)
   * @return the total norm of the gradients before clipping
   */
  public double clipGradNorm(Model model, double maxNorm, double normType) {
    long p = enter();
    long m = enter(model);
    try {
      double[] total = new double[1];
      AccRaw.acc_clip_grad_norm(p, m, maxNorm, normType, total);
      return total[0];
    } finally {
      leave(model, m);
      leave(p);
    }
  }

  /**
   * Clamps every gradient of the model to [-clip, clip].
   *
   * @param model the model whose gradients are clamped
   * @param clip the largest absolute value of a gradient
   */
  public void clipGradValue(Model model, double clip) {
    long p = enter();
    long m = enter(model);
    try {
      AccRaw.acc_clip_grad_value(p, m, clip);
    } finally {
      leave(model, m);
      leave(p);
    }
  }

  /**
   * Process {@code from}'s tensor on every process (shape and dtype must agree). A collective.
   *
   * @param t this process's tensor (process {@code from}'s is the one sent)
   * @param from the rank of the process whose tensor is sent
   * @return a copy of process {@code from}'s tensor; close it
   */
  public Tensor broadcast(Tensor t, int from) {
    return tensorOp(t, (a, x, out) -> AccRaw.acc_broadcast(a, x, from, out));
  }

  /**
   * Accelerate's set_seed: seeds every generator of this process (plus the process index when
   * {@code deviceSpecific}); {@code deterministic} also selects deterministic algorithms.
   *
   * @param seed the seed
   * @param deviceSpecific true to add this process's index to the seed
   * @param deterministic true to also select deterministic algorithms
   */
  public void setSeed(long seed, boolean deviceSpecific, boolean deterministic) {
    long p = enter();
    try {
      AccRaw.acc_set_seed(p, seed, deviceSpecific ? 1 : 0, deterministic ? 1 : 0);
    } finally {
      leave(p);
    }
  }

  /** A barrier across all processes. */
  public void waitForEveryone() {
    long p = enter();
    try {
      AccRaw.acc_wait_for_everyone(p);
    } finally {
      leave(p);
    }
  }

  /** The step of a value logged without one (Accelerate's step=None). */
  public static final long NO_STEP = -1;

  /**
   * Accelerate's init_trackers: starts the trackers the config's {@code log_with} names ("tensorboard",
   * "jsonl", "csv", "mlflow", "wandb", "all") for a run named {@code projectName}, on the main process only (the
   * others check the arguments), and records {@code configJson}, a JSON object (null for none), as its
   * hyperparameters. {@code initKwargsJson}: options per tracker, e.g. {@code {"mlflow": {"run_name":
   * "baseline"}}} (null for none).
   *
   * @param projectName the run's name
   * @param configJson the hyperparameters, a JSON object; null for none
   * @param initKwargsJson options per tracker, a JSON object; null for none
   * @throws AccException {@link ErrorCode#INVALID_STATE} while an earlier run's trackers still run ({@link
   *     #endTraining} ends them)
   */
  public void initTrackers(String projectName, String configJson, String initKwargsJson) {
    long p = enter();
    try {
      AccRaw.acc_init_trackers(p, projectName, configJson, initKwargsJson);
    } finally {
      leave(p);
    }
  }

  /**
   * Logs named numbers, in the map's order (a LinkedHashMap keeps it), to every tracker at {@code step}
   * ({@link #NO_STEP}: none), on the main process only. NaN and the infinities are allowed.
   *
   * @param values the numbers by name
   * @param step the step, or {@link #NO_STEP}
   * @throws AccException {@link ErrorCode#INVALID_STATE} before {@link #initTrackers} or after {@link
   *     #endTraining} (with {@code log_with} set)
   */
  public void log(Map<String, ? extends Number> values, long step) {
    StringBuilder b = new StringBuilder("{");
    for (Map.Entry<String, ? extends Number> e : values.entrySet()) {
      if (b.length() > 1) b.append(", ");
      jsonString(b, e.getKey());
      b.append(": ");
      Number n = e.getValue();
      double d = n.doubleValue();
      if (Double.isNaN(d)) b.append("NaN");
      else if (Double.isInfinite(d)) b.append(d > 0 ? "Infinity" : "-Infinity");
      else if (n instanceof Double || n instanceof Float) b.append(Double.toString(d));
      else b.append(n.toString());
    }
    logJson(b.append('}').toString(), step);
  }

  /**
   * Logs a JSON object to every tracker at {@code step} ({@link #NO_STEP}: none): numbers and booleans
   * are scalars, strings text, objects of numbers several scalars under one name.
   *
   * @param valuesJson the values, a JSON object
   * @param step the step, or {@link #NO_STEP}
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for text that is not a JSON object; {@link
   *     ErrorCode#INVALID_STATE} as for {@link #log}
   */
  public void logJson(String valuesJson, long step) {
    long p = enter();
    try {
      AccRaw.acc_log(p, valuesJson, step);
    } finally {
      leave(p);
    }
  }

  /** A running profile ({@link #profile}), torch.profiler's {@code prof}; closing it ends the profile. */
  public final class Profile implements AutoCloseable {
    private boolean open = true;

    private Profile() {}

    /** torch.profiler's step(): the current step ends and the next begins. */
    public void step() {
      long p = enter();
      try {
        AccRaw.acc_profile_step(p);
      } finally {
        leave(p);
      }
    }

    /**
     * Ends the profile: with {@code output_trace_dir} it writes {@code profile_<rank>.json} there and waits for
     * every process. Idempotent.
     */
    @Override
    public void close() {
      if (!open) return;
      open = false;
      long p = enter();
      try {
        AccRaw.acc_profile_end(p);
      } finally {
        leave(p);
      }
    }
  }

  /**
   * Accelerate's profile(): starts LibTorch's Kineto profiler on this thread, with the config's {@code
   * profile_kwargs} or, given a ProfileKwargs JSON object, with those instead ({@code activities}, {@code
   * schedule_option} {@code {"wait", "warmup", "active", "repeat", "skip_first"}}, {@code record_shapes},
   * {@code profile_memory}, {@code with_stack}, {@code with_flops}, {@code with_modules}, {@code
   * output_trace_dir}). Use it with try-with-resources, train on this thread and call {@link Profile#step} at
   * the end of each step: the schedule records some steps, each a {@code ProfilerStep#N} range.
   *
   * @param profileKwargsJson ProfileKwargs as a JSON object; null for the config's
   * @return the profile; close it to end it
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} naming a bad key or value, {@link
   *     ErrorCode#UNSUPPORTED} for an activity this machine lacks, {@link ErrorCode#INVALID_STATE} while a
   *     profile runs
   */
  public Profile profile(String profileKwargsJson) {
    long p = enter();
    try {
      AccRaw.acc_profile_begin(p, profileKwargsJson);
      return new Profile();
    } finally {
      leave(p);
    }
  }

  /** Accelerate's end_training: finishes the trackers (files synced and closed, runs marked finished). */
  public void endTraining() {
    long p = enter();
    try {
      AccRaw.acc_end_training(p);
    } finally {
      leave(p);
    }
  }

  /**
   * Accelerate's save_state: saves everything prepared with this accelerator (models, optimizers,
   * schedulers, the fp16 scaler, data loader positions, random states) and every registered object
   * into the directory {@code dir}, crash safe (docs/checkpoints.md lists the files). {@code null}:
   * ProjectConfiguration's automatic naming, as {@link #saveState()}. A collective: every process
   * calls it. A registered object's exception fails it with {@link ErrorCode#CALLBACK}, with the
   * exception as the cause.
   *
   * @param dir the checkpoint directory, on a filesystem every process sees; {@code null} for the automatic
   *     naming
   * @throws AccException {@link ErrorCode#CALLBACK} when a registered object's save throws (the exception is the
   *     cause); {@link ErrorCode#INVALID_ARGUMENT} for {@code null} without the automatic naming; {@link
   *     ErrorCode#IO} when a file cannot be written
   */
  public void saveState(String dir) {
    checkpointCall(p -> AccRaw.acc_save_state(p, dir));
  }

  /**
   * {@link #saveState(String)} with ProjectConfiguration's automatic naming ({@code "project_config":
   * {"automatic_checkpoint_naming": true, "project_dir": ...}}): {@code
   * {project_dir}/checkpoints/checkpoint_{i}}, keeping the newest {@code total_limit}.
   */
  public void saveState() {
    saveState(null);
  }

  /**
   * Accelerate's load_state: restores a checkpoint of {@link #saveState} into the objects prepared
   * with this accelerator (the same kinds and numbers, prepared in the same order) and the registered
   * objects. A directory without manifest.json is refused, naming it. {@code null}: as {@link
   * #loadState()}. A collective. A registered object's exception fails it with {@link
   * ErrorCode#CALLBACK}, with the exception as the cause.
   *
   * @param dir a checkpoint directory of {@link #saveState}; {@code null} for the newest under the project
   *     directory
   * @throws AccException {@link ErrorCode#IO} for a missing directory, one without manifest.json or a missing
   *     file, naming it; {@link ErrorCode#CALLBACK} when a registered object's load throws (the exception is the
   *     cause)
   */
  public void loadState(String dir) {
    checkpointCall(p -> AccRaw.acc_load_state(p, dir));
  }

  /** {@link #loadState(String)} of the newest complete checkpoint under {@code {project_dir}/checkpoints}. */
  public void loadState() {
    loadState(null);
  }

  /**
   * Loads what the config's {@code "resume_from_checkpoint"} names: {@code "latest"}, the newest
   * complete checkpoint under {@code {project_dir}/checkpoints}, or a checkpoint directory, as {@link
   * #loadState(String)} does. Returns false when there is nothing to resume (the key unset, or {@code
   * "latest"} before the first save: a fresh start). Call it after {@link #prepare} and {@link
   * #registerForCheckpointing(Checkpointable)}: a job restarted by {@code acc launch --max_restarts}
   * then continues from its last save. A collective. A registered object's exception fails it as in
   * {@link #loadState(String)}.
   *
   * @return true when a checkpoint was loaded, false when there was nothing to resume
   * @throws AccException as {@link #loadState(String)}
   */
  public boolean resumeFromCheckpoint() {
    int[] resumed = new int[1];
    checkpointCall(p -> AccRaw.acc_resume_from_checkpoint(p, resumed));
    return resumed[0] != 0;
  }

  private void checkpointCall(java.util.function.LongConsumer call) {
    long p = enter();
    try {
      checkpointFailure.set(null); // nothing left from an earlier call
      call.accept(p);
    } catch (AccException e) {
      Throwable cause = checkpointFailure.getAndSet(null);
      if (cause != null && e.code() == ErrorCode.CALLBACK && e.getCause() == null) e.initCause(cause);
      throw e;
    } finally {
      leave(p);
    }
  }

  /**
   * Accelerate's register_for_checkpointing: {@link #saveState} saves {@code object}'s bytes
   * (custom_checkpoint_{i}.bin, in registration order, on the main process) and {@link #loadState}
   * gives them back to it (on every process). The accelerator keeps the object until it is closed.
   *
   * @param object the object to save and restore
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} when {@code object} is null
   */
  public void registerForCheckpointing(Checkpointable object) {
    if (object == null) throw new AccException(ErrorCode.INVALID_ARGUMENT, "object is null");
    registerForCheckpointing(object::save, object::load);
  }

  /**
   * {@link #registerForCheckpointing(Checkpointable)} with two functions, e.g. {@code
   * acc.registerForCheckpointing(() -> counter.toBytes(), bytes -> counter.set(bytes))}.
   *
   * @param save returns the object's bytes
   * @param load restores the object from them
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} when either is null
   */
  public void registerForCheckpointing(Checkpointable.Saver save, Checkpointable.Loader load) {
    if (save == null || load == null) {
      throw new AccException(ErrorCode.INVALID_ARGUMENT, "save and load must not be null");
    }
    CheckpointAdapter adapter = new CheckpointAdapter(save, load, checkpointFailure);
    long p = enter();
    try {
      AccRaw.accx_register_for_checkpointing_java(p, adapter);
    } finally {
      leave(p);
    }
  }

  /** What the C trampolines call: never throws; records the failure for the caller. */
  static final class CheckpointAdapter {
    private final Checkpointable.Saver saver;
    private final Checkpointable.Loader loader;
    private final AtomicReference<Throwable> failure;

    CheckpointAdapter(
        Checkpointable.Saver saver, Checkpointable.Loader loader, AtomicReference<Throwable> failure) {
      this.saver = saver;
      this.loader = loader;
      this.failure = failure;
    }

    /** Called from C: the object's bytes, or null on failure. */
    byte[] save() {
      try {
        byte[] b = saver.save();
        if (b == null) throw new IllegalStateException("the checkpoint save function returned null");
        return b;
      } catch (Throwable t) {
        failure.set(t);
        return null;
      }
    }

    /** Called from C: false on failure. */
    boolean load(byte[] data) {
      try {
        loader.load(data);
        return true;
      } catch (Throwable t) {
        failure.set(t);
        return false;
      }
    }
  }

  private static void jsonString(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); ++i) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') b.append('\\').append(c);
      else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
      else b.append(c);
    }
    b.append('"');
  }
}
