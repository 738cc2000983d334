package ai.acc;

import ai.acc.internal.AccRaw;

/** Sets an optimizer's learning rate by step. */
public final class Scheduler extends NativeObject {
  private Scheduler(long ptr) {
    super(ptr, AccRaw::acc_scheduler_destroy);
  }

  /**
   * A schedule: {@code {"type": "constant"|"linear"|"cosine", "warmup_steps": 0, "total_steps": N,
   * "min_lr_ratio": 0.0}}.
   *
   * @param opt the optimizer whose learning rate it sets
   * @param optionsJson the schedule, a JSON object; null for a constant one
   * @return the scheduler; close it
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} for a bad schedule, e.g. "cosine" without
   *     "total_steps"
   */
  public static Scheduler create(Optimizer opt, String optionsJson) {
    NativeLoader.load();
    long o = enter(opt);
    try {
      long[] out = new long[1];
      AccRaw.acc_scheduler_create(o, optionsJson, out);
      return new Scheduler(out[0]);
    } finally {
      leave(opt, o);
    }
  }

  /** Advances the schedule by one step. */
  public void step() {
    long p = enter();
    try {
      AccRaw.acc_scheduler_step(p);
    } finally {
      leave(p);
    }
  }

  /**
   * The learning rate the schedule set last.
   *
   * @return the learning rate
   */
  public double lastLr() {
    long p = enter();
    try {
      double[] v = new double[1];
      AccRaw.acc_scheduler_last_lr(p, v);
      return v[0];
    } finally {
      leave(p);
    }
  }
}
