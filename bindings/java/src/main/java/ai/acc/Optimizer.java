package ai.acc;

import ai.acc.internal.AccRaw;

/** Updates a model's parameters from their gradients. */
public final class Optimizer extends NativeObject {
  private Optimizer(long ptr) {
    super(ptr, AccRaw::acc_optimizer_destroy);
  }

  /**
   * An optimizer over all parameters of {@code model}: {@code {"type": "sgd"|"adam"|"adamw", "lr",
   * "momentum", "dampening", "nesterov", "betas", "eps", "weight_decay", "amsgrad", "fused"}}, with
   * PyTorch's defaults; the table of keys and defaults is in docs/c-api.md, "Optimizer options". {@code
   * "param_groups"} gives groups of parameters their own options: {@code [{"params": ["lm_head\\..*"], "lr":
   * 1e-4}, ...]} (regular expressions over whole parameter names; the rest take the top-level options), or
   * {@code "transformers"} (the Trainer's: no weight decay for biases and norms).
   *
   * @param model the model whose parameters it updates
   * @param optionsJson the options, a JSON object with {@code "type"}
   * @return the optimizer; close it
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} for a missing type, an unknown key or a bad value
   */
  public static Optimizer create(Model model, String optionsJson) {
    NativeLoader.load();
    long m = enter(model);
    try {
      long[] out = new long[1];
      AccRaw.acc_optimizer_create(m, optionsJson, out);
      return new Optimizer(out[0]);
    } finally {
      leave(model, m);
    }
  }

  /** Applies the gradients. */
  public void step() {
    long p = enter();
    try {
      AccRaw.acc_optimizer_step(p);
    } finally {
      leave(p);
    }
  }

  /** Clears the gradients. */
  public void zeroGrad() {
    long p = enter();
    try {
      AccRaw.acc_optimizer_zero_grad(p);
    } finally {
      leave(p);
    }
  }

  /**
   * Whether the last step was skipped (fp16 found inf/nan gradients).
   *
   * @return true when the last step was skipped
   */
  public boolean stepWasSkipped() {
    long p = enter();
    try {
      int[] v = new int[1];
      AccRaw.acc_optimizer_step_was_skipped(p, v);
      return v[0] != 0;
    } finally {
      leave(p);
    }
  }

  /**
   * The current learning rate.
   *
   * @return the learning rate of the first parameter group
   */
  public double lr() {
    long p = enter();
    try {
      double[] v = new double[1];
      AccRaw.acc_optimizer_lr(p, v);
      return v[0];
    } finally {
      leave(p);
    }
  }
}
