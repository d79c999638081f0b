"""A GPT-2-shaped language model trained on random tokens: GPU-bound at the GPT-2-124M shape, launch-bound small.

The model is nanoGPT's GPT in plain torch (pre-LayerNorm blocks, causal `scaled_dot_product_attention`, a
4x GELU MLP, tied input and output embeddings), trained with AdamW (fused on CUDA) under bf16 autocast on a
GPU, on random tokens made on the host and copied pinned and non-blocking, as nanoGPT's `get_batch` does.

    python examples/gpt2_train.py                       # GPT-2-124M shape: 12 layers, 768 wide, 1024 tokens, batch 12
    python examples/gpt2_train.py --n-layer 6 --n-embd 384 --n-head 6 --block-size 256 --batch-size 64   # launch-bound
    python examples/gpt2_train.py --cuda-graph          # the whole step replayed as one CUDA graph (perturbation)

On an H100 the first is GPU-bound (doubling the batch about doubles the step); the second spends its step
launching ~1,000 short kernels, so a CUDA graph changes it and a bigger batch hardly does. On a CPU the
defaults shrink (2 layers, 128 wide, 64 tokens, batch 8) so that a step takes milliseconds.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, block_size: int, n_layer: int, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():  # GPT-2's initialisation, scaled residual projections
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def parse_args() -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps to run in total")
    p.add_argument("--batch-size", type=int, default=None, help="default 12 on CUDA, 8 on CPU")
    p.add_argument("--block-size", type=int, default=None, help="tokens per sequence; default 1024 / 64")
    p.add_argument("--n-layer", type=int, default=None, help="default 12 / 2")
    p.add_argument("--n-embd", type=int, default=None, help="default 768 / 128")
    p.add_argument("--n-head", type=int, default=None, help="default 12 / 4")
    p.add_argument("--vocab", type=int, default=50304, help="GPT-2's 50257 padded to a multiple of 64")
    p.add_argument("--dtype", default=None, choices=("bfloat16", "float32"), help="autocast dtype; bf16 on CUDA")
    p.add_argument("--cuda-graph", action="store_true", help="capture the whole step as one CUDA graph")
    args = p.parse_args()
    small = args.device == "cpu"
    for name, gpu_default, cpu_default in (("batch_size", 12, 8), ("block_size", 1024, 64), ("n_layer", 12, 2),
                                           ("n_embd", 768, 128), ("n_head", 12, 4)):
        if getattr(args, name) is None:
            setattr(args, name, cpu_default if small else gpu_default)
    if args.dtype is None:
        args.dtype = "float32" if small else "bfloat16"
    if small and args.vocab == 50304:
        args.vocab = 512
    return args


def get_batch(args: argparse.Namespace, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens made on the host, pinned and copied without blocking, as nanoGPT's get_batch."""
    data = torch.randint(0, args.vocab, (args.batch_size, args.block_size + 1))
    x, y = data[:, :-1], data[:, 1:]
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.contiguous(), y.contiguous()


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.block_size, args.n_layer, args.n_embd, args.n_head).to(device)
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=fused, capturable=args.cuda_graph)
    dtype = getattr(torch, args.dtype)
    autocast = dtype != torch.float32

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=dtype, enabled=autocast):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=not args.cuda_graph)
        return loss

    step_fn = train_step
    if args.cuda_graph:
        if device.type != "cuda":
            raise SystemExit("--cuda-graph needs a CUDA device")
        step_fn = graphed(train_step, get_batch(args, device))

    t0, step, loss = time.perf_counter(), 0, torch.zeros(())
    while step < args.steps:
        x, y = get_batch(args, device)
        loss = step_fn(x, y)
        step += 1
        if step == 2:  # start the clock after the first steps (allocator, cuBLAS, graph capture)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed, timed = time.perf_counter() - t0, max(step - 2, 1)
    print(f"gpt2_train: {step} steps, {args.n_layer} layers x {args.n_embd}, batch {args.batch_size} x "
          f"{args.block_size} on {device}: {1e3 * elapsed / timed:.2f} ms/step, "
          f"{timed * args.batch_size / elapsed:.1f} samples/s, loss {loss.item():.3f}")


def graphed(train_step, example: tuple[torch.Tensor, torch.Tensor]):  # type: ignore[no-untyped-def]
    """`train_step` captured once as a CUDA graph over static inputs; each call copies the batch in and replays."""
    static_x, static_y = (t.clone() for t in example)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as CUDA graph capture requires
        for _ in range(3):
            train_step(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = train_step(static_x, static_y)

    def replay(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)
        graph.replay()
        return static_loss

    return replay


if __name__ == "__main__":
    main()
