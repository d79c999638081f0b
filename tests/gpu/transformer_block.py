"""A stack of GPT-style transformer blocks trained in bf16 autocast: the attention workload for predict and MFU.

Per block: LayerNorm, fused QKV projection, scaled-dot-product attention (causal), output projection,
LayerNorm, a 4x MLP with GELU. AdamW (fused on CUDA). Tokens come from a fixed pool on the device.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=None, help="default 16 on CUDA, 2 on CPU")
    p.add_argument("--seq", type=int, default=None, help="default 1024 on CUDA, 64 on CPU")
    p.add_argument("--d", type=int, default=None, help="default 1024 on CUDA, 64 on CPU")
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    batch = args.batch_size or (16 if cuda else 2)
    seq, d = args.seq or (1024 if cuda else 64), args.d or (1024 if cuda else 64)
    vocab = 8192 if cuda else 512
    torch.manual_seed(0)
    model = TinyGPT(vocab, d, max(d // 64, 1), args.layers, seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    pool = [torch.randint(0, vocab, (batch, seq + 1), device=device) for _ in range(4)]
    step = 0
    while step < args.steps:
        for tokens in pool:
            x, y = tokens[:, :-1], tokens[:, 1:]
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == args.steps:
                break
    if cuda:
        torch.cuda.synchronize()
        print(f"transformer_block: max_memory_allocated {torch.cuda.max_memory_allocated()} bytes", file=sys.stderr)
    print(f"transformer_block: {args.steps} steps, batch {batch}, seq {seq}, d {d}, {args.layers} layers on {device}")


if __name__ == "__main__":
    main()
