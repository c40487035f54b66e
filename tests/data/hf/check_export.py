#!/usr/bin/env python3
"""Checks a folder `stagecraft export` wrote against transformers (needs torch, transformers and
safetensors; the integration test test_export_transformers.sh runs it, skipping without them).

    check_export.py DIR --stagecraft BIN [--tokens SHARD] [--seq-len T] [--batch B] [--json]

1. transformers' from_pretrained loads DIR with no missing, unexpected or mismatched key.
2. Every tensor of DIR's safetensors file(s) (one file, or the shards its index names) equals the
   loaded model's tensor of that name bit for bit, same dtype and shape; every parameter of the
   model comes from the files, but a tied output projection, which must then be the embedding.
3. The logits of the loaded model on the token windows of SHARD (an llm.c token shard; without
   one, a fixed shard of the model's vocabulary is written), read as `stagecraft eval` reads
   them, give per batch and in the mean the cross-entropy `stagecraft eval --model DIR` prints,
   within --loss-tol (1e-5, absolute).

Prints one line per check (or a JSON summary with --json); exits 0 when all hold, 1 otherwise,
2 on bad usage.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors import safe_open


def fail(msg):
    print("check_export: " + msg, file=sys.stderr)
    sys.exit(1)


def safetensors_files(folder):
    """The safetensors files of a checkpoint folder: the shards its index names, else the one
    model.safetensors."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, n) for n in names]
    one = os.path.join(folder, "model.safetensors")
    if not os.path.exists(one):
        fail(f"{folder} holds neither model.safetensors nor model.safetensors.index.json")
    return [one]


def load(folder):
    kw = {"attn_implementation": "eager", "output_loading_info": True}
    try:  # transformers 5 names it dtype, 4.x torch_dtype
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, **kw)
    except TypeError:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            folder, torch_dtype=torch.float32, **kw)
    return model.eval(), info


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.float32:
        return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))
    return torch.equal(a, b)


def check_tensors(model, folder):
    """Every file tensor against the model's; returns (tensors compared, elements)."""
    state = model.state_dict()
    prefix = model.base_model_prefix + "."
    seen, count, elems = set(), 0, 0
    for path in safetensors_files(folder):
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                key = name if name in state else prefix + name  # GPT-2 names lack the prefix
                if key not in state:
                    fail(f"{os.path.basename(path)}: tensor {name} is no tensor of the model")
                t = f.get_tensor(name)
                if not same_bits(t, state[key]):
                    d = (t.float() - state[key].float()).abs().max().item() \
                        if t.shape == state[key].shape else None
                    fail(f"tensor {name}: the file's {t.dtype} {list(t.shape)} differs from the "
                         f"loaded {state[key].dtype} {list(state[key].shape)} (max |diff| {d})")
                seen.add(key)
                count += 1
                elems += t.numel()
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings().weight
    for name, p in model.named_parameters(remove_duplicate=False):
        if name in seen:
            continue
        if tied and p is out:
            if out.data_ptr() != emb.data_ptr():
                fail(f"{name}: tie_word_embeddings, but the head is not the embedding")
            continue
        fail(f"parameter {name} of the model is in no safetensors file of {folder}")
    if tied and out.data_ptr() != emb.data_ptr():
        fail("tie_word_embeddings, but the loaded head is not the embedding")
    return count, elems


def write_shard(path, vocab, n):
    toks = [(i * 37 + 11) % vocab for i in range(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
        f.write(struct.pack("<%dH" % len(toks), *toks))


def read_shard(path):
    raw = open(path, "rb").read()
    magic, _, n = struct.unpack("<3i", raw[:12])
    if magic != 20240520:
        fail(f"{path}: not an llm.c token shard (magic {magic})")
    return torch.tensor(struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n]), dtype=torch.long)


def transformers_losses(model, toks, B, T):
    """Per-batch mean cross-entropy over the windows stagecraft eval reads."""
    losses = []
    with torch.no_grad():
        for b in range((len(toks) - 1) // (B * T)):
            w = toks[b * B * T:b * B * T + B * T + 1]
            lg = model(w[:-1].view(B, T)).logits
            losses.append(torch.nn.functional.cross_entropy(
                lg.reshape(-1, lg.size(-1)).double(), w[1:], reduction="mean").item())
    return losses


def stagecraft_loss(sc, folder, shard, B, T, batches):
    out = subprocess.run([sc, "eval", "--model", folder, "--data", shard, "--seq-len", str(T),
                          "--batch", str(B), "--batches", str(batches), "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"stagecraft eval: {out.stderr.strip()}")
    return json.loads(out.stdout)["loss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--stagecraft", required=True, help="the stagecraft binary")
    ap.add_argument("--tokens", help="an llm.c token shard (default: a fixed one written here)")
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--loss-tol", type=float, default=1e-5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    model, info = load(a.folder)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys",
                                                   "mismatched_keys", "error_msgs") and v}
    if bad:
        fail(f"from_pretrained({a.folder}): {bad}")
    count, elems = check_tensors(model, a.folder)

    with tempfile.TemporaryDirectory() as tmp:
        shard = a.tokens
        if shard is None:
            shard = os.path.join(tmp, "tokens.bin")
            write_shard(shard, model.config.vocab_size, 3 * a.batch * a.seq_len + 1)
        toks = read_shard(shard)
        hf = transformers_losses(model, toks, a.batch, a.seq_len)
        if not hf:
            fail(f"{shard}: fewer than {a.batch * a.seq_len + 1} tokens")
        # stagecraft's mean over the first k batches, for k = 1..N: each batch's own loss
        means = [stagecraft_loss(a.stagecraft, a.folder, shard, a.batch, a.seq_len, k)
                 for k in range(1, len(hf) + 1)]
    sc = [means[0]] + [means[k] * (k + 1) - means[k - 1] * k for k in range(1, len(means))]
    hf_mean = sum(hf) / len(hf)
    worst = max(abs(x - y) for x, y in zip(sc, hf))
    mean_diff = abs(means[-1] - hf_mean)
    ok = worst <= a.loss_tol and mean_diff <= a.loss_tol
    summary = {"folder": a.folder, "model_type": model.config.model_type,
               "tied": bool(getattr(model.config, "tie_word_embeddings", False)),
               "tensors": count, "elements": elems, "batches": len(hf),
               "loss_stagecraft": means[-1], "loss_transformers": hf_mean,
               "loss_abs_diff": mean_diff, "batch_loss_max_abs_diff": worst,
               "transformers": transformers.__version__, "torch": torch.__version__, "ok": ok}
    if a.json:
        print(json.dumps(summary))
    else:
        print(f"{a.folder}: {model.config.model_type}{' tied' if summary['tied'] else ''}, "
              f"transformers {transformers.__version__} loads it, no key missing or unexpected")
        print(f"  {count} tensors ({elems} values) equal the safetensors file bit for bit")
        print(f"  loss over {len(hf)} batches of {a.batch}x{a.seq_len}: stagecraft "
              f"{means[-1]:.8f}, transformers {hf_mean:.8f} (|diff| {mean_diff:.2e}, worst "
              f"batch {worst:.2e}, tolerance {a.loss_tol:g})")
    if not ok:
        fail(f"the losses differ by more than {a.loss_tol:g}: stagecraft {sc}, transformers {hf}")


if __name__ == "__main__":
    main()
