"""The PyTorch reference of `workbench bench --reference`: the Hyper-SET Sudoku model of the
`hyperset` and `sudoku` plugins, written in plain PyTorch (CPU eager), timed on the same
training step (forward, backward, gradient clipping, AdamW).

Same parameters (printed, so the two sides can be checked to match), same shapes, same
operations: seed 000 Eq. 9 and 11 with the step-size network of Eq. 12 ("plain" form),
bi-softmax attention on RMS-normalised projections of one shared W, ReLU feedforward with
tied D, learnable token and per-cell position embeddings, RMSNorm + Linear head and
cross-entropy on blank cells. The data are random boards: timing does not depend on them.

Prints one line of JSON: {"torch": version, "threads": n, "parameters": n,
"step_s": mean seconds per step, "samples_per_s": ...}.
"""

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

EPS = 1e-6


def rms_norm(x, gain):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return x if gain is None else x * gain


def sinusoid(t, dim):
    half = dim // 2
    denom = max(half, 2) - 1
    freqs = torch.exp(-torch.arange(half, dtype=torch.float64) * math.log(10_000.0) / denom)
    return torch.cat([torch.sin(t * freqs), torch.cos(t * freqs)]).float()


class StepSizeNet(nn.Module):
    """Eq. 12, plain form: e = Linear(GELU(Linear(sinusoid(t)))), [alpha, gamma] = Linear(GELU(e + X0))."""

    def __init__(self, d, time_dim, std):
        super().__init__()
        self.time_dim = time_dim
        self.time_in = nn.Linear(time_dim, d)
        self.time_out = nn.Linear(d, d)
        self.out = nn.Linear(d, 2 * d)
        for lin, init_std in ((self.time_in, std), (self.time_out, std), (self.out, 0.0)):
            nn.init.normal_(lin.weight, std=init_std) if init_std > 0 else nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, t, cond):
        e = self.time_out(F.gelu(self.time_in(sinusoid(t, self.time_dim))))
        return self.out(F.gelu(cond + e)).chunk(2, dim=-1)


class HyperSet(nn.Module):
    def __init__(self, d, heads, iterations, ff_width, time_dim, std):
        super().__init__()
        self.heads, self.iterations = heads, iterations
        self.w = nn.Parameter(torch.randn(d, d) * std)
        self.d_ff = nn.Parameter(torch.randn(d, ff_width) * std)
        self.attn_norm = nn.Parameter(torch.ones(d // heads))
        self.ff_norm = nn.Parameter(torch.ones(ff_width))
        self.step = StepSizeNet(d, time_dim, std)

    def attention_update(self, x):
        b, n, d = x.shape
        p = d // self.heads
        z = rms_norm((x @ self.w).view(b, n, self.heads, p).transpose(1, 2), self.attn_norm)
        a = (z @ z.transpose(-1, -2)) / math.sqrt(p)
        mixed = (torch.softmax(a, -1) + torch.softmax(a, -2)) @ z
        return mixed.transpose(1, 2).reshape(b, n, d) @ self.w.t()

    def feedforward_update(self, x):
        return torch.relu(rms_norm(x @ self.d_ff, self.ff_norm)) @ self.d_ff.t()

    def forward(self, x0):
        x = x0
        for t in range(1, self.iterations + 1):
            alpha, gamma = self.step(float(t), x0)
            x = x - alpha * self.attention_update(x)  # Eq. 9
            x = x + gamma * self.feedforward_update(x)  # Eq. 11
        return x


class SudokuModel(nn.Module):
    def __init__(self, layer, d, std):
        super().__init__()
        self.layer = layer
        self.tokens = nn.Parameter(torch.randn(10, d) * std)
        self.positions = nn.Parameter(torch.randn(81, d) * std)
        self.head_norm = nn.Parameter(torch.ones(d))
        self.head = nn.Parameter(torch.randn(d, 9) * std)

    def loss(self, boards, targets, blanks):
        h = self.layer(self.tokens[boards] + self.positions)
        logits = (rms_norm(h, self.head_norm) @ self.head).reshape(-1, 9)
        nll = F.cross_entropy(logits, targets.reshape(-1), reduction="none")
        weights = blanks.reshape(-1)
        return (nll * weights).sum() / weights.sum().clamp_min(1e-12)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--ff-ratio", type=int, default=4)
    parser.add_argument("--time-dim", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    std = 0.02
    layer = HyperSet(args.d, args.heads, args.iterations, args.ff_ratio * args.d, args.time_dim, std)
    model = SudokuModel(layer, args.d, std)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    boards = torch.randint(0, 10, (args.batch, 81))
    targets = torch.randint(0, 9, (args.batch, 81))
    blanks = (boards == 0).float()
    times = []
    for step in range(2 + args.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model.loss(boards, targets, blanks)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= 2:  # two warm-up steps, as workbench bench
            times.append(time.perf_counter() - start)
    step_s = sum(times) / len(times)  # the mean, as workbench bench reports
    print(
        json.dumps(
            {
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "parameters": sum(p.numel() for p in model.parameters()),
                "step_s": step_s,
                "samples_per_s": args.batch / step_s,
            }
        )
    )


if __name__ == "__main__":
    main()
