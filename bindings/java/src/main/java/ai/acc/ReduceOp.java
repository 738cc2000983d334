package ai.acc;

/** Element-wise reductions across processes, for {@link Accelerator#reduce}. */
public enum ReduceOp {
  /** Element-wise sum (ACC_REDUCE_SUM). */
  SUM(0),
  /** Element-wise mean (ACC_REDUCE_MEAN). */
  MEAN(1),
  /** Element-wise maximum (ACC_REDUCE_MAX). */
  MAX(2);

  final int value;

  ReduceOp(int value) {
    this.value = value;
  }
}
