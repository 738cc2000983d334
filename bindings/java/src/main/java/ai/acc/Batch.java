package ai.acc;

import ai.acc.internal.AccRaw;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A named batch: an ordered mapping name -> tensor ({@code "input_ids"}, {@code "attention_mask"},
 * {@code "labels"}, ...), the dict Accelerate hands to a model. Datasets hold such samples ({@link
 * Dataset#fromBatch}, {@link Dataset#fromBatchFunction}), loaders yield them ({@link
 * DataLoader#nextBatch()}) and a model takes one and returns its outputs as one ({@link
 * Model#forwardBatch}: {@code "loss"}, {@code "logits"} or {@code "output"}).
 *
 * <p>A batch shares its tensors' data with the tensors put in and taken out (no copy).
 *
 * <pre>{@code
 * try (Batch batch = Batch.create().set("input_ids", ids).set("labels", ids);
 *      Batch out = model.forwardBatch(batch);
 *      Tensor loss = out.get("loss")) {
 *   acc.backward(loss);
 * }
 * }</pre>
 */
public final class Batch extends NativeObject {
  Batch(long ptr) {
    super(ptr, AccRaw::acc_batch_destroy);
  }

  static Batch orNull(long ptr) {
    return ptr == 0 ? null : new Batch(ptr);
  }

  /**
   * An empty batch.
   *
   * @return the batch; close it
   */
  public static Batch create() {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_batch_create(out);
    return new Batch(out[0]);
  }

  /**
   * A batch of the entries of {@code tensors}, in its iteration order (the tensors stay the caller's).
   *
   * @param tensors the tensors by name
   * @return the batch; close it
   */
  public static Batch of(Map<String, Tensor> tensors) {
    Batch b = create();
    try {
      tensors.forEach(b::set);
      return b;
    } catch (RuntimeException e) {
      b.close();
      throw e;
    }
  }

  /**
   * Adds {@code name} -> {@code tensor}, or replaces the tensor of {@code name} in its place. The batch
   * shares the tensor's data; the tensor stays the caller's to close. {@code name} must not be empty.
   *
   * @param name the name, not empty
   * @param tensor the tensor
   * @return this batch, for chaining
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for an empty name
   */
  public Batch set(String name, Tensor tensor) {
    long p = enter();
    long t = enter(tensor);
    try {
      AccRaw.acc_batch_set(p, name, t);
      return this;
    } finally {
      leave(tensor, t);
      leave(p);
    }
  }

  /**
   * The tensor of {@code name} (sharing its data); close it. A missing name throws {@link
   * ErrorCode#INVALID_ARGUMENT}, whose message lists the names present.
   *
   * @param name the name
   * @return a new handle to the tensor; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a missing name, listing the names present
   */
  public Tensor get(String name) {
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.acc_batch_get(p, name, out);
      return new Tensor(out[0]);
    } finally {
      leave(p);
    }
  }

  /**
   * Whether the batch has a tensor named {@code name}.
   *
   * @param name the name
   * @return true when the batch has a tensor named {@code name}
   */
  public boolean contains(String name) {
    long p = enter();
    try {
      int[] v = new int[1];
      AccRaw.acc_batch_contains(p, name, v);
      return v[0] != 0;
    } finally {
      leave(p);
    }
  }

  /**
   * The number of tensors.
   *
   * @return the number of tensors
   */
  public int size() {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_batch_count(p, n);
      return (int) n[0];
    } finally {
      leave(p);
    }
  }

  /**
   * The names, in insertion order.
   *
   * @return the names, in insertion order
   */
  public List<String> names() {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_batch_count(p, n);
      List<String> names = new ArrayList<>((int) n[0]);
      for (long i = 0; i < n[0]; ++i) {
        String[] name = new String[1];
        AccRaw.acc_batch_name(p, i, name);
        names.add(name[0]);
      }
      return names;
    } finally {
      leave(p);
    }
  }

  /**
   * The entries in insertion order (each tensor shares the batch's data). Close the tensors.
   *
   * @return the tensors by name, in insertion order
   */
  public Map<String, Tensor> tensors() {
    Map<String, Tensor> out = new LinkedHashMap<>();
    try {
      for (String name : names()) out.put(name, get(name));
      return out;
    } catch (RuntimeException e) {
      out.values().forEach(Tensor::close);
      throw e;
    }
  }

  @Override
  public String toString() {
    return isClosed() ? "Batch[closed]" : "Batch" + names();
  }
}
