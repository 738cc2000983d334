package ai.acc;

import ai.acc.internal.AccRaw;

/** A source of samples: rows of tensors or a token file. */
public final class Dataset extends NativeObject {
  private Dataset(long ptr) {
    super(ptr, AccRaw::acc_dataset_destroy);
  }

  /** Samples are the rows (dim 0) of {@code inputs} and, when not null, of {@code targets} (copied). */
  public static Dataset fromTensors(Tensor inputs, Tensor targets) {
    NativeLoader.load();
    long x = enter(inputs), y = enter(targets);
    try {
      long[] out = new long[1];
      AccRaw.acc_dataset_from_tensors(x, y, out);
      return new Dataset(out[0]);
    } finally {
      leave(targets, y);
      leave(inputs, x);
    }
  }

  /** A memory-mapped token file: {@code {"block_size": T, "dtype": "uint16"|"int32"}}. */
  public static Dataset fromTokenFile(String path, String optionsJson) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_dataset_from_token_file(path, optionsJson, out);
    return new Dataset(out[0]);
  }

  /** The number of samples. */
  public long length() {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_dataset_length(p, n);
      return n[0];
    } finally {
      leave(p);
    }
  }
}
