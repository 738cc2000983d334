package ai.acc;

/** Element-wise reductions across processes, for {@link Accelerator#reduce}. */
public enum ReduceOp {
  SUM(0),
  MEAN(1),
  MAX(2);

  final int value;

  ReduceOp(int value) {
    this.value = value;
  }
}
