//! examples/c/chat_sft.c in Rust: chat fine-tuning with no Python anywhere. A JSONL file of
//! conversations in TRL's conversational format (examples/data/chat_sft.jsonl, `{"messages": [...]}` a
//! line) becomes a byte-level BPE tokenizer trained on it (`acc::Tokenizer::train_bpe`: tokenizers'
//! BpeTrainer, a from-scratch model's first step) with Qwen2's ChatML chat template; the file becomes a
//! dataset as TRL's SFTTrainer prepares one (`Dataset::from_files`, mode "sft"): every conversation
//! rendered by that template and tokenized, truncated to 64 tokens, with the loss on the assistant's
//! tokens only (the template's `{% generation %}` blocks: assistant_only_loss), batched by TRL's
//! collator; a small Llama built from a config is fine-tuned with LoRA (peft's: r 16 on every linear
//! layer, the embeddings and head trained whole since the base is fresh) in any number of processes;
//! then it answers a question as text, the pieces coming from an iterator as transformers'
//! TextStreamer prints them (`Model::generate_text_stream`).
//! It prints what the C program prints.
//!
//! ```text
//! cargo build   (in examples/rust)
//! acc launch --num_processes 2 target/debug/chat_sft [--data FILE] [--steps N] [--batch B] [--out DIR]
//!     [--prompt TEXT]
//! ```
//! OUT/tokenizer holds the tokenizer (transformers' AutoTokenizer loads it), OUT/adapter the adapter.
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use acc::{Accelerator, DataLoader, Dataset, Model, Optimizer, ReduceOp, Tokenizer};
use serde_json::json;

type Error = Box<dyn std::error::Error + Send + Sync>;

const MAX_LEN: usize = 64;

/// Qwen2-Instruct's ChatML template, with `{% generation %}` around what the assistant says (what TRL
/// asks of a template for assistant-only loss).
const TEMPLATE: &str = concat!(
    r"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}",
    r"{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}",
    r"{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}",
    r"{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}",
    r"{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}",
    r"{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
);

/// peft's LoraConfig.
const LORA: &str =
    r#"{"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "modules_to_save": ["embed_tokens", "lm_head"]}"#;

struct Args {
    data: String,
    out: String,
    prompt: String,
    steps: usize,
    batch: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        data: "examples/data/chat_sft.jsonl".into(),
        out: "out/chat_sft".into(),
        prompt: "What is the capital of Japan?".into(),
        steps: 300,
        batch: 16,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv.next().unwrap_or_else(|| usage());
        let number = || value.parse().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--steps" => a.steps = number(),
            "--batch" => a.batch = number(),
            "--data" => a.data = value,
            "--out" => a.out = value,
            "--prompt" => a.prompt = value,
            _ => usage(),
        }
    }
    a
}

fn usage() -> ! {
    eprintln!("usage: chat_sft [--data FILE] [--steps N] [--batch B] [--out DIR] [--prompt TEXT]");
    std::process::exit(2)
}

/// transformers' LlamaConfig, small: the tokenizer's vocabulary, grouped-query attention.
fn llama_config(vocab_size: i64, eos: i64, pad: i64) -> String {
    json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab_size,
        "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-05,
        "tie_word_embeddings": false, "eos_token_id": eos, "pad_token_id": pad, "dtype": "float32"
    })
    .to_string()
}

fn run(args: &Args) -> Result<(), Error> {
    let accel = Accelerator::new(r#"{"seed": 42}"#)?;
    let is_main = accel.is_main_process()?;
    let text = std::fs::read_to_string(&args.data).map_err(|e| format!("cannot open {}: {e}", args.data))?;
    let conversations: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect();

    // The tokenizer: trained by the main process on the conversations, saved, loaded by every process.
    let out = Path::new(&args.out);
    let (tok_dir, adapter_dir) = (out.join("tokenizer"), out.join("adapter"));
    let (tok_dir, adapter_dir) = (tok_dir.to_str().unwrap(), adapter_dir.to_str().unwrap());
    if is_main {
        std::fs::create_dir_all(out)?;
        let options = json!({
            "vocab_size": 600, "special_tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": MAX_LEN,
            "chat_template": TEMPLATE
        });
        Tokenizer::train_bpe(&conversations, Some(&options.to_string()))?.save_pretrained(tok_dir)?;
    }
    accel.wait_for_everyone()?;
    let tok = Arc::new(Tokenizer::from_pretrained(tok_dir)?);

    // The dataset: TRL's SFT preparation of the file's "messages" rows, by the tokenizer's own template
    // (saved with it): each conversation rendered and tokenized, truncated to MAX_LEN tokens, labels -100
    // outside the assistant's tokens; each batch TRL's collator's, padded to its longest row (labels -100
    // on the padding).
    let data_options = json!({"mode": "sft", "assistant_only_loss": true, "max_length": MAX_LEN}).to_string();
    let ds = Dataset::from_files(Some(&args.data), &tok, Some(&data_options))?;
    let n = ds.len()?;
    // Each row as the collator gives it: conversation 0's ids decoded (the template's text), and the
    // labels the loss learns counted.
    let mut supervised = 0;
    for i in 0..n {
        let row = ds.get_batch(&[i])?;
        let labels = row.get("labels")?.to_vec::<i64>()?;
        supervised += labels.iter().filter(|&&l| l != -100).count();
        if i == 0 && is_main {
            let rendered = tok.decode(&row.get("input_ids")?.to_vec::<i64>()?, None)?;
            println!("conversation 0 as the template renders it:\n{rendered}");
        }
    }
    let dl = DataLoader::new(
        &ds,
        &json!({"batch_size": args.batch, "shuffle": true, "seed": 42, "drop_last": true}).to_string(),
    )?;

    // A small Llama sized to the tokenizer, with a LoRA adapter.
    let info: serde_json::Value = serde_json::from_str(&tok.info()?)?;
    let vocab = info["len"].as_i64().ok_or("the tokenizer's info has no len")?;
    let eos = tok.token_to_id("<|im_end|>")?.ok_or("no <|im_end|> token")?;
    let pad = tok.token_to_id("<|endoftext|>")?.ok_or("no <|endoftext|> token")?;
    let model = Model::from_config(&llama_config(vocab, eos, pad), None)?;
    model.add_lora(LORA)?;
    model.set_training(true)?;
    let opt = Optimizer::new(&model, r#"{"type": "adamw", "lr": 0.005, "weight_decay": 0.0}"#)?;
    accel.prepare(Some(&model), Some(&opt), None, Some(&dl))?;
    if is_main {
        println!(
            "{n} conversations, {supervised} assistant tokens to learn; vocabulary {vocab}; LoRA {LORA}; {} steps",
            args.steps
        );
    }

    let mut step = 1;
    while step <= args.steps {
        let Some(batch) = dl.next_batch()? else { continue }; // a new epoch
        let loss = model.forward_batch(&batch)?.get("loss")?;
        accel.backward(&loss)?;
        opt.step()?;
        opt.zero_grad()?;
        if step % 50 == 0 || step == 1 || step == args.steps {
            let mean = accel.reduce(&loss, ReduceOp::Mean)?.item()?;
            if is_main {
                println!("step {step:4}/{}  loss {mean:.4}", args.steps);
            }
        }
        step += 1;
    }
    model.save_adapter(adapter_dir)?;

    // The question, rendered by the template with the assistant's header, answered as text: the pieces
    // arrive from an iterator while the model generates on a thread of its own.
    if is_main {
        model.set_training(false)?;
        let messages = json!([{"role": "user", "content": args.prompt}]).to_string();
        let rendered = tok.apply_chat_template(&messages, Some(r#"{"add_generation_prompt": true}"#))?;
        print!("user: {}\nassistant: ", args.prompt);
        let options = r#"{"max_new_tokens": 24, "add_special_tokens": false, "skip_special_tokens": true}"#;
        let mut stream = model.generate_text_stream(tok.clone(), &rendered, Some(options))?;
        for piece in &mut stream {
            print!("{piece}");
            std::io::stdout().flush()?;
        }
        let (_model, answer) = stream.finish();
        answer?;
        println!("\nsaved the tokenizer to {tok_dir} and the adapter to {adapter_dir}");
    }
    Ok(())
}

fn main() {
    let args = parse_args();
    if let Err(e) = run(&args) {
        eprintln!("chat_sft: {e}");
        std::process::exit(1);
    }
}
