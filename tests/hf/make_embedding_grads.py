"""Make tests/hf/fixtures/<case>/embedding_grad.safetensors: transformers' token-embedding gradient.

transformers gives these families' token embedding nn.Embedding(vocab, hidden, padding_idx=config.pad_token_id), so
the pad row gets no gradient from the lookup. This loads each checkpoint make_fixtures.py saved (pad_token_id 0),
runs one forward and backward of the model's own loss (causal LM; BERT: sequence classification) on a batch whose
attended, labelled tokens include the pad id, and records the embedding weight's gradient: the rows of every id in
the batch plus one absent id (the other rows of an untied model are zero), and the whole gradient's norm.

    .venv-bench/bin/python tests/hf/make_embedding_grads.py

Deterministic, on the CPU, a second or two; CI never runs it (test_hf reads its outputs). See tests/hf/README.md.
"""

import pathlib

import safetensors.torch
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent / "fixtures"
PAD = 0
ABSENT = 60  # an id the batch lacks: zero gradient unless the head is tied to the embedding

# The pad id as ordinary tokens (row 0, positions 1 and 4: attended and labelled) and as padding (row 1's end).
INPUT_IDS = [[5, PAD, 42, 8, PAD, 29, 71], [12, 33, PAD, 88, 50, PAD, PAD]]
ATTN_MASK = [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]
TOKEN_TYPE_IDS = [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1]]  # bert only
BERT_LABELS = [2, 0]

# case -> the token embedding's parameter name (untied: llama, mistral, mixtral; tied head: qwen2).
CASES = {
    "llama": "model.embed_tokens.weight",
    "mistral": "model.embed_tokens.weight",
    "qwen2": "model.embed_tokens.weight",
    "mixtral": "model.embed_tokens.weight",
    "bert": "bert.embeddings.word_embeddings.weight",
}


def main():
    ids = torch.tensor(INPUT_IDS)
    mask = torch.tensor(ATTN_MASK)
    rows = torch.tensor(sorted(set(sum(INPUT_IDS, [])) | {ABSENT}))
    for case, param in CASES.items():
        cfg = transformers.AutoConfig.from_pretrained(ROOT / case / "model")
        cls = getattr(transformers, cfg.architectures[0])  # config.json names the class
        model = cls.from_pretrained(ROOT / case / "model", attn_implementation="eager", dtype=torch.float32)
        model.eval()  # no dropout: the same gradient in libacc
        assert model.get_input_embeddings().padding_idx == PAD == cfg.pad_token_id, case
        batch = {"input_ids": ids, "attention_mask": mask}
        if case == "bert":
            batch["token_type_ids"] = torch.tensor(TOKEN_TYPE_IDS)
            batch["labels"] = torch.tensor(BERT_LABELS)
        else:
            batch["labels"] = ids.masked_fill(mask == 0, -100)
        loss = model(**batch).loss
        loss.backward()
        grad = dict(model.named_parameters())[param].grad
        tied = cfg.tie_word_embeddings and case != "bert"
        # The point of the fixture: the lookup leaves the pad row alone (a tied head's share is all it gets).
        assert tied or grad[PAD].abs().max().item() == 0, case
        out = {**{k: v.contiguous() for k, v in batch.items()}, "loss": loss.detach(), "rows": rows,
               "grad_rows": grad[rows].contiguous(), "grad_norm": grad.norm()}
        path = ROOT / case / "embedding_grad.safetensors"
        safetensors.torch.save_file(out, str(path), metadata={"case": case})
        print(f"{case}: loss {loss.item():.6f}, |grad| {grad.norm().item():.6f}, pad row max |g| "
              f"{grad[PAD].abs().max().item():.3g}, {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
