# The `cem` layer (plugins/cem): seed 002 Algorithm 1. `layers` blocks, block b run I/k times in
# a row; each block runs the attention recursion (Eq. 16) then the MLP recursion (Eq. 17) from
# the raw block input, with keys / gamma from its RMSNorm fixed, the hand-derived update
# directions (Eq. 2, 8), learned preconditioners (Eq. 13-15) and ALiBi (Appendix B).
# phi (Eq. 7's potential) only enters the energies, which the training step never evaluates.

RMS_EPS = 1e-6
LOW_RANK_INIT_STD = 0.02  # U ~ N(0, 0.02^2), V = 0 (Appendix D.4)


def softplus(x):
    """`max(x, 0) + log(1 + e^{-|x|})`, as preconditioner.rs writes it."""
    return torch.relu(x) + torch.log(torch.exp(-x.abs()) + 1.0)


class Preconditioner(nn.Module):
    """Eq. 13: `P_g = diag(softplus(sqrt(D) p_g)) + U_g V_g^T + V_g U_g^T` for `groups` groups."""

    def __init__(self, kind, groups, width, rank):
        super().__init__()
        self.width = width
        self.diag = self.u = self.v = None
        if kind != "none":
            self.diag = nn.Parameter(torch.full((groups, width), 1.0 / math.sqrt(width)))
        if kind == "diagonal_low_rank":
            self.u = nn.Parameter(normal_(torch.empty(groups, width, rank), LOW_RANK_INIT_STD))
            self.v = nn.Parameter(torch.zeros(groups, width, rank))

    def diagonal(self):
        return None if self.diag is None else softplus(self.diag * math.sqrt(self.width))

    def low_rank_sum(self, through_v, through_u):
        """`sum_g U_g (V_g^T y_g) + V_g (U_g^T y_g)`, the groups' coordinates side by side."""
        b, g, n, r = through_v.shape
        side = lambda t: t.transpose(1, 2).reshape(b, n, g * r)
        stacked = lambda m: m.transpose(1, 2).reshape(g * r, self.width)
        return side(through_v) @ stacked(self.u) + side(through_u) @ stacked(self.v)

    def apply_sum(self, y):
        """`sum_g P_g y_g`: `[B, G, N, D]` to `[B, N, D]`."""
        s = self.diagonal()
        out = y.sum(1) if s is None else (y * s.unsqueeze(1).unsqueeze(0)).sum(1)
        if self.u is not None:
            out = out + self.low_rank_sum(y @ self.v, y @ self.u)
        return out

    def apply_through_heads(self, o, w):
        """Eq. 14: `sum_k P_k W_k^Q^T o_k` for head outputs `o` `[B, K, N, D_r]`, `w` = W^Q `[D, K D_r]`."""
        b, k, n, head_dim = o.shape
        merged = o.transpose(1, 2).reshape(b, n, k * head_dim)
        w_heads = w.t().reshape(k, head_dim, self.width)  # W_k^Q, [K, D_r, D]
        s = self.diagonal()
        scaled = w_heads if s is None else w_heads * s.unsqueeze(1)
        out = merged @ scaled.reshape(k * head_dim, self.width)
        if self.u is not None:  # V_k^T W_k^T o_k = o_k (W_k V_k)
            out = out + self.low_rank_sum(o @ (w_heads @ self.v), o @ (w_heads @ self.u))
        return out


class Alibi(nn.Module):
    """Appendix B: `b_ijk = -m_k |i - j| + b_self,k [i = j] + b_cross,k [i != j]`, `m_k = 2^(-8k/K)`."""

    def __init__(self, heads):
        super().__init__()
        self.slopes = [2.0 ** (-8.0 * k / heads) for k in range(1, heads + 1)]
        self.self_bias = nn.Parameter(torch.zeros(heads))
        self.cross_bias = nn.Parameter(torch.zeros(heads))

    def forward(self, n):
        heads = len(self.slopes)
        i = torch.arange(n, device=DEVICE)
        distance = (i[:, None] - i[None, :]).abs().to(torch.float64).float().unsqueeze(0)
        slopes = torch.tensor(self.slopes, dtype=torch.float64, device=DEVICE).float().view(heads, 1, 1)
        eye = torch.eye(n, device=DEVICE).unsqueeze(0)
        penalty = -(slopes * distance)
        return penalty + self.self_bias.view(heads, 1, 1) * eye + self.cross_bias.view(heads, 1, 1) * (1.0 - eye)


class CemAttention(nn.Module):
    """Eq. 16: `x <- x + eta sum_k P_k (W_k^Q^T o_k [+ d_k o sum_j softmax_j hn_j])`, `u = RMSNorm(x)`."""

    def __init__(self, o):
        super().__init__()
        d, heads = o["d"], o["heads"]
        self.heads, self.head_dim = heads, d // heads
        self.tau = math.sqrt(d) if o["attn_scale"] == "model" else math.sqrt(d // heads)
        self.steps, self.step_size, self.diag_value = o["attn_steps"], o["attn_step_size"], o["diag_value"]
        self.norm = nn.Parameter(torch.ones(d))  # shared by the pre-norm (keys) and the in-loop norm
        self.w_q = nn.Parameter(normal_(torch.empty(d, d), o["init_std"]))  # W^O = W^Q (Eq. 5)
        self.w_k = nn.Parameter(normal_(torch.empty(d, d), o["init_std"]))  # W^V = W^K (Eq. 5)
        rows = {"none": 0, "shared": 1, "per_head": heads}[o["kq_diagonal"]]
        self.kq_diag = nn.Parameter(torch.zeros(rows, d)) if rows else None  # diag(d_k) of Eq. 12
        self.alibi = Alibi(heads) if o["alibi"] else None
        self.precond = Preconditioner(o["preconditioner"], heads, d, o["precond_rank"])

    def split_heads(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, h, causal):
        n = h.shape[1]
        # the context, fixed across steps: hn, keys (= values), diag(d) hn, score bias
        hn = rms_norm(h, self.norm, RMS_EPS)
        keys = self.split_heads(hn @ self.w_k)
        diag_keys = None if self.kq_diag is None else hn.unsqueeze(1) * self.kq_diag.unsqueeze(1)
        bias = None if self.alibi is None else self.alibi(n)
        if causal:  # -inf above the diagonal: the sums over j <= i of Eq. 1
            mask = causal_mask(n).unsqueeze(0)
            bias = mask if bias is None else bias + mask
        x = h
        for _ in range(self.steps):
            u = rms_norm(x, self.norm, RMS_EPS)
            # a_ijk = (q . k + hn^T diag(d) u) / tau + b_ijk (Eq. 1, Appendix B)
            scores = self.split_heads(u @ self.w_q) @ keys.transpose(-1, -2)
            if diag_keys is not None:
                scores = scores + u.unsqueeze(1) @ diag_keys.transpose(2, 3)
            scores = scores / self.tau
            if bias is not None:
                scores = scores + bias
            weights = torch.softmax(scores, -1)
            z = self.precond.apply_through_heads(weights @ keys, self.w_q)  # Eq. 2, 14
            if self.diag_value and self.kq_diag is not None:  # the diagonal's share of beta_kj
                mixed = weights @ hn.unsqueeze(1)
                z = z + self.precond.apply_sum(mixed * self.kq_diag.unsqueeze(1))
            x = x + z * self.step_size
        return x


class CemMlp(nn.Module):
    """Eq. 17: `x <- x + eta P_mlp V^T (gamma o SiLU(V RMSNorm(x)))`, `gamma = W RMSNorm(h)` (Eq. 7-8, 11)."""

    def __init__(self, o):
        super().__init__()
        d, width = o["d"], round(o["mlp_ratio"] * o["d"])
        self.steps, self.step_size = o["mlp_steps"], o["mlp_step_size"]
        self.norm = nn.Parameter(torch.ones(d))
        self.w = nn.Parameter(normal_(torch.empty(d, width), o["init_std"]))
        self.v = nn.Parameter(normal_(torch.empty(d, width), o["init_std"]))
        self.precond = Preconditioner(o["preconditioner"], 1, d, o["mlp_precond_rank"])

    def forward(self, h):
        gamma = rms_norm(h, self.norm, RMS_EPS) @ self.w
        x = h
        for _ in range(self.steps):
            u = rms_norm(x, self.norm, RMS_EPS)
            direction = (gamma * F.silu(u @ self.v)) @ self.v.t()  # -d xi / d u (Eq. 8)
            x = x + self.precond.apply_sum(direction.unsqueeze(1)) * self.step_size  # Eq. 15
        return x


class CemBlock(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.attn = CemAttention(o) if o["attention"] else None
        self.mlp = CemMlp(o)

    def forward(self, h, causal):
        return self.mlp(h if self.attn is None else self.attn(h, causal))


class Cem(nn.Module):
    def __init__(self, options, causal):
        super().__init__()
        self.width, self.causal, self.iterations = options["d"], causal, options["iterations"]
        self.blocks = nn.ModuleList(CemBlock(options) for _ in range(options["layers"]))

    def forward(self, x0):
        x = x0
        for block in block_schedule(self.iterations, self.blocks):
            x = block(x, self.causal)
        return x


def build_layer(options, causal):
    return Cem(options, causal)
