package ai.acc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.io.TempDir;

/** The shared conformance scenarios (tests/bindings/scenarios.txt), in Java. */
class ConformanceTest {
  /** The call throws AccException with {@code code} and a message naming {@code needle}. */
  static AccException expectError(ErrorCode code, String needle, Executable call) {
    AccException e = assertThrows(AccException.class, call);
    assertEquals(code, e.code(), () -> "code of: " + e.getMessage());
    assertEquals(code.value(), e.status());
    assertTrue(e.getMessage().contains(needle), () -> "expected \"" + needle + "\" in: " + e.getMessage());
    return e;
  }

  // scenario: library
  @Test
  void library() {
    assertEquals(2, Acc.version().chars().filter(c -> c == '.').count());
    Acc.checkAbi(Acc.ABI_VERSION);
    expectError(ErrorCode.ABI_MISMATCH, "built for ABI 2", () -> Acc.checkAbi(Acc.ABI_VERSION + 1));
    assertTrue(Acc.buildInfo().contains("\"torch\""));
    assertEquals("ACC_ERR_INVALID_CONFIG", Acc.statusName(ErrorCode.INVALID_CONFIG.value()));
    assertEquals("ACC_ERR_UNKNOWN", Acc.statusName(999));
    assertEquals(ErrorCode.INTERNAL, ErrorCode.of(999));
  }

  // scenario: create
  @Test
  void create() {
    try (Accelerator acc = Accelerator.create()) {
      assertEquals("cpu", acc.device());
      assertEquals("NO", acc.distributedType());
      assertEquals(0, acc.processIndex());
      assertEquals(0, acc.localProcessIndex());
      assertEquals(1, acc.numProcesses());
      assertTrue(acc.isMainProcess());
      assertTrue(acc.configJson().contains("bucket_cap_mb"));
    }
    try (Accelerator acc = Accelerator.create("{\"seed\": 3, \"cpu\": true}")) {
      assertEquals(1, acc.numProcesses());
    }
  }

  // scenario: bad_config
  @Test
  void badConfig() {
    expectError(ErrorCode.INVALID_CONFIG, "gradient_accumulation_steps",
        () -> Accelerator.create("{\"gradient_acumulation_steps\": 2}"));
    expectError(ErrorCode.INVALID_CONFIG, "bf16", () -> Accelerator.create("{\"mixed_precision\": \"fp32\"}"));
    expectError(ErrorCode.INVALID_CONFIG, "JSON", () -> Accelerator.create("{\"cpu\": true"));
    expectError(ErrorCode.INVALID_CONFIG, "unknown key 'layers'",
        () -> Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1], \"layers\": 3}"));
    expectError(ErrorCode.INVALID_CONFIG, "type", () -> Model.create(null));
  }

  /** The exception is raised inside the JNI call, so every thread sees its own message. */
  @Test
  void errorMessagesStayWithTheirThread() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(8);
    try {
      List<Future<?>> jobs = new ArrayList<>();
      CountDownLatch start = new CountDownLatch(1);
      for (int t = 0; t < 8; ++t) {
        final int thread = t;
        jobs.add(pool.submit(() -> {
          start.await();
          for (int i = 0; i < 50; ++i) {
            String key = "no_such_key_" + thread + "_" + i;
            expectError(ErrorCode.INVALID_CONFIG, key,
                () -> Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1], \"" + key + "\": 1}"));
          }
          return null;
        }));
      }
      start.countDown();
      for (Future<?> f : jobs) f.get(60, TimeUnit.SECONDS);
    } finally {
      pool.shutdownNow();
    }
  }

  // scenario: null_handle
  @Test
  void nullHandle() {
    try (Accelerator acc = Accelerator.create()) {
      expectError(ErrorCode.INVALID_ARGUMENT, "nothing to prepare", () -> acc.prepare(null, null, null, null));
      expectError(ErrorCode.INVALID_ARGUMENT, "NULL", () -> acc.backward(null));
      expectError(ErrorCode.INVALID_ARGUMENT, "NULL", () -> acc.gather(null));
    }
    expectError(ErrorCode.INVALID_ARGUMENT, "model is NULL", () -> Optimizer.create(null, "{\"type\": \"sgd\"}"));
    expectError(ErrorCode.INVALID_ARGUMENT, "optimizer is NULL", () -> Scheduler.create(null, "{\"type\": \"constant\"}"));
    expectError(ErrorCode.INVALID_ARGUMENT, "NULL", () -> DataLoader.create(null, "{}"));
    try (Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}")) {
      expectError(ErrorCode.INVALID_ARGUMENT, "NULL", () -> m.predict(null));
    }
  }

  // scenario: closed_handle
  @Test
  void closedHandle() {
    Accelerator acc = Accelerator.create();
    acc.close();
    acc.close(); // idempotent
    assertTrue(acc.isClosed());
    expectError(ErrorCode.INVALID_ARGUMENT, "accelerator is NULL", acc::numProcesses);
    Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}");
    m.close();
    expectError(ErrorCode.INVALID_ARGUMENT, "model is NULL", m::numParameters);
    Optimizer o;
    try (Model live = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}")) {
      o = Optimizer.create(live, "{\"type\": \"sgd\"}");
    }
    o.close();
    expectError(ErrorCode.INVALID_ARGUMENT, "optimizer is NULL", o::step);
    Tensor t = Tensor.fromFloats(new float[] {1, 2});
    t.close();
    t.close();
    expectError(ErrorCode.INVALID_ARGUMENT, "tensor is NULL", t::toFloats);
    try (Accelerator live = Accelerator.create()) {
      expectError(ErrorCode.INVALID_ARGUMENT, "NULL", () -> live.backward(t));
    }
  }

  static Dataset regression(int n) {
    float[] x = new float[2 * n];
    float[] y = new float[n];
    for (int i = 0; i < n; ++i) {
      x[2 * i] = (float) Math.sin(i * 0.37);
      x[2 * i + 1] = (float) Math.cos(i * 0.11);
      y[i] = 3 * x[2 * i] - 2 * x[2 * i + 1] + 1;
    }
    try (Tensor tx = Tensor.fromFloats(x, n, 2);
        Tensor ty = Tensor.fromFloats(y, n, 1)) {
      return Dataset.fromTensors(tx, ty);
    }
  }

  // scenario: call_order
  @Test
  void callOrder() {
    try (Accelerator acc = Accelerator.create("{\"seed\": 7}");
        Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 8, 1]}");
        Model other = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}");
        Optimizer o = Optimizer.create(m, "{\"type\": \"sgd\", \"lr\": 0.1}");
        Optimizer otherOpt = Optimizer.create(other, "{\"type\": \"sgd\"}")) {
      expectError(ErrorCode.INVALID_STATE, "model is not prepared", () -> acc.prepare(null, otherOpt, null, null));
      expectError(ErrorCode.INVALID_ARGUMENT, "nothing to prepare", () -> acc.prepare(null, null, null, null));
      acc.prepare(m, o, null, null);
      expectError(ErrorCode.INVALID_STATE, "already prepared", () -> acc.prepare(m, null, null, null));
      expectError(ErrorCode.INVALID_CONFIG, "total_steps", () -> Scheduler.create(o, "{\"type\": \"cosine\"}"));
    }
  }

  // scenario: tensor_errors
  @Test
  void tensorErrors() {
    expectError(ErrorCode.INVALID_ARGUMENT, "nbytes", () -> Tensor.fromBytes(new byte[12], DType.FLOAT32, 4));
    try (Tensor t = Tensor.fromFloats(new float[] {1, 2, 3, 4})) {
      expectError(ErrorCode.INVALID_ARGUMENT, "one-element", t::item);
      expectError(ErrorCode.INVALID_ARGUMENT, "nbytes", () -> t.copyTo(new byte[8]));
      expectError(ErrorCode.INVALID_ARGUMENT, "not INT64", t::toLongs);
    }
    try (Accelerator acc = Accelerator.create();
        Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [4, 1]}");
        Tensor in = Tensor.fromFloats(new float[] {1, 2, 3, 4, 5, 6, 7, 8}, 2, 4);
        Tensor out = m.predict(in);
        Tensor plain = Tensor.fromFloats(new float[] {1}, 1, 1)) {
      expectError(ErrorCode.INVALID_ARGUMENT, "one element", () -> acc.backward(out));
      expectError(ErrorCode.INVALID_ARGUMENT, "autograd graph", () -> acc.backward(plain));
    }
  }

  // scenario: dtype_roundtrip
  @Test
  void dtypeRoundTrip() {
    for (DType d : DType.values()) {
      byte[] in = new byte[6 * d.size()];
      for (int i = 0; i < in.length; ++i) in[i] = (byte) (d == DType.BOOL ? i % 2 : (i * 7 + 3) % 64);
      try (Tensor t = Tensor.fromBytes(in, d, 2, 3)) {
        assertEquals(d, t.dtype());
        assertArrayEquals(new long[] {2, 3}, t.shape());
        assertEquals(6, t.numel());
        assertEquals(in.length, t.nbytes());
        assertArrayEquals(in, t.toBytes(), d.toString());
      }
    }
    byte[] twoAndAHalf = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder()).putDouble(2.5).array();
    try (Tensor s = Tensor.fromBytes(twoAndAHalf, DType.FLOAT64)) {
      assertEquals(0, s.shape().length);
      assertEquals(2.5, s.item());
    }
    try (Tensor l = Tensor.fromLongs(new long[] {-1, 1L << 40})) {
      assertArrayEquals(new long[] {-1, 1L << 40}, l.toLongs());
    }
    try (Tensor i = Tensor.fromInts(new int[] {-7, 9})) {
      assertArrayEquals(new int[] {-7, 9}, i.toInts());
    }
    try (Tensor f = Tensor.fromFloats(new float[] {0.5f, -2f}, 2, 1)) {
      assertArrayEquals(new float[] {0.5f, -2f}, f.toFloats());
    }
  }

  // scenario: zero_copy
  @Test
  void zeroCopy() {
    // In: a direct buffer is wrapped, not copied: later writes show in the tensor.
    ByteBuffer direct = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder());
    try (Tensor t = Tensor.wrap(direct, DType.FLOAT32, 2, 2)) {
      direct.putFloat(4, 1.0f);
      assertArrayEquals(new float[] {0, 1, 0, 0}, t.toFloats());
      // Out: a view aliases the tensor's memory (here: the very same direct buffer).
      try (TensorView v = t.view()) {
        assertEquals(16, v.buffer().capacity());
        v.buffer().putFloat(0, 5.0f);
        assertEquals(5.0f, direct.getFloat(0));
        assertArrayEquals(new float[] {5, 1, 0, 0}, t.toFloats());
      }
    }
    // A view outlives the tensor handle.
    TensorView view;
    try (Tensor t = Tensor.fromFloats(new float[] {1, 2, 3})) {
      view = t.view();
    }
    assertEquals(3.0f, view.buffer().getFloat(8));
    view.close();
    view.close();
    expectError(ErrorCode.INVALID_ARGUMENT, "direct", () -> Tensor.wrap(ByteBuffer.allocate(8), DType.FLOAT32, 2));
    expectError(ErrorCode.INVALID_ARGUMENT, "nbytes",
        () -> Tensor.wrap(ByteBuffer.allocateDirect(8), DType.FLOAT32, 3));
  }

  // scenario: train
  @Test
  void train() {
    try (Accelerator acc = Accelerator.create("{\"seed\": 7}");
        Dataset ds = regression(64);
        DataLoader dl = DataLoader.create(ds, "{\"batch_size\": 16, \"shuffle\": true, \"seed\": 3}");
        Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 16, 1], \"activation\": \"tanh\"}");
        Optimizer o = Optimizer.create(m, "{\"type\": \"adam\", \"lr\": 0.05}");
        Scheduler s = Scheduler.create(o, "{\"type\": \"linear\", \"warmup_steps\": 2, \"total_steps\": 100}")) {
      acc.prepare(m, o, s, dl);
      assertEquals(4, dl.length());
      double first = -1, last = 0;
      int steps = 0;
      for (int epoch = 0; epoch < 25; ++epoch) {
        while (true) {
          try (DataLoader.Batch b = dl.next()) {
            if (b == null) break;
            Tensor loss = m.loss(b.input(), b.target());
            last = loss.item();
            if (first < 0) first = last;
            acc.backward(loss);
            o.step();
            s.step();
            o.zeroGrad();
            ++steps;
            loss.close();
          }
        }
      }
      assertEquals(100, steps);
      assertTrue(last < first * 0.05, "loss " + first + " -> " + last);
      assertEquals(0.0, s.lastLr(), 1e-12);
      assertEquals(0.0, o.lr(), 1e-12);
      assertEquals(2 * 16 + 16 + 16 + 1, m.numParameters());
    }
  }

  // scenario: gather
  @Test
  void gather() {
    try (Accelerator acc = Accelerator.create();
        Tensor x = Tensor.fromFloats(new float[] {1, 2})) {
      try (Tensor g = acc.gather(x)) {
        assertArrayEquals(new float[] {1, 2}, g.toFloats());
      }
      for (ReduceOp op : ReduceOp.values()) {
        try (Tensor r = acc.reduce(x, op)) {
          assertArrayEquals(new float[] {1, 2}, r.toFloats());
        }
      }
      expectError(ErrorCode.INVALID_ARGUMENT, "op 9", () -> acc.reduce(x, 9));
      acc.waitForEveryone();
      float[] vals = new float[37];
      for (int i = 0; i < vals.length; ++i) vals[i] = i;
      try (Tensor all = Tensor.fromFloats(vals);
          Dataset ds = Dataset.fromTensors(all, null);
          DataLoader dl = DataLoader.create(ds, "{\"batch_size\": 8}")) {
        acc.prepare(null, null, null, dl);
        int seen = 0;
        while (true) {
          try (DataLoader.Batch b = dl.next()) {
            if (b == null) break;
            assertNull(b.target());
            try (Tensor g = acc.gatherForMetrics(b.input())) {
              for (float v : g.toFloats()) assertEquals(seen++, v);
            }
          }
        }
        assertEquals(37, seen);
      }
      // Objects: byte strings the caller serializes.
      List<byte[]> objs = acc.gatherObject(List.of("{\"id\": 1}".getBytes(), new byte[0], "x".getBytes()));
      assertEquals(3, objs.size());
      assertEquals("{\"id\": 1}", new String(objs.get(0)));
      assertEquals(0, objs.get(1).length);
      assertEquals("x", new String(objs.get(2)));
      assertEquals(0, acc.gatherObject(List.of()).size());
    }
  }

  /** Gradient accumulation: with 2 steps, every second micro-step synchronizes and steps the optimizer. */
  @Test
  void accumulate() {
    try (Accelerator acc = Accelerator.create("{\"seed\": 5, \"gradient_accumulation_steps\": 2}");
        Tensor x = Tensor.fromFloats(new float[] {1, 2, 3, 4, 5, 6, 7, 8}, 4, 2);
        Tensor y = Tensor.fromFloats(new float[] {1, 2, 3, 4}, 4, 1);
        Dataset ds = Dataset.fromTensors(x, y);
        DataLoader dl = DataLoader.create(ds, "{\"batch_size\": 1}");
        Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}");
        Optimizer o = Optimizer.create(m, "{\"type\": \"sgd\", \"lr\": 0.1}")) {
      acc.setSeed(5, false, false);
      acc.prepare(m, o, null, dl);
      List<Boolean> syncs = new ArrayList<>();
      List<Boolean> changed = new ArrayList<>();
      while (true) {
        try (DataLoader.Batch b = dl.next()) {
          if (b == null) break;
          byte[] before = firstWeight(m);
          try (Accelerator.AccumulateScope scope = acc.accumulate(m);
              Tensor loss = m.loss(b.input(), b.target())) {
            syncs.add(acc.syncGradients());
            acc.backward(loss);
            assertTrue(acc.clipGradNorm(m, 100, 2) > 0);
            o.step();
            o.zeroGrad();
          }
          changed.add(!java.util.Arrays.equals(before, firstWeight(m)));
          assertFalse(o.stepWasSkipped());
        }
      }
      assertEquals(List.of(false, true, false, true), syncs);
      assertEquals(List.of(false, true, false, true), changed);
      try (Tensor b = acc.broadcast(y, 0)) {
        assertEquals(4f, b.toFloats()[3]);
      }
      acc.clipGradValue(m, 1);
    }
  }

  static byte[] firstWeight(Model m) {
    Map<String, Tensor> sd = m.stateDict();
    try {
      return sd.values().iterator().next().toBytes();
    } finally {
      sd.values().forEach(Tensor::close);
    }
  }

  /** Resuming mid-epoch: a loader that skips the first batches yields the rest of the same pass. */
  @Test
  void skipFirstBatches() {
    float[] vals = new float[10];
    for (int i = 0; i < vals.length; ++i) vals[i] = i;
    try (Tensor all = Tensor.fromFloats(vals);
        Dataset ds = Dataset.fromTensors(all, null);
        DataLoader dl = DataLoader.create(ds, "{\"batch_size\": 2}");
        DataLoader skip = dl.skipFirstBatches(3)) {
      List<Float> got = new ArrayList<>();
      while (true) {
        try (DataLoader.Batch b = skip.next()) {
          if (b == null) break;
          for (float v : b.input().toFloats()) got.add(v);
        }
      }
      assertEquals(List.of(6f, 7f, 8f, 9f), got);
      assertEquals(0, dl.epoch());
    }
  }

  static void permutations(int[] a, int k, List<int[]> out) {
    if (k == a.length) {
      out.add(a.clone());
      return;
    }
    for (int i = k; i < a.length; ++i) {
      int t = a[k];
      a[k] = a[i];
      a[i] = t;
      permutations(a, k + 1, out);
      a[i] = a[k];
      a[k] = t;
    }
  }

  // scenario: destroy_orders
  @Test
  void destroyOrders() {
    List<int[]> orders = new ArrayList<>();
    permutations(new int[] {0, 1, 2, 3, 4, 5}, 0, orders);
    assertEquals(720, orders.size());
    try (Tensor x = Tensor.fromFloats(new float[] {1, 2, 3, 4, 5, 6, 7, 8}, 4, 2);
        Tensor y = Tensor.fromFloats(new float[] {1, 2, 3, 4}, 4, 1)) {
      for (int[] order : orders) {
        Accelerator acc = Accelerator.create();
        Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}");
        Optimizer o = Optimizer.create(m, "{\"type\": \"sgd\", \"lr\": 0.1}");
        Scheduler s = Scheduler.create(o, "{\"type\": \"constant\"}");
        Dataset ds = Dataset.fromTensors(x, y);
        DataLoader dl = DataLoader.create(ds, "{\"batch_size\": 2}");
        acc.prepare(m, o, s, dl);
        NativeObject[] handles = {acc, m, o, s, ds, dl};
        for (int h : order) {
          handles[h].close();
          if (!dl.isClosed()) {
            try (DataLoader.Batch b = dl.next()) {
              if (b != null) assertNotNull(b.input()); // null: the epoch ended
            }
          }
          if (!m.isClosed()) m.numParameters();
          if (!o.isClosed()) o.step();
          if (!s.isClosed()) s.step();
          if (!ds.isClosed()) ds.length();
          if (!acc.isClosed()) acc.numProcesses();
        }
      }
    }
  }

  // scenario: safetensors
  @Test
  void safetensors(@TempDir Path dir) {
    String path = dir.resolve("mlp.safetensors").toString();
    String spec = "{\"type\": \"mlp\", \"sizes\": [2, 16, 1], \"activation\": \"tanh\"}";
    try (Model m = Model.create(spec);
        Model c = Model.create(spec);
        Model other = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}")) {
      m.saveSafetensors(path);
      assertTrue(Files.exists(Path.of(path)));
      c.loadSafetensors(path);
      Map<String, Tensor> a = m.stateDict();
      Map<String, Tensor> b = c.stateDict();
      assertEquals(4, a.size());
      assertEquals(a.keySet(), b.keySet());
      for (String k : a.keySet()) assertArrayEquals(a.get(k).toBytes(), b.get(k).toBytes(), k);
      a.values().forEach(Tensor::close);
      b.values().forEach(Tensor::close);
      expectError(ErrorCode.INVALID_ARGUMENT, "shape", () -> other.loadSafetensors(path));
      expectError(ErrorCode.IO, "cannot open", () -> other.loadSafetensors("/nonexistent.safetensors"));
      expectError(ErrorCode.IO, "/nonexistent/train.bin",
          () -> Dataset.fromTokenFile("/nonexistent/train.bin", "{\"block_size\": 8}"));
    }
  }

  // scenario: save_model
  @Test
  void saveModel(@TempDir Path dir) throws java.io.IOException {
    String spec = "{\"type\": \"mlp\", \"sizes\": [2, 16, 1], \"activation\": \"tanh\"}";
    try (Model m = Model.create(spec);
        Model c = Model.create(spec)) {
      m.saveModel(dir.toString(), null);
      c.loadSafetensors(dir.resolve("model.safetensors").toString());
      Map<String, Tensor> a = m.stateDict();
      Map<String, Tensor> b = c.stateDict();
      assertEquals(a.keySet(), b.keySet());
      for (String k : a.keySet()) assertArrayEquals(a.get(k).toBytes(), b.get(k).toBytes(), k);
      a.values().forEach(Tensor::close);
      b.values().forEach(Tensor::close);
      m.saveModel(dir.toString(), "100");
      assertTrue(Files.exists(dir.resolve("model.safetensors.index.json")));
      try (var files = Files.list(dir)) {
        assertEquals(1, files.filter(f -> f.getFileName().toString().startsWith("model-00001-of-")).count());
      }
      assertFalse(Files.exists(dir.resolve("model.safetensors")));
      expectError(ErrorCode.INVALID_ARGUMENT, "10XB", () -> m.saveModel(dir.toString(), "10XB"));
    }
  }

  // scenario: callback_dataset
  @Test
  void callbackDataset() {
    Dataset ds = Dataset.fromFunction(8, i -> {
      if (i == 5) throw new IllegalArgumentException("no sample " + i);
      return new Dataset.Sample(Tensor.fromFloats(new float[] {i, i}),
          Tensor.fromBytes(java.nio.ByteBuffer.allocate(4).order(ByteOrder.nativeOrder()).putFloat(2f * i).array(),
              DType.FLOAT32));
    });
    assertEquals(8, ds.length());
    try (DataLoader dl = DataLoader.create(ds, "{\"batch_size\": 4}")) {
      ds.close(); // the loader keeps it
      try (DataLoader.Batch b = dl.next()) {
        assertEquals(3.0f, b.input().toFloats()[6]);
        assertEquals(6.0f, b.target().toFloats()[3]);
      }
      AccException e = expectError(ErrorCode.CALLBACK, "index 5", dl::next);
      assertTrue(e.getCause() instanceof IllegalArgumentException, "cause: " + e.getCause());
      assertEquals("no sample 5", e.getCause().getMessage());
    }
    // A sample without input is the function's error too.
    try (Dataset bad = Dataset.fromFunction(2, i -> null);
        DataLoader dl = DataLoader.create(bad, null)) {
      AccException e = expectError(ErrorCode.CALLBACK, "", dl::next);
      assertTrue(e.getCause() instanceof IllegalStateException);
    }
    expectError(ErrorCode.INVALID_ARGUMENT, "length", () -> Dataset.fromFunction(-1, i -> null));
    // The tensors handed over are owned by libacc: closing them afterwards is harmless.
    Tensor given = Tensor.fromFloats(new float[] {1, 2});
    try (Dataset one = Dataset.fromFunction(1, i -> new Dataset.Sample(given, null));
        DataLoader dl = DataLoader.create(one, null);
        DataLoader.Batch b = dl.next()) {
      assertTrue(given.isClosed());
      given.close();
      assertArrayEquals(new float[] {1, 2}, b.input().toFloats());
      assertNull(b.target());
    }
  }

  static final String GPT =
      "{\"type\": \"gpt\", \"vocab_size\": 7, \"block_size\": 3, \"n_layer\": 1, \"n_head\": 1, \"n_embd\": 8}";

  /** A forwardBatch result: "loss" finite and > 0 (returned, to close), "logits" [rows, 3, 7]. */
  static Tensor checkGptOutputs(Batch out, long rows) {
    assertEquals(List.of("logits", "loss"), out.names().stream().sorted().toList());
    try (Tensor logits = out.get("logits")) {
      assertArrayEquals(new long[] {rows, 3, 7}, logits.shape());
    }
    Tensor loss = out.get("loss");
    double l = loss.item();
    assertTrue(Double.isFinite(l) && l > 0, "loss " + l);
    return loss;
  }

  // scenario: named_batch
  @Test
  void namedBatch() {
    try (Tensor ids = Tensor.fromLongs(new long[] {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4}, 4, 3);
        Tensor mask = Tensor.fromLongs(new long[] {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 4, 3);
        Accelerator acc = Accelerator.create("{\"seed\": 5}");
        Model m = Model.create(GPT);
        Optimizer o = Optimizer.create(m, "{\"type\": \"adamw\", \"lr\": 0.01}")) {
      // The handle: insertion order, replacement in place, shared data.
      Batch b = Batch.create();
      assertEquals(0, b.size());
      b.set("input_ids", mask).set("labels", ids).set("input_ids", ids); // replaced in its place
      assertEquals(2, b.size());
      assertEquals(List.of("input_ids", "labels"), b.names());
      assertTrue(b.contains("labels"));
      assertFalse(b.contains("attention_mask"));
      try (Tensor got = b.get("input_ids")) {
        assertEquals(4L, got.toLongs()[4]);
      }
      Map<String, Tensor> entries = b.tensors();
      assertEquals(List.of("input_ids", "labels"), new ArrayList<>(entries.keySet()));
      assertEquals(12, entries.get("labels").numel());
      entries.values().forEach(Tensor::close);
      assertEquals("Batch[input_ids, labels]", b.toString());
      expectError(ErrorCode.INVALID_ARGUMENT, "input_ids, labels", () -> b.get("attention_mask"));
      expectError(ErrorCode.INVALID_ARGUMENT, "empty", () -> b.set("", ids));

      // A dataset of named columns (copied: the batch may go), a loader, nextBatch.
      try (Dataset ds = Dataset.fromBatch(b)) {
        b.close();
        b.close(); // idempotent
        expectError(ErrorCode.INVALID_ARGUMENT, "batch is NULL", () -> b.set("x", ids));
        assertEquals(4, ds.length());
        try (DataLoader dl = DataLoader.create(ds, "{\"batch_size\": 2}")) {
          acc.prepare(m, o, null, dl);
          int batches = 0;
          while (true) {
            try (Batch batch = dl.nextBatch()) {
              if (batch == null) break; // end of the epoch
              assertEquals(List.of("input_ids", "labels"), batch.names());
              // forwardBatch with Hugging Face's "labels": the loss is ready for backward.
              try (Batch out = m.forwardBatch(batch);
                  Tensor loss = checkGptOutputs(out, 2)) {
                acc.backward(loss);
                o.step();
                o.zeroGrad();
              }
              ++batches;
            }
          }
          assertEquals(2, batches);
          // A name the model does not take is refused by name.
          try (Batch extra = Batch.of(Map.of("token_type_ids", ids))) {
            extra.set("input_ids", ids);
            expectError(ErrorCode.INVALID_ARGUMENT, "token_type_ids", () -> m.forwardBatch(extra));
          }
          expectError(ErrorCode.INVALID_ARGUMENT, "batch is NULL", () -> m.forwardBatch(null));
          // The (x, y) path still reads a named batch of two tensors.
          try (DataLoader.Batch pair = dl.next()) {
            assertArrayEquals(new long[] {2, 3}, pair.input().shape());
            assertNotNull(pair.target());
          }
        }
      }
    }
  }

  // scenario: named_callback_dataset
  @Test
  void namedCallbackDataset() {
    // Sample i: {"input_ids": [i, i+1, i+2] mod 7, "labels": the same}; sample 5 fails.
    Dataset ds = Dataset.fromBatchFunction(6, i -> {
      if (i == 5) throw new IllegalArgumentException("no sample " + i);
      try (Tensor ids = Tensor.fromLongs(new long[] {i % 7, (i + 1) % 7, (i + 2) % 7})) {
        return Batch.create().set("input_ids", ids).set("labels", ids);
      }
    });
    assertEquals(6, ds.length());
    try (DataLoader dl = DataLoader.create(ds, "{\"batch_size\": 2}");
        Model m = Model.create(GPT)) {
      ds.close(); // the loader keeps it
      try (Batch b = dl.nextBatch();
          Tensor labels = b.get("labels");
          Batch out = m.forwardBatch(b)) {
        assertArrayEquals(new long[] {0, 1, 2, 1, 2, 3}, labels.toLongs());
        checkGptOutputs(out, 2).close();
      }
      dl.nextBatch().close();
      AccException e = expectError(ErrorCode.CALLBACK, "index 5", dl::nextBatch);
      assertTrue(e.getCause() instanceof IllegalArgumentException, "cause: " + e.getCause());
      assertEquals("no sample 5", e.getCause().getMessage());
    }
    // No batch, or an empty one, is refused.
    try (Dataset bad = Dataset.fromBatchFunction(2, i -> null);
        DataLoader dl = DataLoader.create(bad, null)) {
      AccException e = expectError(ErrorCode.CALLBACK, "", dl::nextBatch);
      assertTrue(e.getCause() instanceof IllegalStateException);
    }
    try (Dataset empty = Dataset.fromBatchFunction(1, i -> Batch.create());
        DataLoader dl = DataLoader.create(empty, null)) {
      expectError(ErrorCode.CALLBACK, "no tensor for index 0", dl::nextBatch);
    }
    // The batch handed over is owned by libacc: closing it afterwards is harmless.
    Batch given = Batch.create();
    try (Tensor x = Tensor.fromFloats(new float[] {1, 2})) {
      given.set("input", x);
    }
    try (Dataset one = Dataset.fromBatchFunction(1, i -> given);
        DataLoader dl = DataLoader.create(one, null);
        Batch b = dl.nextBatch();
        Tensor x = b.get("input")) {
      assertTrue(given.isClosed());
      given.close();
      assertArrayEquals(new float[] {1, 2}, x.toFloats());
    }
    expectError(ErrorCode.INVALID_ARGUMENT, "length", () -> Dataset.fromBatchFunction(-1, i -> null));
  }

  /** The Cleaner releases handles nobody closed. */
  @Test
  void cleanerReleasesLeakedHandles() throws InterruptedException {
    long before = NativeObject.leakedHandles();
    for (int i = 0; i < 20; ++i) {
      Tensor.fromFloats(new float[] {1, 2, 3});
      Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}");
    }
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (NativeObject.leakedHandles() - before < 40 && System.nanoTime() < deadline) {
      System.gc();
      Thread.sleep(20);
    }
    assertTrue(NativeObject.leakedHandles() - before >= 40, "cleaned " + (NativeObject.leakedHandles() - before));
  }

  /** close() waits for a call in flight on another thread. */
  @Test
  void closeWaitsForCallsInFlight() throws Exception {
    Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1]}");
    long p = m.enter(); // a call "in flight"
    Thread closer = new Thread(m::close);
    closer.start();
    closer.join(200);
    assertTrue(closer.isAlive(), "close() returned while a call was in flight");
    // New calls fail at once while close() waits.
    expectError(ErrorCode.INVALID_ARGUMENT, "model is NULL", m::numParameters);
    m.leave(p);
    closer.join(5000);
    assertFalse(closer.isAlive());
  }

  // scenario: trackers
  @Test
  void trackers(@TempDir Path dir) throws Exception {
    expectError(ErrorCode.UNSUPPORTED, "comet_ml", () -> Accelerator.create("{\"log_with\": [\"comet_ml\"]}"));
    String config = "{\"log_with\": [\"jsonl\", \"csv\"], \"project_dir\": \"" + dir + "\"}";
    try (Accelerator a = Accelerator.create(config)) {
      Map<String, Double> loss = new java.util.LinkedHashMap<>();
      loss.put("loss", 1.0);
      expectError(ErrorCode.INVALID_STATE, "init_trackers", () -> a.log(loss, 0));
      a.initTrackers("java", "{\"lr\": 0.5, \"opt\": {\"name\": \"sgd\"}}", null);
      Map<String, Double> values = new java.util.LinkedHashMap<>();
      values.put("loss", 0.5);
      values.put("lr", 0.25);
      a.log(values, 1);
      a.log(Map.of("loss", Double.NaN), Accelerator.NO_STEP);
      a.logJson("{\"note\": \"done\", \"acc\": {\"train\": 1}}", 2);
      expectError(ErrorCode.INVALID_ARGUMENT, "JSON object", () -> a.logJson("[1]", 3));
      a.endTraining();
    }
    Path run = dir.resolve("java");
    List<String> lines = Files.readAllLines(run.resolve("metrics.jsonl"));
    assertEquals(3, lines.size(), lines::toString);
    assertTrue(lines.get(0).contains("\"step\": 1") && lines.get(0).contains("\"values\": {\"loss\": 0.5, \"lr\": 0.25}"),
        lines.get(0));
    assertTrue(lines.get(1).contains("\"step\": null") && lines.get(1).contains("NaN"), lines.get(1));
    assertEquals("{\"lr\": 0.5, \"opt.name\": \"sgd\"}\n", Files.readString(run.resolve("hparams.json")));
    assertTrue(Files.readString(run.resolve("metrics.csv")).startsWith("step,time,loss,lr,"));
  }

  /** A counter registered for checkpointing (8 little-endian bytes). */
  static final class Counter implements Checkpointable {
    long value;

    @Override
    public byte[] save() {
      return ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(value).array();
    }

    @Override
    public void load(byte[] data) {
      if (data.length != 8) throw new IllegalArgumentException(data.length + " bytes");
      value = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN).getLong();
    }
  }

  /** The checkpoint scenario's objects: an MLP and AdamW prepared, a counter registered. */
  record Checkpointed(Accelerator acc, Model model, Optimizer opt, Counter counter) implements AutoCloseable {
    static Checkpointed create(String config) {
      Accelerator a = Accelerator.create(config);
      Model m = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 8, 1]}");
      Optimizer o = Optimizer.create(m, "{\"type\": \"adamw\", \"lr\": 0.01}");
      a.prepare(m, o, null, null);
      Counter c = new Counter();
      a.registerForCheckpointing(c);
      return new Checkpointed(a, m, o, c);
    }

    /** One AdamW step on fixed data. */
    void step() {
      try (Tensor x = Tensor.fromFloats(new float[] {0.5f, -1, 1.5f, 2, -0.25f, 0.75f, 1, 0}, 4, 2);
          Tensor y = Tensor.fromFloats(new float[] {1, -1, 0.5f, 2}, 4, 1);
          Tensor loss = model.loss(x, y)) {
        acc.backward(loss);
        opt.step();
        opt.zeroGrad();
      }
    }

    @Override
    public void close() {
      opt.close();
      model.close();
      acc.close();
    }
  }

  // scenario: checkpoint
  @Test
  void checkpoint(@TempDir Path root) throws Exception {
    String dir = root.resolve("step_3").toString();
    try (Checkpointed a = Checkpointed.create("{\"seed\": 11}");
        Checkpointed b = Checkpointed.create("{\"seed\": 12}")) {
      for (int i = 0; i < 3; ++i) {
        a.step();
        a.counter().value++;
      }
      a.acc().saveState(dir);
      assertTrue(Files.exists(root.resolve("step_3/manifest.json")));
      assertTrue(Files.exists(root.resolve("step_3/custom_checkpoint_0.bin")));

      assertFalse(java.util.Arrays.equals(firstWeight(a.model()), firstWeight(b.model())));
      b.acc().loadState(dir);
      assertArrayEquals(firstWeight(a.model()), firstWeight(b.model()));
      assertEquals(3, b.counter().value);
      // The optimizer's moments came back too: one more step agrees bit for bit.
      a.step();
      b.step();
      assertArrayEquals(firstWeight(a.model()), firstWeight(b.model()));

      // A missing directory is refused naming it; a directory without a checkpoint, naming its manifest.
      String missing = root.resolve("missing").toString();
      expectError(ErrorCode.IO, missing, () -> b.acc().loadState(missing));
      Files.createDirectory(root.resolve("empty"));
      expectError(ErrorCode.IO, "manifest.json", () -> b.acc().loadState(root.resolve("empty").toString()));
      // Automatic naming (no directory) needs a project configuration.
      expectError(ErrorCode.INVALID_ARGUMENT, "automatic_checkpoint_naming", () -> b.acc().saveState());
      expectError(ErrorCode.INVALID_ARGUMENT, "project_dir", () -> b.acc().loadState());
    }

    // A failing save function fails saveState with CALLBACK, its exception as the cause.
    try (Accelerator fail = Accelerator.create()) {
      fail.registerForCheckpointing(() -> {
        throw new java.io.IOException("disk of the counter is full");
      }, data -> {});
      AccException e = expectError(ErrorCode.CALLBACK, "save callback",
          () -> fail.saveState(root.resolve("failed").toString()));
      assertTrue(e.getCause() instanceof java.io.IOException, "cause: " + e.getCause());
      assertEquals("disk of the counter is full", e.getCause().getMessage());
      assertFalse(Files.exists(root.resolve("failed/manifest.json")));
      // null bytes are the function's error too.
      try (Accelerator nulls = Accelerator.create()) {
        nulls.registerForCheckpointing(() -> null, data -> {});
        AccException n = expectError(ErrorCode.CALLBACK, "", () -> nulls.saveState(root.resolve("null").toString()));
        assertTrue(n.getCause() instanceof IllegalStateException);
      }
      expectError(ErrorCode.INVALID_ARGUMENT, "null", () -> fail.registerForCheckpointing(null));
    }
    // A failing load function: CALLBACK with its exception as the cause.
    try (Checkpointed picky = Checkpointed.create(null)) {
      picky.acc().registerForCheckpointing(() -> new byte[0], data -> {
        throw new IllegalArgumentException("wrong version");
      });
      String two = root.resolve("two_objects").toString();
      picky.acc().saveState(two);
      AccException e = expectError(ErrorCode.CALLBACK, "load callback", () -> picky.acc().loadState(two));
      assertEquals("wrong version", e.getCause().getMessage());
    }
    Accelerator closed = Accelerator.create();
    closed.close();
    expectError(ErrorCode.INVALID_ARGUMENT, "NULL", () -> closed.registerForCheckpointing(new Counter()));
    expectError(ErrorCode.INVALID_ARGUMENT, "NULL", () -> closed.saveState(dir));

    // Automatic naming (ProjectConfiguration): saveState() / loadState().
    String config = "{\"seed\": 11, \"project_config\": {\"automatic_checkpoint_naming\": true, \"project_dir\": \""
        + root.resolve("project") + "\"}}";
    try (Checkpointed c = Checkpointed.create(config);
        Checkpointed d = Checkpointed.create(config)) {
      c.counter().value = 7;
      c.acc().saveState();
      assertTrue(Files.exists(root.resolve("project/checkpoints/checkpoint_0/manifest.json")));
      d.step();
      d.acc().loadState();
      assertEquals(7, d.counter().value);
      assertArrayEquals(firstWeight(c.model()), firstWeight(d.model()));
    }

    // "resume_from_checkpoint": "latest": nothing before the first save (a fresh start), then the
    // newest checkpoint, into a second accelerator with the same config.
    String resume = "{\"seed\": 13, \"project_config\": {\"project_dir\": \"" + root.resolve("resume")
        + "\", \"automatic_checkpoint_naming\": true}, \"resume_from_checkpoint\": \"latest\"}";
    try (Checkpointed e = Checkpointed.create(resume)) {
      assertFalse(e.acc().resumeFromCheckpoint());
      e.step();
      e.counter().value = 5;
      e.acc().saveState();
      try (Checkpointed f = Checkpointed.create(resume)) {
        assertFalse(java.util.Arrays.equals(firstWeight(e.model()), firstWeight(f.model())));
        assertTrue(f.acc().resumeFromCheckpoint());
        assertArrayEquals(firstWeight(e.model()), firstWeight(f.model()));
        assertEquals(5, f.counter().value);
      }
    }
  }

  /** A Hugging Face fixture model of tests/hf (made by transformers); the tests run in bindings/java. */
  static String hfFixture(String name) {
    return Path.of("..", "..", "tests", "hf", "fixtures", name, "model").toAbsolutePath().normalize().toString();
  }

  // scenario: hf_generate
  @Test
  void hfGenerate() {
    String missing = hfFixture("no-such-model");
    expectError(ErrorCode.IO, "no-such-model", () -> Model.fromPretrained(missing, null));
    long[] prompt = {3, 17, 42, 8, 64};
    String greedy = "{\"max_new_tokens\": 6}";
    try (Model m = Model.fromPretrained(hfFixture("llama"), "{\"dtype\": \"float32\"}");
        Tensor x = Tensor.fromLongs(prompt, 1, 5)) {
      // Greedy, streaming every step to the listener.
      List<long[]> seen = new ArrayList<>();
      long[] seq;
      try (Tensor out = m.generate(x, null, greedy, tokens -> seen.add(tokens))) {
        assertArrayEquals(new long[] {1, 11}, out.shape());
        seq = out.toLongs();
      }
      assertArrayEquals(prompt, java.util.Arrays.copyOf(seq, 5));
      assertEquals(6, seen.size());
      assertArrayEquals(new long[] {seq[10]}, seen.get(5));
      // Without a listener (and with an all-ones mask): the same tokens.
      try (Tensor mask = Tensor.fromLongs(new long[] {1, 1, 1, 1, 1}, 1, 5);
          Tensor same = m.generate(x, mask, greedy, null)) {
        assertArrayEquals(seq, same.toLongs());
      }
      // The listener stops it after 2 steps.
      int[] calls = {0};
      try (Tensor stopped = m.generate(x, null, greedy, tokens -> ++calls[0] < 2)) {
        assertEquals(2, calls[0]);
        assertArrayEquals(new long[] {1, 7}, stopped.shape());
      }
      // An exception stops generating: CALLBACK with the exception as the cause.
      Model.TokenListener boom = tokens -> {
        throw new IllegalStateException("boom");
      };
      AccException e = expectError(ErrorCode.CALLBACK, "token listener", () -> m.generate(x, null, greedy, boom));
      assertTrue(e.getCause() instanceof IllegalStateException, "cause: " + e.getCause());
      assertEquals("boom", e.getCause().getMessage());
      // Bad options name the key.
      expectError(ErrorCode.INVALID_CONFIG, "top_p", () -> m.generate(x, "{\"top_p\": 2}"));
    }
  }

  // scenario: hf_save
  @Test
  void hfSave(@TempDir Path dir) {
    String config = "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 64, \"hidden_size\": 16,"
        + " \"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
        + " \"num_key_value_heads\": 1}";
    String greedy = "{\"max_new_tokens\": 5}";
    try (Model m = Model.fromConfig(config, null);
        Tensor x = Tensor.fromLongs(new long[] {1, 2, 3}, 1, 3)) {
      m.savePretrained(dir.toString(), null);
      assertTrue(Files.isRegularFile(dir.resolve("config.json")));
      assertTrue(Files.isRegularFile(dir.resolve("model.safetensors")));
      try (Model loaded = Model.fromPretrained(dir.toString());
          Tensor a = m.generate(x, greedy);
          Tensor b = loaded.generate(x, greedy)) {
        assertArrayEquals(new long[] {1, 8}, a.shape());
        assertArrayEquals(a.toLongs(), b.toLongs());
      }
    }
    expectError(ErrorCode.UNSUPPORTED, "T5Model", () -> Model.fromConfig("{\"architectures\": [\"T5Model\"]}"));
  }

  // scenario: bigmodel
  @Test
  void bigModel() {
    String config = "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 32000, \"hidden_size\": 4096,"
        + " \"intermediate_size\": 11008, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
        + " \"num_key_value_heads\": 32, \"max_position_embeddings\": 4096, \"tie_word_embeddings\": false}";
    try (Model m = Model.fromConfig(config, "{\"device\": \"meta\", \"dtype\": \"float16\"}")) {
      long n = m.numParameters();
      assertEquals(6738415616L, n);
      // The weights and, as Accelerate counts them, rotary_emb's inv_freq and original_inv_freq (64 float32 each).
      Map<String, Long> sizes = m.moduleSizes(null);
      assertEquals(2 * n + 512, sizes.get(""));
      assertEquals("", sizes.keySet().iterator().next());
      assertEquals(2 * n + 512, m.moduleSizes("float32").get("")); // as Accelerate: never wider than its own

      Map<String, Object> devices = m.inferAutoDeviceMap("{\"device_map\": \"sequential\","
          + " \"max_memory\": {\"0\": \"5GiB\", \"1\": \"5GiB\", \"cpu\": \"64GB\"}}");
      assertEquals(0, devices.get("model.embed_tokens"), devices.toString());
      assertEquals(1, devices.get("model.layers.20"), devices.toString());
      assertEquals("cpu", devices.get("lm_head"), devices.toString());
      expectError(ErrorCode.INVALID_CONFIG, "npu0",
          () -> m.inferAutoDeviceMap("{\"max_memory\": {\"npu0\": \"1GB\"}}"));
      expectError(ErrorCode.INVALID_CONFIG, "int8", () -> m.moduleSizes("int8"));
    }

    // Gradients off on this thread: a forward records no graph, so its loss cannot be backpropagated.
    try (Accelerator acc = Accelerator.create();
        Model small = Model.create("{\"type\": \"mlp\", \"sizes\": [2, 1], \"loss\": \"mse\"}");
        Tensor x = Tensor.fromFloats(new float[] {1, 2}, 1, 2);
        Tensor y = Tensor.fromFloats(new float[] {3}, 1, 1)) {
      assertTrue(Acc.setGradEnabled(false));
      try (Tensor loss = small.loss(x, y)) {
        expectError(ErrorCode.INVALID_ARGUMENT, "grad", () -> acc.backward(loss));
      }
      assertFalse(Acc.setGradEnabled(true));
      try (Tensor loss = small.loss(x, y)) {
        acc.backward(loss);
      }
      try (Acc.NoGrad g = Acc.noGrad(); Tensor loss = small.loss(x, y)) {
        expectError(ErrorCode.INVALID_ARGUMENT, "grad", () -> acc.backward(loss));
      }
      assertTrue(Acc.setGradEnabled(true)); // the guard restored it
    } finally {
      Acc.setGradEnabled(true); // for the tests after this one on this thread, whatever failed
    }
  }

  /** A model's parameters by name, copied out. */
  static Map<String, float[]> params(Model m) {
    Map<String, float[]> out = new java.util.HashMap<>();
    m.stateDict().forEach((name, t) -> {
      out.put(name, t.toFloats());
      t.close();
    });
    return out;
  }

  /** max |a[i] * scale - b[i]| */
  static double maxDiff(float[] a, double scale, float[] b) {
    double d = 0;
    for (int i = 0; i < a.length; ++i) {
      d = Math.max(d, Math.abs(a[i] * scale - b[i]));
    }
    return d;
  }

  /** One forward, backward and step of a prepared MLP [2, 8, 1] on a fixed batch. */
  static void sgdStep(Accelerator acc, Model m, Optimizer o) {
    try (Tensor x = Tensor.fromFloats(new float[] {1, 2, 3, 4, -1, 0.5f, 2, -2}, 4, 2);
        Tensor y = Tensor.fromFloats(new float[] {1, -1, 0.5f, 2}, 4, 1);
        Tensor loss = m.loss(x, y)) {
      acc.backward(loss);
      o.step();
      o.zeroGrad();
    }
  }

  static final String MLP_2_8_1 = "{\"type\": \"mlp\", \"sizes\": [2, 8, 1], \"activation\": \"tanh\", \"loss\": \"mse\"}";

  // scenario: freeze
  @Test
  void freeze() {
    try (Accelerator acc = Accelerator.create("{\"seed\": 3}"); Model m = Model.create(MLP_2_8_1)) {
      assertEquals(2, m.setRequiresGrad("layers\\.0\\..*", false));
      expectError(ErrorCode.INVALID_ARGUMENT, "nothing", () -> m.setRequiresGrad("nothing", false));
      expectError(ErrorCode.INVALID_CONFIG, "selects no trainable parameter",
          () -> Optimizer.create(m, "{\"type\": \"sgd\", \"param_groups\": [{\"params\": \"layers\\\\.0\\\\..*\"}]}"));
      try (Optimizer o = Optimizer.create(m, "{\"type\": \"sgd\", \"lr\": 0.1}")) {
        acc.prepare(m, o, null, null);
        Map<String, float[]> before = params(m);
        sgdStep(acc, m, o);
        Map<String, float[]> after = params(m);
        before.forEach((name, v) -> {
          double moved = maxDiff(v, 1, after.get(name));
          assertEquals(name.startsWith("layers.0."), moved == 0, () -> name + " moved by " + moved);
        });
        expectError(ErrorCode.INVALID_STATE, "prepare", () -> m.setRequiresGrad("layers\\.0\\..*", true));
      }
    }
  }

  // scenario: profile
  @Test
  void profile(@TempDir Path dir) throws Exception {
    try (Accelerator acc = Accelerator.create("{\"cpu\": true, \"seed\": 3}");
        Model m = Model.create(MLP_2_8_1);
        Optimizer o = Optimizer.create(m, "{\"type\": \"sgd\", \"lr\": 0.1}")) {
      acc.prepare(m, o, null, null);
      expectError(ErrorCode.INVALID_CONFIG, "with_stak", () -> acc.profile("{\"with_stak\": true}"));
      expectError(ErrorCode.UNSUPPORTED, "profile_kwargs.activities",
          () -> acc.profile("{\"activities\": [\"cuda\"]}"));
      Path out = dir.resolve("traces");
      String kwargs = "{\"output_trace_dir\": \"" + out + "\", \"schedule_option\": {\"wait\": 1, \"warmup\": 1, "
          + "\"active\": 2}}";
      try (Accelerator.Profile p = acc.profile(kwargs)) {
        expectError(ErrorCode.INVALID_STATE, "profile is running", () -> acc.profile(null));
        for (int i = 0; i < 4; ++i) {
          sgdStep(acc, m, o);
          p.step();
        }
      }
      List<String> names = new ArrayList<>();
      try (var files = Files.list(out)) {
        files.forEach(f -> names.add(f.getFileName().toString()));
      }
      assertEquals(List.of("profile_0.json"), names);
      String trace = Files.readString(out.resolve("profile_0.json")).strip();
      assertTrue(trace.startsWith("{") && trace.endsWith("}"));
      for (String want : List.of("\"ProfilerStep#2\"", "\"ProfilerStep#3\"", "\"acc::forward\"", "\"aten::")) {
        assertTrue(trace.contains(want), "the trace lacks " + want);
      }
      assertFalse(trace.contains("\"ProfilerStep#1\""), "step 1 (warmup) was recorded");
    }
  }

  // scenario: param_groups
  @Test
  void paramGroups(@TempDir Path dir) {
    String path = dir.resolve("init.safetensors").toString();
    try (Accelerator acc = Accelerator.create("{\"seed\": 3}");
        Model one = Model.create(MLP_2_8_1);
        Model grouped = Model.create(MLP_2_8_1)) {
      one.saveSafetensors(path);
      grouped.loadSafetensors(path);
      try (Optimizer o1 = Optimizer.create(one, "{\"type\": \"sgd\", \"lr\": 0.1}");
          Optimizer o2 = Optimizer.create(grouped, "{\"type\": \"sgd\", \"lr\": 0.1, \"param_groups\": "
              + "[{\"params\": [\"layers\\\\.0\\\\..*\"], \"lr\": 0.3}]}")) {
        acc.prepare(one, o1, null, null);
        acc.prepare(grouped, o2, null, null);
        Map<String, float[]> start = params(one);
        sgdStep(acc, one, o1);
        sgdStep(acc, grouped, o2);
        Map<String, float[]> p1 = params(one);
        Map<String, float[]> p2 = params(grouped);
        start.forEach((name, s0) -> {
          float[] d1 = new float[s0.length];
          float[] d2 = new float[s0.length];
          for (int i = 0; i < s0.length; ++i) {
            d1[i] = p1.get(name)[i] - s0[i];
            d2[i] = p2.get(name)[i] - s0[i];
          }
          double ratio = name.startsWith("layers.0.") ? 3 : 1; // the first group's lr is 3x the top-level one
          double diff = maxDiff(d1, ratio, d2);
          assertTrue(diff <= 1e-6 && maxDiff(d1, 1, new float[s0.length]) > 0,
              () -> name + ": not " + ratio + "x (|diff| " + diff + ")");
        });
        expectError(ErrorCode.INVALID_CONFIG, "param_groups[0]",
            () -> Optimizer.create(one, "{\"type\": \"sgd\", \"param_groups\": [{\"params\": \"nothing\"}]}"));
        Optimizer.create(grouped, "{\"type\": \"adamw\", \"param_groups\": \"transformers\"}").close();
      }
    }
  }

  /** A model's logits in eval mode on fixed input ids. */
  static float[] logits(Model m) {
    m.setTraining(false);
    try (Tensor ids = Tensor.fromLongs(new long[] {3, 17, 42, 8, 64, 5}, 1, 6);
        Batch in = Batch.of(Map.of("input_ids", ids));
        Batch out = m.forwardBatch(in);
        Tensor l = out.get("logits")) {
      return l.toFloats();
    }
  }

  // scenario: lora
  @Test
  void lora(@TempDir Path dir) {
    String fixture = hfFixture("llama");
    String lora = "{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": \"all-linear\"}";
    String base = "model.layers.0.self_attn.q_proj.weight";
    String loraB = "model.layers.0.self_attn.q_proj.lora_B.weight";
    try (Accelerator acc = Accelerator.create("{\"seed\": 3}"); Model m = Model.fromPretrained(fixture)) {
      expectError(ErrorCode.INVALID_STATE, "no adapter", () -> m.saveAdapter(dir.toString()));
      expectError(ErrorCode.INVALID_ARGUMENT, "r must be a positive integer", () -> m.addLora("{\"r\": 0}"));
      expectError(ErrorCode.INVALID_ARGUMENT, "q_proj", () -> m.addLora("{\"target_modules\": [\"nope\"]}"));
      m.addLora(lora);
      expectError(ErrorCode.INVALID_STATE, "adapter already", () -> m.addLora(lora));
      Map<String, float[]> start = params(m);
      assertTrue(start.containsKey("model.layers.0.self_attn.q_proj.lora_A.weight"));

      // Three AdamW steps: only the adapter moves.
      try (Optimizer o = Optimizer.create(m, "{\"type\": \"adamw\", \"lr\": 0.01}");
          Tensor ids = Tensor.fromLongs(new long[] {3, 17, 42, 8, 64, 5, 9, 11, 3, 17, 42, 8, 64, 5, 9, 11}, 2, 8);
          Batch b = Batch.of(Map.of("input_ids", ids, "labels", ids))) {
        m.setTraining(true);
        acc.prepare(m, o, null, null);
        for (int step = 0; step < 3; ++step) {
          try (Batch out = m.forwardBatch(b); Tensor loss = out.get("loss")) {
            acc.backward(loss);
          }
          o.step();
          o.zeroGrad();
        }
      }
      Map<String, float[]> trained = params(m);
      assertEquals(0, maxDiff(start.get(base), 1, trained.get(base)), "the base weight moved");
      assertTrue(maxDiff(start.get(loraB), 1, trained.get(loraB)) > 0, "the adapter did not move");
      float[] want = logits(m);

      // Saved as peft saves it, loaded into a fresh base model: the same logits; merged: still.
      Path adapter = dir.resolve("adapter");
      m.saveAdapter(adapter.toString());
      assertTrue(Files.isRegularFile(adapter.resolve("adapter_config.json")));
      assertTrue(Files.isRegularFile(adapter.resolve("adapter_model.safetensors")));
      try (Model fresh = Model.fromPretrained(fixture)) {
        String missing = dir.resolve("missing").toString();
        expectError(ErrorCode.IO, "missing", () -> fresh.loadAdapter(missing, null));
        fresh.loadAdapter(adapter.toString(), null);
        assertTrue(maxDiff(logits(fresh), 1, want) <= 1e-5, "the loaded adapter's logits differ");
        fresh.mergeAdapter();
        // W + B A * scaling rounds otherwise than the two products apart (peft's own merge moves the fixtures'
        // logits by up to 1.7e-5; an optimised build's kernels by more).
        double merged = maxDiff(logits(fresh), 1, want);
        assertTrue(merged <= 1e-4, "the merged model's logits differ by " + merged);
        assertTrue(params(fresh).keySet().stream().noneMatch(n -> n.contains("lora_")));
        expectError(ErrorCode.INVALID_STATE, "no adapter", fresh::mergeAdapter);
      }
    }
  }

  /** The tiny byte-level BPE tokenizer of tests/text (with a {% generation %} chat template). */
  static String tinyTokenizer() {
    return Path.of("..", "..", "tests", "text", "tiny", "bytebpe").toAbsolutePath().normalize().toString();
  }

  // scenario: text
  @Test
  void text(@TempDir Path tmp) throws Exception {
    expectError(ErrorCode.INVALID_ARGUMENT, "/nonexistent/tok", () -> Tokenizer.fromPretrained("/nonexistent/tok"));
    try (Tokenizer tok = Tokenizer.fromPretrained(tinyTokenizer())) {
      String info = tok.info();
      assertTrue(info.contains("\"eos_token\":\"<|im_end|>\""), info);

      // A padded batch, its rows and its tensors.
      List<String> texts = List.of("Hello world!", "A longer sentence, with more tokens in it.");
      try (Encoding enc = tok.encode(texts, "{\"padding\": true, \"padding_side\": \"left\"}");
           Batch batch = enc.toBatch();
           Tensor ids = batch.get("input_ids")) {
        assertEquals(2, enc.rows());
        long[] ids0 = enc.inputIds(0), ids1 = enc.inputIds(1), mask0 = enc.attentionMask(0);
        assertTrue(ids0.length == ids1.length && ids0.length == mask0.length && ids0.length > 3);
        assertEquals(0, mask0[0]);
        assertEquals(1, mask0[mask0.length - 1]);
        assertEquals(1, enc.sample(1));
        assertEquals(2 * ids1.length, enc.get(1, "offsets").length);
        expectError(ErrorCode.INVALID_ARGUMENT, "row 2", () -> enc.get(2, "input_ids"));
        expectError(ErrorCode.INVALID_ARGUMENT, "labels", () -> enc.get(0, "labels"));
        assertArrayEquals(new long[] {2, ids1.length}, ids.shape());
      }

      // Unpadded rows are no batch; decode; options named in errors.
      try (Encoding ragged = tok.encode(texts, null)) {
        expectError(ErrorCode.INVALID_ARGUMENT, "padding", ragged::toBatch);
        assertEquals("Hello world!", tok.decode(ragged.inputIds(0), "{\"skip_special_tokens\": true}"));
      }
      expectError(ErrorCode.INVALID_CONFIG, "paddin", () -> tok.encode(texts, "{\"paddin\": true}"));
      expectError(ErrorCode.INVALID_ARGUMENT, "-1", () -> tok.decode(new long[] {-1}, null));
      String wide = "h\u00e9llo \uD83D\uDC4B \u4e16\u754c"; // héllo 👋 世界: outside the BMP too
      try (Encoding we = tok.encode(wide, "{\"add_special_tokens\": false}")) {
        assertEquals(wide, tok.decode(we.inputIds(0), null));
      }
      try (Encoding pe = tok.encode(List.of("question"), List.of("answer"), null)) {
        assertTrue(java.util.Arrays.stream(pe.get(0, "sequence_ids")).anyMatch(v -> v == 1));
      }
      expectError(ErrorCode.INVALID_ARGUMENT, "pairs", () -> tok.encode(List.of("a", "b"), List.of("c"), null));

      // Vocabulary look-ups.
      long id = tok.tokenToId("<|im_end|>");
      assertTrue(id >= 0);
      assertEquals("<|im_end|>", tok.idToToken(id));
      assertEquals(-1, tok.tokenToId("definitely not a token"));
      assertNull(tok.idToToken(1L << 40));

      // The chat template, with the assistant mask of its {% generation %} block.
      String chat = "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}]";
      try (Tokenizer.Chat c = tok.applyChatTemplateEncoded(chat, "{\"now\": 0}")) {
        assertTrue(c.text().contains("<|im_start|>assistant\nHello!"), c.text());
        assertEquals(c.text(), tok.applyChatTemplate(chat, "{\"now\": 0}"));
        long[] masks = c.encoding().assistantMasks(0);
        long ones = java.util.Arrays.stream(masks).sum();
        assertTrue(ones > 0 && ones < masks.length);
      }
      expectError(ErrorCode.INVALID_ARGUMENT, "no way",
          () -> tok.applyChatTemplate(chat, "{\"chat_template\": \"{{ raise_exception('no way') }}\"}"));

      // Train, save, load back: the same ids.
      List<String> corpus = List.of("the cat sat on the mat", "the dog sat on the log", "a cat and a dog");
      String dir = tmp.resolve("tok").toString();
      try (Tokenizer trained = Tokenizer.trainBpe(corpus, "{\"vocab_size\": 300, \"special_tokens\": "
               + "[\"<|end|>\", \"<|pad|>\"], \"eos_token\": \"<|end|>\", \"pad_token\": \"<|pad|>\"}")) {
        trained.savePretrained(dir);
        try (Tokenizer reloaded = Tokenizer.fromPretrained(dir);
             Encoding a = trained.encode(corpus.get(0), null);
             Encoding b = reloaded.encode(corpus.get(0), null)) {
          assertTrue(a.inputIds(0).length > 0);
          assertArrayEquals(a.inputIds(0), b.inputIds(0));
          reloaded.setSpecialToken("pad_token", "<|end|>");
        }
      }
      expectError(ErrorCode.INVALID_ARGUMENT, "<|missing|>",
          () -> Tokenizer.trainBpe(corpus, "{\"eos_token\": \"<|missing|>\"}"));

      // One tokenizer shared by data-loader threads: the same ids as on one.
      List<String> lines = new ArrayList<>();
      List<long[]> want = new ArrayList<>();
      for (int i = 0; i < 64; ++i) {
        lines.add("line " + i + ": the quick brown fox " + (i * 7919) + " jumps");
        try (Encoding e = tok.encode(lines.get(i), null)) {
          want.add(e.inputIds(0));
        }
      }
      ExecutorService pool = Executors.newFixedThreadPool(4);
      try {
        List<Future<List<long[]>>> results = new ArrayList<>();
        for (int w = 0; w < 4; ++w) {
          results.add(pool.submit(() -> {
            try (Encoding e = tok.encode(lines, null)) {
              List<long[]> rows = new ArrayList<>();
              for (int r = 0; r < e.rows(); ++r) rows.add(e.inputIds(r));
              return rows;
            }
          }));
        }
        for (Future<List<long[]>> f : results) {
          List<long[]> got = f.get(60, TimeUnit.SECONDS);
          assertEquals(want.size(), got.size());
          for (int r = 0; r < want.size(); ++r) assertArrayEquals(want.get(r), got.get(r));
        }
      } finally {
        pool.shutdownNow();
      }

      // Text generation: the streamed pieces make the text.
      long len = Long.parseLong(info.replaceAll(".*\"len\":(\\d+).*", "$1"));
      String config = "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": " + len + ", \"hidden_size\": 16, "
          + "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1}";
      try (Model model = Model.fromConfig(config)) {
        String opts = "{\"max_new_tokens\": 8, \"eos_token_id\": []}";
        StringBuilder pieces = new StringBuilder();
        String text = model.generateText(tok, "Hello", opts, piece -> {
          pieces.append(piece);
          return true;
        });
        assertEquals(pieces.toString(), text);
        assertEquals(text, model.generateText(tok, "Hello", opts));
        expectError(ErrorCode.INVALID_CONFIG, "stop_strings",
            () -> model.generateText(tok, "Hello", "{\"stop_strings\": 3}"));
        AccException e = expectError(ErrorCode.CALLBACK, "text listener",
            () -> model.generateText(tok, "Hello", opts, piece -> {
              throw new IllegalStateException("boom");
            }));
        assertTrue(e.getCause() instanceof IllegalStateException);
      }
    }
  }

  /** A committed input of tests/data/prep (the preprocessing fixtures). */
  static String prepFile(String name) {
    return Path.of("..", "..", "tests", "data", "prep", name).toAbsolutePath().normalize().toString();
  }

  /**
   * A batch as every binding prints it: per tensor in order "name [shape] sum weighted", the weighted sum
   * the sum of (k+1) * v over the flat data (so that a value moved within the tensor changes it).
   */
  static String fingerprint(Batch b) {
    List<String> parts = new ArrayList<>();
    for (String name : b.names()) {
      try (Tensor t = b.get(name)) {
        long[] v = t.toLongs();
        long sum = 0, weighted = 0;
        for (int k = 0; k < v.length; ++k) {
          sum += v[k];
          weighted += (k + 1L) * v[k];
        }
        List<String> dims = new ArrayList<>();
        for (long d : t.shape()) dims.add(Long.toString(d));
        parts.add(name + " [" + String.join(", ", dims) + "] " + sum + " " + weighted);
      }
    }
    return String.join("; ", parts);
  }

  // scenario: data_files
  @Test
  void dataFiles() {
    String messages = prepFile("messages.jsonl"), text = prepFile("text.jsonl");
    try (Tokenizer tok = Tokenizer.fromPretrained(tinyTokenizer());
        Dataset sft = Dataset.fromFiles(messages, tok, "{\"assistant_only_loss\": true}")) {
      // TRL's SFT preparation and collator: the second batch of 4 as TRL makes it.
      assertEquals(12, sft.length());
      String line;
      try (Batch b = sft.getBatch(4, 5, 6, 7)) {
        line = fingerprint(b);
      }
      System.out.println("data_files sft: " + line);
      assertEquals(
          "input_ids [4, 87] 48299 8654156; labels [4, 87] -10996 -1702997; attention_mask [4, 87] 277 48359", line);
      // A loader over it makes the same batches.
      try (DataLoader dl = DataLoader.create(sft, "{\"batch_size\": 4}")) {
        dl.nextBatch().close();
        try (Batch b = dl.nextBatch()) {
          assertEquals(line, fingerprint(b));
        }
      }

      // tok(text) as datasets.map, batched by DataCollatorWithPadding on the left.
      try (Dataset tokenized = Dataset.fromFiles(text, tok,
               "{\"mode\": \"tokenize\", \"truncation\": true, \"max_length\": 24, \"collator\": \"with_padding\", "
                   + "\"padding_side\": \"left\", \"pad_to_multiple_of\": 8}");
          Batch b = tokenized.getBatch(4, 5, 6, 7)) {
        line = fingerprint(b);
      }
      System.out.println("data_files tokenize: " + line);
      assertEquals("input_ids [4, 24] 17339 814223; attention_mask [4, 24] 93 4556", line);

      // Bad input, named.
      AccException e = expectError(ErrorCode.INVALID_ARGUMENT, "'body'",
          () -> Dataset.fromFiles(text, tok, "{\"columns\": [\"body\"]}"));
      assertTrue(e.getMessage().contains("text"), () -> "the columns there are: " + e.getMessage());
      expectError(ErrorCode.INVALID_ARGUMENT, "'body'",
          () -> Dataset.fromFiles(text, tok, "{\"mode\": \"tokenize\", \"text_column\": \"body\"}"));
      expectError(ErrorCode.INVALID_CONFIG, "block_sise", () -> Dataset.fromFiles(text, tok, "{\"block_sise\": 8}"));
      expectError(ErrorCode.IO, "/nonexistent/rows.jsonl", () -> Dataset.fromFiles("/nonexistent/rows.jsonl", tok, null));
      expectError(ErrorCode.INVALID_ARGUMENT, "files", () -> Dataset.fromFiles(null, tok, null));
      expectError(ErrorCode.INVALID_ARGUMENT, "tok", () -> Dataset.fromFiles(text, null, null));
      expectError(ErrorCode.INVALID_ARGUMENT, "12", () -> sft.getBatch(12));
      expectError(ErrorCode.INVALID_ARGUMENT, "count", () -> sft.getBatch());
      // A function dataset's failure comes back through getBatch with its exception as the cause.
      try (Dataset fds = Dataset.fromBatchFunction(2, i -> {
             throw new IllegalStateException("no sample " + i);
           })) {
        AccException f = expectError(ErrorCode.CALLBACK, "", () -> fds.getBatch(1));
        assertTrue(f.getCause() != null && f.getCause().getMessage().contains("no sample 1"), () -> "cause of " + f);
      }

      // From the accelerator's data settings.
      String config = "{\"data\": {\"files\": \"" + text + "\", \"mode\": \"group_texts\", \"block_size\": 16}}";
      try (Accelerator acc = Accelerator.create(config);
          Dataset grouped = Dataset.fromConfig(acc, tok);
          Batch b = grouped.getBatch(1);
          Tensor labels = b.get("labels")) {
        assertArrayEquals(new long[] {1, 16}, labels.shape());
      }
      try (Accelerator bad = Accelerator.create("{\"data\": {\"mode\": \"tokenize\"}}")) {
        expectError(ErrorCode.INVALID_CONFIG, "'data.files'", () -> Dataset.fromConfig(bad, tok));
      }
    }
  }
}
