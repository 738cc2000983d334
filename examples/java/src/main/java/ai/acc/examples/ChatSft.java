package ai.acc.examples;

import ai.acc.Accelerator;
import ai.acc.Batch;
import ai.acc.DataLoader;
import ai.acc.Dataset;
import ai.acc.Model;
import ai.acc.Optimizer;
import ai.acc.ReduceOp;
import ai.acc.Tensor;
import ai.acc.Tokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * examples/c/chat_sft.c in Java: chat fine-tuning with no Python anywhere. A JSONL file of conversations
 * in TRL's conversational format (examples/data/chat_sft.jsonl, {@code {"messages": [...]}} a line)
 * becomes a byte-level BPE tokenizer trained on it ({@link Tokenizer#trainBpe}: tokenizers' BpeTrainer, a
 * from-scratch model's first step) with Qwen2's ChatML chat template; the file becomes a dataset as TRL's
 * SFTTrainer prepares one ({@link Dataset#fromFiles}, mode "sft"): every conversation rendered by that
 * template and tokenized, truncated to 64 tokens, with the loss on the assistant's tokens only (the
 * template's {@code {% generation %}} blocks: assistant_only_loss), batched by TRL's collator; a small
 * Llama built from a config is fine-tuned with LoRA (peft's: r 16 on every linear layer, the embeddings
 * and head trained whole since the base is fresh) in any number of processes; then it answers a question
 * as text, each piece handed to a {@link Model.TextListener} as transformers' TextStreamer prints it. It
 * prints what the C program prints.
 *
 * <pre>
 * acc launch --num_processes 2 java -cp acc-1.4.0.jar:classes ai.acc.examples.ChatSft
 *     [--data FILE] [--steps N] [--batch B] [--out DIR] [--prompt TEXT]
 * </pre>
 *
 * OUT/tokenizer holds the tokenizer (transformers' AutoTokenizer loads it), OUT/adapter the adapter.
 */
public final class ChatSft {
  static final int MAX_LEN = 64;

  /**
   * Qwen2-Instruct's ChatML template, with {@code {% generation %}} around what the assistant says (what
   * TRL asks of a template for assistant-only loss).
   */
  static final String TEMPLATE =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      + "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
      + "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}{% generation %}"
      + "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
      + "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
      + "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

  /** peft's LoraConfig. */
  static final String LORA = "{\"r\": 16, \"lora_alpha\": 32, \"target_modules\": \"all-linear\", "
      + "\"modules_to_save\": [\"embed_tokens\", \"lm_head\"]}";

  /** {@code s} as a JSON string, quoted. */
  static String json(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        default -> {
          if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
          else b.append(c);
        }
      }
    }
    return b.append('"').toString();
  }

  public static void main(String[] args) throws IOException {
    String data = "examples/data/chat_sft.jsonl", out = "out/chat_sft", prompt = "What is the capital of Japan?";
    int steps = 300, batch = 16;
    for (int i = 0; i < args.length; ++i) {
      String flag = args[i];
      String value = i + 1 < args.length ? args[++i] : null;
      switch (value == null ? "" : flag) { // a flag without its value: usage
        case "--data" -> data = value;
        case "--out" -> out = value;
        case "--prompt" -> prompt = value;
        case "--steps" -> steps = Integer.parseInt(value);
        case "--batch" -> batch = Integer.parseInt(value);
        default -> {
          System.err.println("usage: ChatSft [--data FILE] [--steps N] [--batch B] [--out DIR] [--prompt TEXT]");
          System.exit(2);
        }
      }
    }

    try (Accelerator acc = Accelerator.create("{\"seed\": 42}")) {
      boolean isMain = acc.isMainProcess();
      List<String> conversations =
          Files.readAllLines(Path.of(data)).stream().map(String::stripTrailing).filter(l -> !l.isEmpty()).toList();

      // The tokenizer: trained by the main process on the conversations, saved, loaded by every process.
      String tokDir = Path.of(out, "tokenizer").toString(), adapterDir = Path.of(out, "adapter").toString();
      if (isMain) {
        Files.createDirectories(Path.of(out));
        String options = "{\"vocab_size\": 600, \"special_tokens\": [\"<|endoftext|>\", \"<|im_start|>\", "
            + "\"<|im_end|>\"], \"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\", "
            + "\"model_max_length\": " + MAX_LEN + ", \"chat_template\": " + json(TEMPLATE) + "}";
        try (Tokenizer trained = Tokenizer.trainBpe(conversations, options)) {
          trained.savePretrained(tokDir);
        }
      }
      acc.waitForEveryone();

      // The dataset: TRL's SFT preparation of the file's "messages" rows, by the tokenizer's own template
      // (saved with it): each conversation rendered and tokenized, truncated to MAX_LEN tokens, labels -100
      // outside the assistant's tokens; each batch TRL's collator's, padded to its longest row (labels -100
      // on the padding).
      try (Tokenizer tok = Tokenizer.fromPretrained(tokDir);
          Dataset ds = Dataset.fromFiles(data, tok,
              "{\"mode\": \"sft\", \"assistant_only_loss\": true, \"max_length\": " + MAX_LEN + "}");
          DataLoader dl = DataLoader.create(ds,
              "{\"batch_size\": " + batch + ", \"shuffle\": true, \"seed\": 42, \"drop_last\": true}")) {
        long supervised = supervised(tok, ds, isMain);
        // A small Llama sized to the tokenizer, with a LoRA adapter.
        Matcher len = Pattern.compile("\"len\":\\s*(\\d+)").matcher(tok.info());
        long vocab = len.find() ? Long.parseLong(len.group(1)) : 0;
        long eos = tok.tokenToId("<|im_end|>"), pad = tok.tokenToId("<|endoftext|>");
        String config = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": "
            + vocab + ", \"hidden_size\": 64, \"intermediate_size\": 172, \"num_hidden_layers\": 2,"
            + " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"max_position_embeddings\": 128,"
            + " \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false, \"eos_token_id\": " + eos
            + ", \"pad_token_id\": " + pad + ", \"dtype\": \"float32\"}";
        try (Model model = Model.fromConfig(config, null)) {
          model.addLora(LORA);
          model.setTraining(true);
          try (Optimizer opt = Optimizer.create(model, "{\"type\": \"adamw\", \"lr\": 0.005, \"weight_decay\": 0.0}")) {
            acc.prepare(model, opt, null, dl);
            if (isMain) {
              System.out.printf("%d conversations, %d assistant tokens to learn; vocabulary %d; LoRA %s; %d steps%n",
                  ds.length(), supervised, vocab, LORA, steps);
            }
            train(acc, model, opt, dl, steps);
          }
          model.saveAdapter(adapterDir);

          // The question, rendered by the template with the assistant's header, answered as text.
          if (isMain) {
            model.setTraining(false);
            String messages = "[{\"role\": \"user\", \"content\": " + json(prompt) + "}]";
            String rendered = tok.applyChatTemplate(messages, "{\"add_generation_prompt\": true}");
            System.out.print("user: " + prompt + "\nassistant: ");
            model.generateText(tok, rendered,
                "{\"max_new_tokens\": 24, \"add_special_tokens\": false, \"skip_special_tokens\": true}", piece -> {
                  System.out.print(piece);
                  System.out.flush();
                  return true;
                });
            System.out.printf("%nsaved the tokenizer to %s and the adapter to %s%n", tokDir, adapterDir);
          }
        }
      }
    }
  }

  /**
   * Each row of the dataset as the collator gives it: conversation 0's ids decoded (the template's text)
   * and printed by the main process, and the labels the loss learns counted.
   */
  static long supervised(Tokenizer tok, Dataset ds, boolean isMain) {
    long supervised = 0;
    for (long i = 0, n = ds.length(); i < n; ++i) {
      try (Batch row = ds.getBatch(i);
          Tensor ids = row.get("input_ids");
          Tensor labels = row.get("labels")) {
        for (long label : labels.toLongs()) if (label != -100) ++supervised;
        if (i == 0 && isMain) {
          System.out.printf("conversation 0 as the template renders it:%n%s%n", tok.decode(ids.toLongs(), null));
        }
      }
    }
    return supervised;
  }

  /** The training loop: loss lines at step 1, every 50 and the last. */
  static void train(Accelerator acc, Model model, Optimizer opt, DataLoader dl, int steps) {
    boolean isMain = acc.isMainProcess();
    for (int step = 1; step <= steps; ) {
      try (Batch b = dl.nextBatch()) {
        if (b == null) continue; // a new epoch
        try (Batch outputs = model.forwardBatch(b);
            Tensor loss = outputs.get("loss")) {
          acc.backward(loss);
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
}
