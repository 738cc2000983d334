//! examples/c/finetune_llama.c in Rust, with a real tokenizer: a byte-level BPE (the `tokenizers`
//! crate, GPT-2's scheme) is trained at run time on the demo's text (the license texts of
//! /usr/share/common-licenses; nothing is downloaded), then a tiny Llama (transformers'
//! LlamaForCausalLM, from a config whose vocab_size is the tokenizer's) is fine-tuned on that text in any
//! number of processes, saved in Hugging Face format (save_pretrained: transformers loads it, and the
//! tokenizer lies beside it as tokenizer.json), and asked to continue a prompt, the text streamed as the
//! tokens come.
//!
//! ```text
//! cargo build   (in examples/rust)
//! acc launch --num_processes 2 target/debug/finetune_llama [--steps N] [--batch B] [--out DIR]
//!     [--text-dir DIR] [--prompt TEXT] [--new-tokens N] [--lora]
//! ```
//! --batch is per process (Accelerate's batch_size): N processes with batch B train as one with N x B.
//! --lora fine-tunes a LoRA adapter instead (peft's get_peft_model: r 8, lora_alpha 16 on every linear
//! layer; the base stays frozen): the base model is saved to OUT/model first, the trained adapter to
//! OUT/adapter (peft's files), and the continuation comes from a fresh copy of the base with the adapter
//! loaded (`Model::load_adapter`).
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use acc::{Accelerator, DataLoader, Dataset, Model, Optimizer, ReduceOp, Tensor};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

type Error = Box<dyn std::error::Error + Send + Sync>;

const BLOCK: usize = 64;
const VOCAB: usize = 512;
/// Separates the files in the token stream; the model's bos/eos token.
const EOS: &str = "<|endoftext|>";
/// peft's LoraConfig for --lora.
const LORA: &str = r#"{"r": 8, "lora_alpha": 16, "target_modules": "all-linear"}"#;

struct Args {
    steps: usize,
    batch: usize,
    out: String,
    text_dir: String,
    prompt: String,
    new_tokens: usize,
    lora: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        steps: 300,
        batch: 8,
        out: "out/llama-rust".into(),
        text_dir: "/usr/share/common-licenses".into(),
        prompt: "This program is free software".into(),
        new_tokens: 120,
        lora: false,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        if flag == "--lora" {
            a.lora = true;
            continue;
        }
        let value = argv.next().unwrap_or_else(|| usage());
        let number = || value.parse().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--steps" => a.steps = number(),
            "--batch" => a.batch = number(),
            "--new-tokens" => a.new_tokens = number(),
            "--out" => a.out = value,
            "--text-dir" => a.text_dir = value,
            "--prompt" => a.prompt = value,
            _ => usage(),
        }
    }
    a
}

fn usage() -> ! {
    eprintln!(
        "usage: finetune_llama [--steps N] [--batch B] [--out DIR] [--text-dir DIR] [--prompt TEXT] [--new-tokens N] \
         [--lora]"
    );
    std::process::exit(2)
}

/// The regular files of `dir`, sorted by name, as text.
fn read_corpus(dir: &str) -> Result<Vec<String>, Error> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot open text directory {dir}: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    paths.sort();
    Ok(paths
        .iter()
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned())
        .collect())
}

/// A byte-level BPE trained on `texts`: every byte is in the alphabet (any text encodes), merges up to
/// VOCAB entries, and EOS as a special token (id 0).
fn train_tokenizer(texts: &[String]) -> Result<Tokenizer, Error> {
    let mut tokenizer = Tokenizer::new(BPE::default());
    let byte_level = ByteLevel::default().add_prefix_space(false);
    tokenizer.with_pre_tokenizer(Some(byte_level));
    tokenizer.with_decoder(Some(byte_level));
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(VOCAB)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect::<HashSet<char>>())
        .special_tokens(vec![AddedToken::from(EOS, true)])
        .build()
        .into();
    tokenizer.train(&mut trainer, texts.iter())?;
    Ok(tokenizer)
}

/// transformers' LlamaConfig, small: the tokenizer's vocabulary, grouped-query attention.
fn llama_config(vocab_size: usize, eos: u32) -> String {
    format!(
        r#"{{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": {vocab_size},
            "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0, "hidden_act": "silu", "initializer_range": 0.02,
            "tie_word_embeddings": false, "bos_token_id": {eos}, "eos_token_id": {eos}, "dtype": "float32"}}"#
    )
}

fn run(args: &Args) -> Result<(), Error> {
    let accel = Accelerator::new(r#"{"seed": 42}"#)?;
    let world = accel.num_processes()?;
    let is_main = accel.is_main_process()?;

    // The main process trains the tokenizer and writes it with the token file (uint16 ids, the files
    // separated by EOS); the others wait, then read both.
    let out = Path::new(&args.out);
    let (tokenizer_path, tokens_path) = (out.join("tokenizer.json"), out.join("train.bin"));
    if is_main {
        std::fs::create_dir_all(out)?;
        let texts = read_corpus(&args.text_dir)?;
        let tokenizer = train_tokenizer(&texts)?;
        let eos = tokenizer.token_to_id(EOS).expect("EOS is a special token");
        let mut bytes = Vec::new();
        for text in &texts {
            for &id in tokenizer.encode(text.as_str(), false)?.get_ids().iter().chain([&eos]) {
                bytes.extend_from_slice(&(id as u16).to_le_bytes());
            }
        }
        std::fs::write(&tokens_path, &bytes)?;
        tokenizer.save(&tokenizer_path, false)?;
        println!(
            "byte-level BPE: {} tokens, {} text bytes -> {} tokens",
            tokenizer.get_vocab_size(true),
            texts.iter().map(String::len).sum::<usize>(),
            bytes.len() / 2
        );
    }
    accel.wait_for_everyone()?;
    let tokenizer = Tokenizer::from_file(&tokenizer_path)?;
    let eos = tokenizer.token_to_id(EOS).expect("EOS is a special token");

    let ds = Dataset::from_token_file(
        tokens_path.to_str().unwrap(),
        &format!(r#"{{"block_size": {BLOCK}, "dtype": "uint16"}}"#),
    )?;
    let dl = DataLoader::new(
        &ds,
        &format!(
            r#"{{"batch_size": {}, "shuffle": true, "seed": 42, "drop_last": true}}"#,
            args.batch
        ),
    )?;
    let model = Model::from_config(&llama_config(tokenizer.get_vocab_size(true), eos), None)?;
    model.set_training(true)?;
    let model_dir = out.join("model");
    let adapter_dir = out.join("adapter");
    let n_params = model.num_parameters()?;
    if args.lora {
        // The base the adapter trains on (frozen from here on), saved for loading the adapter onto it below.
        if is_main {
            model.save_pretrained(model_dir.to_str().unwrap(), None)?;
            tokenizer.save(model_dir.join("tokenizer.json"), false)?;
        }
        model.add_lora(LORA)?;
    }
    let n_all = model.num_parameters()?;
    let opt = Optimizer::new(&model, r#"{"type": "adamw", "lr": 0.003, "weight_decay": 0.01}"#)?;
    accel.prepare(Some(&model), Some(&opt), None, Some(&dl))?;
    if is_main {
        println!(
            "LlamaForCausalLM, {n_params} parameters; batch {} x {world} processes x {BLOCK} tokens; {} steps",
            args.batch, args.steps
        );
        if args.lora {
            // as peft's print_trainable_parameters
            let trainable = n_all - n_params;
            let percent = 100.0 * trainable as f64 / n_all as f64;
            println!("LoRA {LORA}: trainable params: {trainable} || all params: {n_all} || trainable%: {percent:.4}");
        }
    }

    let mut step = 1;
    while step <= args.steps {
        let Some(batch) = dl.next()? else { continue }; // a new epoch
                                                        // transformers' labels are the inputs themselves: the model shifts them.
        let loss = model.loss(&batch.input, Some(&batch.input))?;
        accel.backward(&loss)?;
        accel.clip_grad_norm(&model, 1.0, 2.0)?;
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

    // Hugging Face format (config.json and model.safetensors; with --lora peft's adapter files): the main
    // process writes, the others wait.
    if args.lora {
        model.save_adapter(adapter_dir.to_str().unwrap())?;
    } else {
        model.save_pretrained(model_dir.to_str().unwrap(), None)?;
    }
    if is_main {
        let loaded;
        let generator = if args.lora {
            println!(
                "saved the adapter to {} (peft: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({:?}), {:?}))",
                adapter_dir.display(),
                model_dir.display(),
                adapter_dir.display()
            );
            // As a user of the adapter would: a fresh copy of the base, the adapter loaded onto it.
            loaded = Model::from_pretrained(model_dir.to_str().unwrap(), None)?;
            loaded.load_adapter(adapter_dir.to_str().unwrap(), None)?;
            println!("loaded {} onto {}", adapter_dir.display(), model_dir.display());
            &loaded
        } else {
            tokenizer.save(model_dir.join("tokenizer.json"), false)?;
            println!("saved to {} (with tokenizer.json)", model_dir.display());
            &model
        };
        generator.set_training(false)?;
        let prompt: Vec<i64> = tokenizer
            .encode(args.prompt.as_str(), false)?
            .get_ids()
            .iter()
            .map(|&i| i as i64)
            .collect();
        let input = Tensor::from_slice(&prompt, &[1, prompt.len() as i64])?;
        let options = format!(
            r#"{{"max_new_tokens": {}, "do_sample": true, "temperature": 0.8, "top_k": 40, "seed": 0}}"#,
            args.new_tokens
        );
        // Streaming: the decoder sees the prompt first, then prints only the text each new token adds
        // (None while a character's bytes are incomplete).
        let mut stream = tokenizer.decode_stream(true);
        for &id in &prompt {
            stream.step(id as u32)?;
        }
        print!("--- {}", args.prompt);
        generator.generate(
            &input,
            None,
            Some(&options),
            Some(&mut |tokens: &[i64]| {
                if let Ok(Some(text)) = stream.step(tokens[0] as u32) {
                    print!("{text}");
                    std::io::stdout().flush().ok();
                }
                true
            }),
        )?;
        println!("\n---");
    }
    accel.wait_for_everyone()?;
    Ok(())
}

fn main() {
    let args = parse_args();
    if let Err(e) = run(&args) {
        eprintln!("finetune_llama: {e}");
        std::process::exit(1);
    }
}
