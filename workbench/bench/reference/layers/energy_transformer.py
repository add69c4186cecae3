# The `energy-transformer` layer (plugins/energy-transformer), Hoover et al. 2023 as the
# Hyper-SET seeds use it as a baseline (seed 000 H.1): each iteration takes g = LN(x) and steps
# x <- x - alpha dE/dg down E = E_ATT + E_HN, with the plugin's hand-derived gradient (block.rs),
# not autograd of the energy. k distinct blocks, block b running iterations b L/k + 1 ..= (b+1) L/k.

ET_LAYER_NORM_EPS = 1e-5  # the seed authors' EnergyLayerNorm


class EnergyLayerNorm(nn.Module):
    """g = gamma (x - mean) / sqrt(var + eps) + delta, one scalar gain and a per-channel bias."""

    def __init__(self, d):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1))
        self.delta = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        variance = centred.pow(2).mean(-1, keepdim=True)
        return centred / torch.sqrt(variance + ET_LAYER_NORM_EPS) * self.gamma + self.delta


class EtBlock(nn.Module):
    """Wq, Wk ([H, p, d], N(0, init_std^2)), memories Xi ([M, d], U(-1/sqrt(d), 1/sqrt(d)))."""

    def __init__(self, d, heads, head_dim, memories, beta, alpha, attend_self, std):
        super().__init__()
        self.heads, self.head_dim, self.beta, self.alpha, self.attend_self = heads, head_dim, beta, alpha, attend_self
        self.norm = EnergyLayerNorm(d)
        self.wq = nn.Parameter(normal_(torch.empty(heads, head_dim, d), std))
        self.wk = nn.Parameter(normal_(torch.empty(heads, head_dim, d), std))
        bound = 1.0 / math.sqrt(d)
        self.xi = nn.Parameter(nn.init.uniform_(torch.empty(memories, d), -bound, bound))

    def project(self, g, w):
        """Per-head projections g W_h^T, [B, H, N, p]."""
        b, n, _ = g.shape
        flat = g @ w.reshape(self.heads * self.head_dim, -1).t()
        return flat.view(b, n, self.heads, self.head_dim).transpose(1, 2).contiguous()

    def attention_gradient(self, g):
        """dE_ATT/dg = -sum_h (P_h K_h Wq_h + P_h^T Q_h Wk_h), P_h = softmax_B(beta Q_h K_h^T)."""
        b, n, _ = g.shape
        q, k = self.project(g, self.wq), self.project(g, self.wk)
        a = (q @ k.transpose(-1, -2)) * self.beta
        if not self.attend_self:  # the inner sum over keys B != C (Hoover et al.)
            a = a + torch.zeros(n, n, device=DEVICE).fill_diagonal_(float("-inf"))
        p = torch.softmax(a, -1)
        merge = lambda t: t.transpose(1, 2).reshape(b, n, self.heads * self.head_dim)
        d_query = merge(p @ k)  # -dE/dQ
        d_key = merge(p.transpose(-1, -2) @ q)  # -dE/dK
        through_queries = d_query @ self.wq.reshape(self.heads * self.head_dim, -1)
        through_keys = d_key @ self.wk.reshape(self.heads * self.head_dim, -1)
        return -(through_queries + through_keys)

    def hopfield_gradient(self, g):
        """dE_HN/dg = -ReLU(g Xi^T) Xi."""
        return -(torch.relu(g @ self.xi.t()) @ self.xi)

    def forward(self, x):
        """One iteration: x - alpha dE/dg at g = LN(x)."""
        g = self.norm(x)
        return x - (self.attention_gradient(g) + self.hopfield_gradient(g)) * self.alpha


class EnergyTransformer(nn.Module):
    def __init__(self, options):
        super().__init__()
        d, heads = options["d"], options["heads"]
        head_dim = options["head_dim"]
        if head_dim == 0:
            if d % heads != 0:
                raise SystemExit(f"head_dim = 0 means d / heads, but d = {d} is not divisible by heads = {heads}")
            head_dim = d // heads
        memories = int(math.floor(options["hopfield_ratio"] * d))
        if memories == 0:
            raise SystemExit(f"hopfield_ratio = {options['hopfield_ratio']} gives 0 memories at d = {d}")
        beta = options["beta"] if options["beta"] != 0.0 else 1.0 / math.sqrt(head_dim)
        self.iterations, layers = options["iterations"], options["layers"]
        if self.iterations % layers != 0:
            raise SystemExit(f"{self.iterations} iterations cannot be split over {layers} layers")
        self.width = d
        self.blocks = nn.ModuleList(
            EtBlock(d, heads, head_dim, memories, beta, options["alpha"], options["attend_self"], options["init_std"])
            for _ in range(layers)
        )

    def forward(self, x0):
        x = x0
        for block in block_schedule(self.iterations, self.blocks):
            x = block(x)
        return x


def build_layer(options, causal):
    if causal:
        raise SystemExit(
            "the energy-transformer has no causal form (its key gradient P^T Q carries later tokens back); use a non-causal task"
        )
    return EnergyTransformer(options)
