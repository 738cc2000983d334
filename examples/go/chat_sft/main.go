// Command chat_sft is examples/c/chat_sft.c in Go: chat fine-tuning with no Python anywhere. A JSONL
// file of conversations in TRL's conversational format (examples/data/chat_sft.jsonl, {"messages": [...]}
// a line) becomes a byte-level BPE tokenizer trained on it (acc.TrainBPE: tokenizers' BpeTrainer, a
// from-scratch model's first step) with Qwen2's ChatML chat template; the file becomes a dataset as TRL's
// SFTTrainer prepares one (acc.DatasetFromFiles, mode "sft"): every conversation rendered by that
// template and tokenized, truncated to 64 tokens, with the loss on the assistant's tokens only (the
// template's {% generation %} blocks: assistant_only_loss), batched by TRL's collator; a small Llama
// built from a config is fine-tuned with LoRA (peft's: r 16 on every linear layer, the embeddings and
// head trained whole since the base is fresh) in any number of processes; then it answers a question as
// text, the pieces arriving on a channel (Model.StreamText) as transformers' TextStreamer prints them.
// It prints what the C program prints.
//
//	go build -o chat_sft ./chat_sft   (in examples/go)
//	acc launch --num_processes 2 chat_sft [--data FILE] [--steps N] [--batch B] [--out DIR] [--prompt TEXT]
//
// OUT/tokenizer holds the tokenizer (transformers' AutoTokenizer loads it), OUT/adapter the adapter.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/libacc/libacc/bindings/go/acc"
)

const maxLen = 64

// chatTemplate is Qwen2-Instruct's ChatML template, with {% generation %} around what the assistant
// says (what TRL asks of a template for assistant-only loss).
const chatTemplate = `{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}` +
	`{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}` +
	`{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}` +
	`{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}` +
	`{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}` +
	`{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// loraConfig is peft's LoraConfig.
const loraConfig = `{"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "modules_to_save": ["embed_tokens", "lm_head"]}`

// must returns v, or ends the program with err.
func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		log.Fatal("chat_sft: ", err)
	}
}

// readLines returns the non-empty lines of path.
func readLines(path string) []string {
	f := must(os.Open(path))
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if line := strings.TrimRight(sc.Text(), "\r"); line != "" {
			lines = append(lines, line)
		}
	}
	check(sc.Err())
	return lines
}

func main() {
	data := flag.String("data", "examples/data/chat_sft.jsonl", "JSONL file of conversations ({\"messages\": [...]} a line)")
	out := flag.String("out", "out/chat_sft", "output directory (tokenizer/, adapter/)")
	steps := flag.Int("steps", 300, "optimizer steps")
	batch := flag.Int("batch", 16, "conversations per process and step")
	prompt := flag.String("prompt", "What is the capital of Japan?", "question to answer")
	flag.Parse()
	log.SetFlags(0)

	a := must(acc.NewAccelerator(`{"seed": 42}`))
	defer a.Close()
	isMain := must(a.IsMainProcess())
	conversations := readLines(*data)

	// The tokenizer: trained by the main process on the conversations, saved, loaded by every process.
	tokDir, adapterDir := filepath.Join(*out, "tokenizer"), filepath.Join(*out, "adapter")
	if isMain {
		check(os.MkdirAll(*out, 0o755))
		trained := must(acc.TrainBPE(conversations, map[string]any{
			"vocab_size": 600, "special_tokens": []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
			"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": maxLen,
			"chat_template": chatTemplate,
		}))
		check(trained.SavePretrained(tokDir))
		trained.Close()
	}
	check(a.WaitForEveryone())
	tok := must(acc.TokenizerFromPretrained(tokDir))
	defer tok.Close()

	// The dataset: TRL's SFT preparation of the file's "messages" rows, by the tokenizer's own template
	// (saved with it): each conversation rendered and tokenized, truncated to maxLen tokens, labels -100
	// outside the assistant's tokens; each batch TRL's collator's, padded to its longest row (labels -100
	// on the padding).
	dataOptions := map[string]any{"mode": "sft", "assistant_only_loss": true, "max_length": maxLen}
	ds := must(acc.DatasetFromFiles(*data, tok, dataOptions))
	defer ds.Close()
	n := must(ds.Len())
	// Each row as the collator gives it: conversation 0's ids decoded (the template's text), and the labels
	// the loss learns counted.
	supervised := 0
	for i := int64(0); i < n; i++ {
		row := must(ds.GetBatch([]int64{i}))
		ids, labels := must(row.Get("input_ids")), must(row.Get("labels"))
		for _, label := range must(labels.Int64s()) {
			if label != -100 {
				supervised++
			}
		}
		if i == 0 && isMain {
			fmt.Printf("conversation 0 as the template renders it:\n%s\n", must(tok.Decode(must(ids.Int64s()), nil)))
		}
		ids.Close()
		labels.Close()
		row.Close()
	}
	dl := must(acc.NewDataLoader(ds, map[string]any{"batch_size": *batch, "shuffle": true, "seed": 42, "drop_last": true}))
	defer dl.Close()

	// A small Llama sized to the tokenizer, with a LoRA adapter.
	vocab := must(tok.Info()).Len
	eos, _ := must2(tok.TokenToID("<|im_end|>"))
	pad, _ := must2(tok.TokenToID("<|endoftext|>"))
	config := fmt.Sprintf(`{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": %d,
		"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
		"num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-05,
		"tie_word_embeddings": false, "eos_token_id": %d, "pad_token_id": %d, "dtype": "float32"}`, vocab, eos, pad)
	model := must(acc.ModelFromConfig(config, nil))
	defer model.Close()
	check(model.AddLoRA(loraConfig))
	check(model.SetTraining(true))
	opt := must(acc.NewOptimizer(model, `{"type": "adamw", "lr": 0.005, "weight_decay": 0.0}`))
	defer opt.Close()
	check(a.Prepare(model, opt, nil, dl))
	if isMain {
		fmt.Printf("%d conversations, %d assistant tokens to learn; vocabulary %d; LoRA %s; %d steps\n",
			n, supervised, vocab, loraConfig, *steps)
	}

	for step := 1; step <= *steps; {
		b := must(dl.NextBatch())
		if b == nil {
			continue // a new epoch
		}
		outputs := must(model.ForwardBatch(b))
		loss := must(outputs.Get("loss"))
		check(a.Backward(loss))
		check(opt.Step())
		check(opt.ZeroGrad())
		if step%50 == 0 || step == 1 || step == *steps {
			mean := must(a.Reduce(loss, acc.ReduceMean))
			if l := must(mean.Item()); isMain {
				fmt.Printf("step %4d/%d  loss %.4f\n", step, *steps, l)
			}
			mean.Close()
		}
		loss.Close()
		outputs.Close()
		b.Close()
		step++
	}
	check(model.SaveAdapter(adapterDir))

	// The question, rendered by the template with the assistant's header, answered as text: the pieces
	// arrive on a channel while the model generates on a goroutine of its own.
	if isMain {
		check(model.SetTraining(false))
		messages := []map[string]string{{"role": "user", "content": *prompt}}
		rendered := must(tok.ApplyChatTemplate(messages, map[string]any{"add_generation_prompt": true}))
		fmt.Printf("user: %s\nassistant: ", *prompt)
		pieces, wait := model.StreamText(context.Background(), tok, rendered,
			map[string]any{"max_new_tokens": 24, "add_special_tokens": false, "skip_special_tokens": true})
		for piece := range pieces {
			fmt.Print(piece)
		}
		must(wait())
		fmt.Printf("\nsaved the tokenizer to %s and the adapter to %s\n", tokDir, adapterDir)
	}
}

// must2 is must for two results.
func must2[A, B any](a A, b B, err error) (A, B) {
	check(err)
	return a, b
}
