#!/usr/bin/env python3
"""Makes the Hugging Face fixtures the C tests read (run by hand; needs torch and transformers).

For each tiny model (random weights, fixed seed): the folder save_pretrained writes
(config.json + model.safetensors), and expected.safetensors holding the fixed tokens and
targets, transformers' logits, per-position losses and mean loss on them, and every parameter
after one plain SGD step (lr 0.1) on that mean loss, named as in the checkpoint.

    python3 -m venv venv && venv/bin/pip install torch transformers
    venv/bin/python tests/data/hf/make_fixtures.py            # writes beside this file
"""
import json
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


def llama(tied):
    # 4 query heads sharing 2 key/value heads; a rotary base other than the default, so that
    # reading it from the config is tested
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=160,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32,
                                   rms_norm_eps=1e-5, rope_theta=5000.0,
                                   tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 so their gradients matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    return model


MODELS = {
    "gpt2-tied": lambda: gpt2(True),
    "gpt2-untied": lambda: gpt2(False),
    "llama-tied": lambda: llama(True),
    "llama-untied": lambda: llama(False),
}


def older_config(path):
    """Rewrites a config as transformers 4.x wrote it (rope_theta at the top, torch_dtype), so
    both spellings are read."""
    with open(path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters", None) or {}
    cfg["rope_theta"] = rope.get("rope_theta", 10000.0)
    cfg["rope_scaling"] = None
    cfg["torch_dtype"] = cfg.pop("dtype", "float32")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def make(name, build):
    torch.manual_seed(1234)
    model = build().float()
    model.eval()  # no dropout
    if hasattr(model.config, "_attn_implementation"):
        model.config._attn_implementation = "eager"  # the plain softmax attention
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
    if name == "llama-untied":
        older_config(os.path.join(out, "config.json"))
    print(f"{name}: loss {loss.item():.6f}, transformers {transformers.__version__}")


if __name__ == "__main__":
    for n in sys.argv[1:] or MODELS:
        make(n, MODELS[n])
