"""Make tests/hf/fixtures/<case>/padded_grads.safetensors: transformers' loss, logits and every parameter's gradient
on a left-padded batch whose labels keep the first real token (transformers' default: only the padding is -100).

The first real token after left padding is predicted from the last pad position, whose query may attend to no key
(every key is padding or in its future). What a fully masked row gives differs between transformers' attention
implementations: eager adds finfo.min to every score, and softmax makes the row uniform over all keys; sdpa (the
default) gives the row an output of zero (torch's safe softmax), and no gradient flows through it. libacc follows
sdpa (docs/hf-models.md, "Fully masked rows"); this records sdpa's answers, and eager's loss beside them to show the
two differ on this batch.

    .venv-bench/bin/python tests/hf/make_padded_grads.py

Deterministic, on the CPU, a second or two; CI never runs it (test_hf reads its outputs). See tests/hf/README.md.
"""

import pathlib

import safetensors.torch
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent / "fixtures"
PAD = 0
# Row 0 left-padded by 3 (its first real token, 42, is labelled), row 1 by 1, row 2 not at all.
INPUT_IDS = [[PAD, PAD, PAD, 42, 8, 29, 71], [PAD, 12, 33, 88, 50, 7, 19], [5, 61, 42, 8, 3, 29, 71]]
ATTN_MASK = [[0, 0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]]
CASES = ("llama", "mistral", "qwen2", "gpt2")


def run(case, implementation):
    cfg = transformers.AutoConfig.from_pretrained(ROOT / case / "model")
    cls = getattr(transformers, cfg.architectures[0])
    model = cls.from_pretrained(ROOT / case / "model", attn_implementation=implementation, dtype=torch.float32)
    model.eval()  # no dropout: the same gradient in libacc
    ids, mask = torch.tensor(INPUT_IDS), torch.tensor(ATTN_MASK)
    labels = ids.masked_fill(mask == 0, -100)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    return out, model, {"input_ids": ids, "attention_mask": mask, "labels": labels}


def main():
    for case in CASES:
        out, model, batch = run(case, "sdpa")
        tensors = {"loss": out.loss.detach().reshape(1), "logits": out.logits.detach(), **batch}
        for name, p in model.named_parameters():
            tensors["grad." + name] = p.grad.detach().clone()
        eager, _, _ = run(case, "eager")
        tensors["eager_loss"] = eager.loss.detach().reshape(1)
        # Where the pad rows' outputs differ, so do the losses: the fixture can tell the two semantics apart.
        assert abs(eager.loss.item() - out.loss.item()) > 1e-4, (case, eager.loss.item(), out.loss.item())
        safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()},
                                    ROOT / case / "padded_grads.safetensors",
                                    metadata={"transformers": transformers.__version__, "torch": torch.__version__})
        print(f"{case}: sdpa loss {out.loss.item():.6f}, eager loss {eager.loss.item():.6f}")


if __name__ == "__main__":
    main()
