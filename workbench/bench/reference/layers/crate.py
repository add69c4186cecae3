# The `crate` layer (plugins/crate-layer): CRATE (Yu et al. 2023) and CRATE-T (Hu et al. 2024c)
# as the Hyper-SET seeds' baselines: X_half = X + MSSA(LN(X)) with one shared U as query, key
# and value of every head, then one non-negative ISTA step X_next = ISTA(LN(X_half)), no
# residual; k blocks, each iterated L / k times. Causal passes mask the MSSA softmax.

LAYER_NORM_EPS = 1e-5  # PyTorch's nn.LayerNorm eps, as the seed authors' CRATE


class LayerNorm(nn.Module):
    """`gain * (x - mean) / sqrt(var + eps) + bias`, composed as the plugin writes it (block.rs)."""

    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        variance = centred.pow(2).mean(-1, keepdim=True)
        return centred / torch.sqrt(variance + LAYER_NORM_EPS) * self.weight + self.bias


class CrateBlock(nn.Module):
    """One iteration; weights [in, out] (row-major, tokens are rows: the paper's U_k^T Z is X U_k)."""

    def __init__(self, options):
        super().__init__()
        d, std = options["d"], options["init_std"]
        self.heads, self.head_dim = options["heads"], d // options["heads"]
        self.eta, self.lam = options["eta"], options["lambda"]
        self.learned_output = options["variant"] == "crate"
        self.attn_norm = LayerNorm(d)
        self.u = nn.Parameter(normal_(torch.empty(d, d), std))  # subspace bases U_[K], head h = columns h*p..(h+1)*p
        if self.learned_output:  # CRATE as implemented: learned W_o with bias
            self.w_o = nn.Parameter(normal_(torch.empty(d, d), std))
            self.b_o = nn.Parameter(torch.zeros(d))
        self.ista_norm = LayerNorm(d)
        bound = math.sqrt(6.0 / d)  # the authors' Kaiming-uniform dictionary
        self.dictionary = nn.Parameter(nn.init.uniform_(torch.empty(d, d), -bound, bound))

    def mssa(self, h, mask):
        """SSA(Z | U_k) = softmax(p^-1/2 (U_k^T Z)^T (U_k^T Z)) (U_k^T Z) per head, then the variant's output."""
        b, n, d = h.shape
        w = (h @ self.u).view(b, n, self.heads, self.head_dim).transpose(1, 2)  # query = key = value
        scores = (w @ w.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask  # additive causal mask: 0 on and below the diagonal, -inf above
        merged = (torch.softmax(scores, -1) @ w).transpose(1, 2).reshape(b, n, d)
        if self.learned_output:
            return merged @ self.w_o + self.b_o
        return merged @ self.u  # CRATE-T: back through U itself (U^T in column notation)

    def ista(self, z):
        """ReLU(Z + eta (D^T (Z - D Z) - lambda)), row-major: (Z - Z D^T) D - lambda."""
        direction = (z - z @ self.dictionary.t()) @ self.dictionary - self.lam
        return torch.relu(z + direction * self.eta)

    def forward(self, x, mask):
        x_half = x + self.mssa(self.attn_norm(x), mask)
        return self.ista(self.ista_norm(x_half))


def build_layer(options, causal):
    if options["variant"] not in ("crate", "crate_t"):
        raise SystemExit(f"crate: variant `{options['variant']}` is unknown; use crate or crate_t")
    return BlockStack("crate", options, causal, CrateBlock)  # rate_eps only sets the diagnostics' energies
