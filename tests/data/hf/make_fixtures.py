#!/usr/bin/env python3
"""Makes the Hugging Face fixtures the C tests read (run by hand; needs torch and transformers).

For each tiny model (random weights, fixed seed): the folder save_pretrained writes
(config.json + model.safetensors), and expected.safetensors holding the fixed tokens and
targets, transformers' logits, per-position losses and mean loss on them, and every parameter
after one plain SGD step (lr 0.1) on that mean loss, named as in the checkpoint.

    python3 -m venv venv && venv/bin/pip install torch transformers
    venv/bin/python tests/data/hf/make_fixtures.py            # writes beside this file
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
B, T, LR = 2, 16, 0.1


def gpt2(tied):
    cfg = transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                                  tie_word_embeddings=tied, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


MODELS = {
    "gpt2-tied": lambda: gpt2(True),
    "gpt2-untied": lambda: gpt2(False),
}


def make(name, build):
    torch.manual_seed(1234)
    model = build().float()
    model.eval()  # no dropout
    out = os.path.join(HERE, name)
    model.save_pretrained(out, safe_serialization=True)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, vocab, (B, T + 1), generator=g)
    inputs, targets = tokens[:, :T], tokens[:, 1:]
    logits = model(inputs).logits
    losses = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1),
                                               reduction="none")
    loss = losses.mean()
    loss.backward()
    expected = {
        "tokens": inputs.to(torch.float32).contiguous(),  # small ids: exact as floats
        "targets": targets.to(torch.float32).contiguous(),
        "logits": logits.detach().contiguous(),
        "losses": losses.detach().reshape(B, T).contiguous(),
        "loss": loss.detach().reshape(1),
    }
    with torch.no_grad():
        seen = set()
        for pname, p in model.named_parameters():  # a tied tensor is listed once
            if id(p) in seen:
                continue
            seen.add(id(p))
            expected["sgd." + pname] = (p - LR * p.grad).contiguous()
    save_file(expected, os.path.join(out, "expected.safetensors"))
    print(f"{name}: loss {loss.item():.6f}, transformers {transformers.__version__}")


if __name__ == "__main__":
    for n in sys.argv[1:] or MODELS:
        make(n, MODELS[n])
