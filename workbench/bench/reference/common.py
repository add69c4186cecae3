"""The PyTorch references of `workbench bench --reference`: the model of a layer plugin on a
task plugin, written op for op in plain PyTorch (CPU eager) and timed on the same training
step as the workbench's (forward, backward, gradient clipping, AdamW).

The script is this file, then one task file (`tasks/`), then one layer file (`layers/`):

- a layer file defines `build_layer(options, causal)`, an `nn.Module` with a `width` and
  `forward(x0)` mapping the embedded tokens `[B, N, width]` to the layer's output;
- a task file defines `build_task(options, layer, inputs)`, an `nn.Module` holding the layer
  with `loss(*batch)`, and `make_batch(options, inputs)`, a random batch of the given input
  dimensions (timing does not depend on the values).

The script is run as `python3 -c SCRIPT ARGUMENT`. Argument: one JSON object with the
resolved `layer` and `task` options, the `inputs` dimensions of one training batch, `causal`,
`batch`, `device` (`cpu`, `cuda` or `cuda:K`: every tensor is made there), `threads` and the
trainer settings `train` (lr, beta1, beta2, weight_decay, grad_clip).

The model is built and trained for two warm-up steps, then one line of JSON says so:
{"torch": version, "device": name, "threads": n, "parameters": n} (the parameter count lets
the two sides be checked to hold the same model). Then each line read on standard input is
a number of steps to time, answered by one line {"step_s": mean seconds per step}, until
standard input ends: the workbench alternates its own timed steps with these blocks, so
that both sides are measured in the same minutes of a shared machine.
"""

import json
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# Where every tensor is made: the model and the batch are built under `with DEVICE`, and the
# tensors the forward passes make name it (a default device would tax every torch call).
DEVICE = torch.device("cpu")


def rms_norm(x, gain, eps):
    """`x / sqrt(mean(x^2) + eps) * gain` over the last axis (`plugin_api::ops::rms_norm`)."""
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x if gain is None else x * gain


def sinusoid(t, dim):
    """`[sin(t w_k), cos(t w_k)]`, `w_k = 10000^(-k / (dim/2 - 1))` (`plugin_api::ops::sinusoidal_embedding`)."""
    half = dim // 2
    denom = max(half, 2) - 1
    freqs = torch.exp(-torch.arange(half, dtype=torch.float64, device=DEVICE) * math.log(10_000.0) / denom)
    return torch.cat([torch.sin(t * freqs), torch.cos(t * freqs)]).float()


def causal_mask(n):
    """`[n, n]`: 0 on and below the diagonal, -inf above (`plugin_api::ops::causal_mask`)."""
    return torch.full((n, n), float("-inf"), device=DEVICE).triu(1)


def block_schedule(iterations, blocks):
    """The block of each iteration: block b runs iterations b L/k + 1 ..= (b + 1) L/k (`plugin_api::BlockStack`)."""
    per_block = iterations // len(blocks)
    return [blocks[t // per_block] for t in range(iterations)]


class BlockStack(nn.Module):
    """k distinct blocks iterated over L iterations (`plugin_api::BlockStack`), each called as
    `block(x, mask)` with the causal mask, or None."""

    def __init__(self, name, options, causal, make_block):
        super().__init__()
        if options["d"] % options["heads"] or options["iterations"] % options["layers"]:
            raise SystemExit(f"{name}: heads must divide d and layers must divide iterations")
        self.width, self.iterations, self.causal = options["d"], options["iterations"], causal
        self.blocks = nn.ModuleList(make_block(options) for _ in range(options["layers"]))

    def forward(self, x0):
        mask = causal_mask(x0.shape[1]) if self.causal else None
        x = x0
        for block in block_schedule(self.iterations, self.blocks):
            x = block(x, mask)
        return x


def normal_(tensor, std):
    """N(0, std^2), or zeros for std 0, as the plugins' `Init::Randn`."""
    return nn.init.normal_(tensor, std=std) if std > 0 else nn.init.zeros_(tensor)


def default_linear(fan_in, fan_out, bias=True):
    """PyTorch's `nn.Linear` default init, `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, weights and biases."""
    return nn.Linear(fan_in, fan_out, bias=bias)


def main():
    args = json.loads(sys.argv[1])
    if args["threads"] > 0:
        torch.set_num_threads(args["threads"])
    global DEVICE
    DEVICE = device = torch.device(args.get("device", "cpu"))
    torch.manual_seed(0)
    with device:
        layer = build_layer(args["layer"], args["causal"])
        model = build_task(args["task"], layer, args["inputs"])
        batch = make_batch(args["task"], args["inputs"])
    train = args["train"]
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=train["lr"],
        betas=(train["beta1"], train["beta2"]),
        eps=1e-8,
        weight_decay=train["weight_decay"],
    )

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model.loss(*batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train["grad_clip"])
        opt.step()
        if device.type == "cuda":  # the step's kernels run asynchronously
            torch.cuda.synchronize(device)

    for _ in range(2):  # two warm-up steps, as workbench bench
        step()
    say(
        {
            "torch": torch.__version__,
            "device": str(device),
            "threads": torch.get_num_threads(),
            "parameters": sum(p.numel() for p in model.parameters()),
        }
    )
    for line in sys.stdin:
        steps = int(line)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        say({"step_s": (time.perf_counter() - start) / steps})  # the mean, as workbench bench


def say(obj):
    """One line of JSON on standard output, flushed: the workbench waits for it."""
    print(json.dumps(obj), flush=True)
