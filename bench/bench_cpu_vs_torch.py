"""PyTorch side of bench_cpu_vs_torch.sh (and of gpu-check.sh, with --device cuda): one GPT
training step (forward, backward, AdamW) in eager fp32 on the CPU (on a GPU: TF32 matmuls, as
bench_kernels_gpu runs), the same architecture and parameter count as a stagecraft GPT (token and
position embeddings, pre-LayerNorm blocks of causal attention and a GELU MLP with biases, a final
LayerNorm and an untied vocabulary projection without bias, cross-entropy); or one product of a
GEMM's shape. Prints "step_ms=... mean_ms=... params=..." (best and mean of --steps, the first
step, which allocates the optimizer's state, left out of both) or "gflops=...".

Not a test: figures only, and nothing about stagecraft itself.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, C, H):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.head = nn.Linear(C, V, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, help="CPU threads (default: PyTorch's)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--gpt", help="V,T,L,C,H")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--gemm", help="M,K,N: (M,K) @ (N,K)^T")
    ap.add_argument("--precision", default="tf32", choices=["tf32", "fp32", "bf16", "fp16"],
                    help="GPU: tf32 (default), fp32, or bf16 / fp16 autocast with fp32 weights "
                         "(fp16 with a GradScaler)")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        tf32 = a.precision != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)

    def sync():  # a GPU step has ended only once its kernels have
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    if a.gemm:
        M, K, N = (int(s) for s in a.gemm.split(","))
        x, w = torch.randn(M, K, device=dev), torch.randn(N, K, device=dev)
        best = math.inf
        for _ in range(max(a.steps, 10)):
            sync()
            t0 = time.perf_counter()
            torch.mm(x, w.t())
            sync()
            best = min(best, time.perf_counter() - t0)
        print(f"gflops={2.0 * M * K * N / best * 1e-9:.1f}")
        return
    V, T, L, C, H = (int(s) for s in a.gpt.split(","))
    model = GPT(V, T, L, C, H).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                            **({"fused": True} if a.fused else {}))
    run = torch.compile(model) if a.compile else model
    scaler = torch.amp.GradScaler("cuda") if a.precision == "fp16" else None
    idx = torch.randint(0, V, (a.batch, T), device=dev)
    tgt = torch.randint(0, V, (a.batch, T), device=dev)
    warm = 3 if a.compile else 1  # the first steps allocate AdamW's state (and compile)
    times = []
    for i in range(a.steps + warm):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=half, enabled=half is not None):
            loss = run(idx, tgt)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        sync()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    times.sort()
    params = sum(p.numel() for p in model.parameters())
    print(f"step_ms={times[0] * 1e3:.3f} mean_ms={sum(times) / len(times) * 1e3:.3f} "
          f"median_ms={times[len(times) // 2] * 1e3:.3f} params={params} "
          f"precision={a.precision} fused={a.fused} compile={a.compile} torch={torch.__version__}")


if __name__ == "__main__":
    main()
