package ai.acc.examples;

import ai.acc.Accelerator;
import ai.acc.DataLoader;
import ai.acc.Dataset;
import ai.acc.Model;
import ai.acc.Optimizer;
import ai.acc.ReduceOp;
import ai.acc.Tensor;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;

/**
 * examples/c/finetune_llama.c in Java: a tiny Llama (transformers' LlamaForCausalLM, built from a
 * config with {@link Model#fromConfig}) fine-tuned on the demo's text (the license texts of
 * /usr/share/common-licenses, one token a byte) in any number of processes, saved in Hugging Face
 * format ({@link Model#savePretrained}: transformers loads it), then asked to continue a prompt with
 * {@link Model#generate}, the bytes printed as they come.
 *
 * <pre>
 * acc launch --num_processes 2 java -cp acc-1.1.0.jar:classes ai.acc.examples.FinetuneLlama
 *     [--steps N] [--batch B] [--out DIR] [--text-dir DIR] [--prompt TEXT] [--new-tokens N]
 * </pre>
 *
 * --batch is per process (Accelerate's batch_size): N processes with batch B train as one with N x B.
 */
public final class FinetuneLlama {
  static final int BLOCK = 64;

  /** transformers' LlamaConfig, small: bytes as tokens (vocabulary 256), grouped-query attention. */
  static final String CONFIG = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","
      + " \"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": 172, \"num_hidden_layers\": 2,"
      + " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 128,"
      + " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\", \"initializer_range\": 0.02,"
      + " \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 0, \"dtype\": \"float32\"}";

  /** Writes the regular files of {@code dir} (sorted by name) as uint16 token ids, one a byte. */
  static void writeTokens(Path dir, Path path) throws IOException {
    ByteArrayOutputStream tokens = new ByteArrayOutputStream();
    try (Stream<Path> files = Files.list(dir)) {
      for (Path f : files.sorted().toList()) {
        if (!Files.isRegularFile(f) || f.getFileName().toString().startsWith(".")) continue;
        for (byte b : Files.readAllBytes(f)) {
          tokens.write(b); // little-endian uint16: the byte, then 0
          tokens.write(0);
        }
      }
    }
    Files.write(path, tokens.toByteArray());
  }

  public static void main(String[] args) throws IOException {
    int steps = 300, batch = 8, newTokens = 120;
    String out = "out/llama-java", textDir = "/usr/share/common-licenses";
    String prompt = "This program is free software";
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--steps" -> steps = Integer.parseInt(args[i + 1]);
        case "--batch" -> batch = Integer.parseInt(args[i + 1]);
        case "--out" -> out = args[i + 1];
        case "--text-dir" -> textDir = args[i + 1];
        case "--prompt" -> prompt = args[i + 1];
        case "--new-tokens" -> newTokens = Integer.parseInt(args[i + 1]);
        default -> {
          System.err.println("usage: FinetuneLlama [--steps N] [--batch B] [--out DIR] [--text-dir DIR]"
              + " [--prompt TEXT] [--new-tokens N]");
          System.exit(2);
        }
      }
    }

    try (Accelerator acc = Accelerator.create("{\"seed\": 42}")) {
      int world = acc.numProcesses();
      boolean isMain = acc.isMainProcess();
      // The main process writes the token file; the others wait, then map it.
      Path tokensPath = Path.of(out, "train.bin"), modelDir = Path.of(out, "model");
      if (isMain) {
        Files.createDirectories(Path.of(out));
        writeTokens(Path.of(textDir), tokensPath);
      }
      acc.waitForEveryone();

      try (Dataset ds = Dataset.fromTokenFile(tokensPath.toString(), "{\"block_size\": 64, \"dtype\": \"uint16\"}");
          DataLoader dl = DataLoader.create(ds,
              "{\"batch_size\": " + batch + ", \"shuffle\": true, \"seed\": 42, \"drop_last\": true}");
          Model model = Model.fromConfig(CONFIG, null);
          Optimizer opt = Optimizer.create(model, "{\"type\": \"adamw\", \"lr\": 0.003, \"weight_decay\": 0.01}")) {
        model.setTraining(true);
        acc.prepare(model, opt, null, dl);
        if (isMain) {
          System.out.printf("LlamaForCausalLM, %d parameters; batch %d x %d processes x %d tokens; %d steps%n",
              model.numParameters(), batch, world, BLOCK, steps);
        }

        for (int step = 1; step <= steps; ) {
          try (DataLoader.Batch b = dl.next()) {
            if (b == null) continue; // a new epoch
            // transformers' labels are the inputs themselves: the model shifts them.
            try (Tensor loss = model.loss(b.input(), b.input())) {
              acc.backward(loss);
              acc.clipGradNorm(model, 1.0, 2.0);
              opt.step();
              opt.zeroGrad();
              if (step % 50 == 0 || step == 1 || step == steps) {
                try (Tensor mean = acc.reduce(loss, ReduceOp.MEAN)) {
                  double l = mean.item();
                  if (isMain) System.out.printf("step %4d/%d  loss %.4f%n", step, steps, l);
                }
              }
            }
          }
          ++step;
        }

        // Hugging Face format (config.json and model.safetensors): the main process writes, the others wait.
        model.savePretrained(modelDir.toString(), null);
        if (isMain) {
          System.out.printf("saved to %s (transformers: AutoModelForCausalLM.from_pretrained(\"%s\"))%n",
              modelDir, modelDir);
          model.setTraining(false);
          byte[] bytes = prompt.getBytes(StandardCharsets.UTF_8);
          long[] ids = new long[bytes.length];
          for (int i = 0; i < bytes.length; ++i) ids[i] = bytes[i] & 0xff;
          String options = "{\"max_new_tokens\": " + newTokens
              + ", \"do_sample\": true, \"temperature\": 0.8, \"top_k\": 40, \"seed\": 0}";
          System.out.print("--- " + prompt);
          try (Tensor input = Tensor.fromLongs(ids, 1, ids.length)) {
            model.generate(input, null, options, tokens -> {
              long c = tokens[0];
              System.out.print(c == '\n' || (c >= 32 && c < 127) ? (char) c : '?');
              System.out.flush();
              return true;
            }).close();
          }
          System.out.println("\n---");
        }
        acc.waitForEveryone();
      }
    }
  }
}
