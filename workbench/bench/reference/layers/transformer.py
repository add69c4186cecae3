# The `transformer` layer (plugins/transformer): the Transformer baseline of the Hyper-SET
# seeds (notes-hyperset.md §3): pre-RMSNorm softmax attention with separate Q/K/V/O (or one
# shared QKV matrix), ReLU MLP, no biases; k blocks, each iterated L / k times.
# `kernels` only picks the Rust implementation of RMSNorm / linear / softmax / ReLU (fused or
# composed, the same math): here both are the plain PyTorch composition.


class TransformerBlock(nn.Module):
    """`X += Attn(RMSNorm(X))` (`X -= ...` with `attention_sign=reversed`), `X += MLP(RMSNorm(X))`."""

    def __init__(self, options):
        super().__init__()
        d, std = options["d"], options["init_std"]
        mlp_width = options["ff_ratio"] * d
        self.heads, self.head_dim, self.eps = options["heads"], d // options["heads"], options["norm_eps"]
        self.reversed = options["attention_sign"] == "reversed"  # seed 000 App. F.3
        square = lambda: nn.Parameter(normal_(torch.empty(d, d), std))  # weights [in, out]: y = x W
        if options["shared_qkv"]:
            self.w_qkv = square()
            self.w_q = self.w_k = self.w_v = self.w_qkv
        else:
            self.w_q, self.w_k, self.w_v = square(), square(), square()
        self.w_o = square()
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.mlp_norm = nn.Parameter(torch.ones(d))
        self.w_up = nn.Parameter(normal_(torch.empty(d, mlp_width), std))
        self.w_down = nn.Parameter(normal_(torch.empty(mlp_width, d), std))

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def attention(self, h, mask):
        b, n, d = h.shape
        q, k, v = self.split(h @ self.w_q), self.split(h @ self.w_k), self.split(h @ self.w_v)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask  # additive causal mask: 0 on and below the diagonal, -inf above
        mixed = torch.softmax(scores, -1) @ v
        return mixed.transpose(1, 2).reshape(b, n, d) @ self.w_o

    def forward(self, x, mask):
        attended = self.attention(rms_norm(x, self.attn_norm, self.eps), mask)
        x = x - attended if self.reversed else x + attended
        h = rms_norm(x, self.mlp_norm, self.eps)
        return x + torch.relu(h @ self.w_up) @ self.w_down


def build_layer(options, causal):
    return BlockStack("transformer", options, causal, TransformerBlock)
