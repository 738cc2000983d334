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
 *     [--steps N] [--batch B] [--out DIR] [--text-dir DIR] [--prompt TEXT] [--new-tokens N] [--lora]
 * </pre>
 *
 * --batch is per process (Accelerate's batch_size): N processes with batch B train as one with N x B.
 * --lora fine-tunes a LoRA adapter instead (peft's get_peft_model: r 8, lora_alpha 16 on every linear
 * layer; the base stays frozen): the base model is saved to OUT/model first, the trained adapter to
 * OUT/adapter (peft's files), and the continuation comes from a fresh copy of the base with the adapter
 * loaded ({@link Model#loadAdapter}).
 */
public final class FinetuneLlama {
  static final int BLOCK = 64;

  /** transformers' LlamaConfig, small: bytes as tokens (vocabulary 256), grouped-query attention. */
  static final String CONFIG = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","
      + " \"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": 172, \"num_hidden_layers\": 2,"
      + " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 128,"
      + " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\", \"initializer_range\": 0.02,"
      + " \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 0, \"dtype\": \"float32\"}";

  /** peft's LoraConfig for --lora. */
  static final String LORA = "{\"r\": 8, \"lora_alpha\": 16, \"target_modules\": \"all-linear\"}";

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
    boolean lora = false;
    for (int i = 0; i < args.length; ++i) {
      String flag = args[i];
      if (flag.equals("--lora")) {
        lora = true;
        continue;
      }
      String value = i + 1 < args.length ? args[++i] : null;
      switch (value == null ? "" : flag) { // a flag without its value: usage
        case "--steps" -> steps = Integer.parseInt(value);
        case "--batch" -> batch = Integer.parseInt(value);
        case "--out" -> out = value;
        case "--text-dir" -> textDir = value;
        case "--prompt" -> prompt = value;
        case "--new-tokens" -> newTokens = Integer.parseInt(value);
        default -> {
          System.err.println("usage: FinetuneLlama [--steps N] [--batch B] [--out DIR] [--text-dir DIR]"
              + " [--prompt TEXT] [--new-tokens N] [--lora]");
          System.exit(2);
        }
      }
    }

    try (Accelerator acc = Accelerator.create("{\"seed\": 42}")) {
      int world = acc.numProcesses();
      boolean isMain = acc.isMainProcess();
      // The main process writes the token file; the others wait, then map it.
      Path tokensPath = Path.of(out, "train.bin"), modelDir = Path.of(out, "model");
      Path adapterDir = Path.of(out, "adapter");
      if (isMain) {
        Files.createDirectories(Path.of(out));
        writeTokens(Path.of(textDir), tokensPath);
      }
      acc.waitForEveryone();

      try (Dataset ds = Dataset.fromTokenFile(tokensPath.toString(), "{\"block_size\": 64, \"dtype\": \"uint16\"}");
          DataLoader dl = DataLoader.create(ds,
              "{\"batch_size\": " + batch + ", \"shuffle\": true, \"seed\": 42, \"drop_last\": true}");
          Model model = Model.fromConfig(CONFIG, null)) {
        model.setTraining(true);
        long nParams = model.numParameters();
        if (lora) {
          // The base the adapter trains on (frozen from here on), saved for loading the adapter onto it below.
          if (isMain) model.savePretrained(modelDir.toString(), null);
          model.addLora(LORA);
        }
        long nAll = model.numParameters();
        try (Optimizer opt = Optimizer.create(model, "{\"type\": \"adamw\", \"lr\": 0.003, \"weight_decay\": 0.01}")) {
          train(acc, model, opt, dl, steps, batch, world, nParams, nAll, lora);
        }

        // Hugging Face format (config.json and model.safetensors; with --lora peft's adapter files): the main
        // process writes, the others wait.
        if (lora) {
          model.saveAdapter(adapterDir.toString());
        } else {
          model.savePretrained(modelDir.toString(), null);
        }
        if (isMain) {
          if (lora) {
            System.out.printf("saved the adapter to %s (peft: PeftModel.from_pretrained("
                + "AutoModelForCausalLM.from_pretrained(\"%s\"), \"%s\"))%n", adapterDir, modelDir, adapterDir);
            // As a user of the adapter would: a fresh copy of the base, the adapter loaded onto it.
            try (Model generator = Model.fromPretrained(modelDir.toString())) {
              generator.loadAdapter(adapterDir.toString(), null);
              System.out.printf("loaded %s onto %s%n", adapterDir, modelDir);
              generate(generator, prompt, newTokens);
            }
          } else {
            System.out.printf("saved to %s (transformers: AutoModelForCausalLM.from_pretrained(\"%s\"))%n",
                modelDir, modelDir);
            generate(model, prompt, newTokens);
          }
        }
        acc.waitForEveryone();
      }
    }
  }

  /** The training loop: loss lines at step 1, every 50 and the last. */
  static void train(Accelerator acc, Model model, Optimizer opt, DataLoader dl, int steps, int batch, int world,
      long nParams, long nAll, boolean lora) {
    acc.prepare(model, opt, null, dl);
    boolean isMain = acc.isMainProcess();
    if (isMain) {
      System.out.printf("LlamaForCausalLM, %d parameters; batch %d x %d processes x %d tokens; %d steps%n",
          nParams, batch, world, BLOCK, steps);
      if (lora) { // as peft's print_trainable_parameters
        System.out.printf("LoRA %s: trainable params: %d || all params: %d || trainable%%: %.4f%n", LORA,
            nAll - nParams, nAll, 100.0 * (nAll - nParams) / nAll);
      }
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
  }

  /** Continues the prompt (sampled), printing the bytes as they come. */
  static void generate(Model model, String prompt, int newTokens) {
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
}
