package ai.acc.examples;

import ai.acc.Accelerator;
import ai.acc.DataLoader;
import ai.acc.Dataset;
import ai.acc.Model;
import ai.acc.Optimizer;
import ai.acc.ReduceOp;
import ai.acc.Scheduler;
import ai.acc.Tensor;

/**
 * examples/c/train_mlp.c in Java: an MLP learns a synthetic regression in several processes started
 * by {@code acc launch}, evaluates with gatherForMetrics, and the main process saves the weights. For
 * the same recipe its final parameters equal the C program's.
 *
 * <pre>
 * acc launch --num_processes 2 java -cp acc-1.1.0.jar:classes ai.acc.examples.TrainMlp OUT.safetensors [STEPS]
 * </pre>
 */
public final class TrainMlp {
  static final int FEATURES = 4, TRAIN = 512, EVAL = 100;

  /** Exact in float32: an integer hash (mod 2^32), scaled by a power of two. */
  static float feature(int i, int j) {
    int h = (i * 4 + j) * (int) 2654435761L;
    return (float) (((double) (h >>> 24) - 128.0) / 64.0);
  }

  /** Samples [first, first + n): inputs [n, 4], targets [n, 1]. */
  static Dataset makeDataset(int first, int n) {
    float[] x = new float[FEATURES * n];
    float[] y = new float[n];
    for (int k = 0; k < n; ++k) {
      double[] f = new double[FEATURES];
      for (int j = 0; j < FEATURES; ++j) {
        f[j] = feature(first + k, j);
        x[FEATURES * k + j] = (float) f[j];
      }
      y[k] = (float) (f[0] * f[1] - f[2] / 2.0 + f[3] * f[3] / 4.0);
    }
    try (Tensor tx = Tensor.fromFloats(x, n, FEATURES);
        Tensor ty = Tensor.fromFloats(y, n, 1)) {
      return Dataset.fromTensors(tx, ty);
    }
  }

  public static void main(String[] args) {
    if (args.length < 1 || args.length > 2) {
      System.err.println("usage: TrainMlp OUT.safetensors [STEPS]");
      System.exit(2);
    }
    String outPath = args[0];
    int steps = args.length == 2 ? Integer.parseInt(args[1]) : 100;

    try (Accelerator acc = Accelerator.create("{\"seed\": 1234}");
        Dataset trainDs = makeDataset(0, TRAIN);
        Dataset evalDs = makeDataset(TRAIN, EVAL);
        DataLoader trainDl = DataLoader.create(trainDs, "{\"batch_size\": 16, \"shuffle\": true, \"seed\": 7}");
        DataLoader evalDl = DataLoader.create(evalDs, "{\"batch_size\": 16}");
        Model model = Model.create(
            "{\"type\": \"mlp\", \"sizes\": [4, 32, 32, 1], \"activation\": \"tanh\", \"loss\": \"mse\"}");
        Optimizer opt = Optimizer.create(model, "{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.01}");
        Scheduler sched = Scheduler.create(
            opt, "{\"type\": \"cosine\", \"warmup_steps\": 5, \"total_steps\": " + steps + "}")) {
      boolean isMain = acc.isMainProcess();
      int world = acc.numProcesses();
      acc.prepare(model, opt, sched, trainDl);
      acc.prepare(null, null, null, evalDl);

      // Train: a fixed number of optimizer steps, starting a new epoch whenever the loader runs out.
      double lastLoss = 0.0;
      for (int step = 0; step < steps; ) {
        try (DataLoader.Batch batch = trainDl.next()) {
          if (batch == null) continue;
          try (Tensor loss = model.loss(batch.input(), batch.target())) {
            acc.backward(loss);
            opt.step();
            sched.step();
            opt.zeroGrad();
            if (++step == steps) {
              try (Tensor mean = acc.reduce(loss, ReduceOp.MEAN)) {
                lastLoss = mean.item();
              }
            }
          }
        }
      }

      // Evaluate: every process predicts its shard; gatherForMetrics drops the padding duplicates.
      model.setTraining(false);
      double sqSum = 0.0;
      int seen = 0;
      while (true) {
        try (DataLoader.Batch batch = evalDl.next()) {
          if (batch == null) break;
          try (Tensor pred = model.predict(batch.input());
              Tensor allPred = acc.gatherForMetrics(pred);
              Tensor allY = acc.gatherForMetrics(batch.target())) {
            float[] p = allPred.toFloats();
            float[] t = allY.toFloats();
            for (int k = 0; k < p.length; ++k) {
              double d = (double) p[k] - (double) t[k];
              sqSum += d * d;
            }
            seen += p.length;
          }
        }
      }

      if (isMain) {
        model.saveSafetensors(outPath);
        System.out.printf("processes: %d, steps: %d%n", world, steps);
        System.out.printf("eval mse: %.6f over %d samples%n", sqSum / seen, seen);
        System.out.printf("final loss: %.6f%n", lastLoss);
      }
    }
  }
}
