# The `intrinsic` layer (plugins/intrinsic): seed 001, Transformers as intrinsic optimizers.
# GPT-2 style pre-norm blocks (LayerNorm or RMSNorm, biases, tanh-GELU MLP) whose attention is
# one optimiser step on an energy: softmax (Eq. 6), linear (Eq. 3), gated linear (Eq. 4),
# MomenMHA (Eq. 8), NagMHA (Eq. 9), MHA2nd1st / MHA2nd (Eq. 21-24), LightMHA2nd1st (A.3.2);
# k blocks, each iterated L / k times, one momentum buffer through every sub-layer.
# Weights are [in, out] (y = x W + b), N(0, init_std^2); biases zeros; as the plugin's Affine.

NORM_EPS = 1e-5  # ops.rs NORM_EPS, both pre-norms
SOFTMAX_SCORED = ("softmax", "momentum", "nesterov", "light_newton")  # key bias inert: none


def weight(fan_in, fan_out, std):
    return nn.Parameter(normal_(torch.empty(fan_in, fan_out), std))


def const(shape, value):
    return nn.Parameter(torch.full((shape,) if isinstance(shape, int) else shape, float(value)))


class Affine(nn.Module):
    """`x W + b` (ops.rs `Affine`)."""

    def __init__(self, fan_in, fan_out, std, bias):
        super().__init__()
        self.weight = weight(fan_in, fan_out, std)
        self.bias = nn.Parameter(torch.zeros(fan_out)) if bias else None

    def forward(self, x):
        y = x @ self.weight
        return y if self.bias is None else y + self.bias


class Norm(nn.Module):
    """LayerNorm `(x - mean) / sqrt(var + eps) * g + b` or RMSNorm `x / sqrt(mean(x^2) + eps) * g` (ops.rs `Norm`)."""

    def __init__(self, kind, d, bias):
        super().__init__()
        self.kind = kind
        self.gain = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias and kind == "layer" else None

    def forward(self, x):
        if self.kind == "rms":
            y = rms_norm(x, self.gain, NORM_EPS)
        else:
            centred = x - x.mean(-1, keepdim=True)
            var = centred.pow(2).mean(-1, keepdim=True)
            y = centred / torch.sqrt(var + NORM_EPS) * self.gain
        return y if self.bias is None else y + self.bias


def inverse(a):
    """ inverse.rs: `X0 = A^-1` outside the graph (f64), then one Newton-Schulz step `X0 (2I - A X0)`
    in it: the exact value and the exact derivative `-X0 dA X0`."""
    x0 = torch.linalg.inv(a.detach().double()).to(a.dtype)
    eye2 = 2.0 * torch.eye(a.shape[-1], dtype=a.dtype, device=DEVICE)
    return x0 @ (eye2 - a @ x0)


def softplus(x):
    """`max(x, 0) + log(1 + e^-|x|)` (gated_linear.rs)."""
    return torch.relu(x) + torch.log(torch.exp(-x.abs()) + 1.0)


class Attention(nn.Module):
    """The attention branch `f(z; H)` of one block (attention/mod.rs and one file per kind)."""

    def __init__(self, options):
        super().__init__()
        d, std, heads, bias = options["d"], options["init_std"], options["heads"], options["bias"]
        self.kind, self.heads, self.head_dim = options["attention"], heads, d // heads
        self.attn_dropout = options["attn_dropout"]
        key_bias = bias and self.kind not in SOFTMAX_SCORED
        self.q, self.k = Affine(d, d, std, bias), Affine(d, d, std, key_bias)
        self.v, self.o = Affine(d, d, std, bias), Affine(d, d, std, bias)
        if self.kind == "gated_linear":  # gate logits h_j w + c, [d] -> [H]
            self.gate_weight = weight(d, heads, std)
            self.gate_bias = const(heads, options["gate_bias"])
        elif self.kind == "newton":
            self.temperature = const(heads, math.sqrt(options["newton_temperature"] * self.head_dim))  # T_h
            self.b_form, self.full = options["newton_b_form"], options["newton"] == "full"
            self.b_coefficient = const(heads, options["newton_b_init"])  # c_h (b_scale) or T_b (b_temperature)
            self.ridge = options["newton_ridge"]
        elif self.kind == "light_newton":
            self.tau = const(heads, options["light_tau"])

    def split(self, x):  # [B, N, H d_h] -> [B, H, N, d_h]
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def output(self, heads):  # sum_h W_{O,h} o_h
        b, h, n, p = heads.shape
        return self.o(heads.transpose(1, 2).reshape(b, n, h * p))

    def per_head(self, v):  # [H] -> [1, H, 1, 1]
        return v.view(1, self.heads, 1, 1)

    def drop(self, p):  # attention dropout on the probabilities, training passes only (plugins/intrinsic/src/dropout.rs)
        return F.dropout(p, self.attn_dropout, training=self.training) if self.attn_dropout > 0.0 else p

    def forward(self, x, mask, tril):
        q, k = self.split(self.q(x)), self.split(self.k(x))
        if self.kind in ("softmax", "momentum", "nesterov"):
            return self.output(self.attention_weights(q, k, mask) @ self.split(self.v(x)))  # Eq. 6
        if self.kind == "light_newton":  # App. A.3.2
            v = self.split(self.v(x))
            p = self.attention_weights(q, k, mask)
            mean_value = p @ v
            spread = (p * (mean_value @ v.transpose(-1, -2))) @ v  # inner products first
            b = spread - mean_value * mean_value.pow(2).sum(-1, keepdim=True)  # Cov_h v^_h
            return self.output(mean_value + b * self.per_head(self.tau))
        if self.kind == "linear":  # Eq. 3, ((Q K^T) * M) V
            scores = q @ k.transpose(-1, -2)
            if tril is not None:
                scores = scores * tril
            return self.output(scores @ self.split(self.v(x)))
        if self.kind == "gated_linear":  # Eq. 4, gamma_{t,i} = exp(-|L_t - L_i|), L_t = sum_{j<=t} log alpha_j
            scores = q @ k.transpose(-1, -2)
            log_alpha = (-softplus(-(x @ self.gate_weight + self.gate_bias))).transpose(1, 2)  # [B, H, N]
            cumulative = log_alpha.cumsum(-1)
            gamma = torch.exp(-(cumulative.unsqueeze(3) - cumulative.unsqueeze(2)).abs())
            if tril is not None:
                gamma = gamma * tril
            return self.output((scores * gamma) @ self.split(self.v(x)))
        return self.newton(q, k, mask)

    def attention_weights(self, q, k, mask):  # softmax_i(q . k_i / T), T = sqrt(d_h) (Section 3.1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        return self.drop(torch.softmax(scores, -1))

    def newton(self, q, k, mask):
        """MHA2nd1st (Eq. 24) or MHA2nd (Eq. 21): `sum_h W_{O,h} (W_{V,h} M_h g_h + b_{V,h})`."""
        # Eq. 16: p = softmax(-||q - k_i||^2 / (2 T_h)), u = q - k^
        q_sq = q.pow(2).sum(-1, keepdim=True)
        k_sq = k.pow(2).sum(-1, keepdim=True).transpose(2, 3)
        sq_dist = (q @ k.transpose(-1, -2)) * -2.0 + q_sq + k_sq
        scores = sq_dist / (self.per_head(self.temperature) * -2.0)
        if mask is not None:
            scores = scores + mask
        weights = self.drop(torch.softmax(scores, -1))
        mean_key = weights @ k
        u = q - mean_key
        if self.full:  # Eq. 21: (I - c S)^-1 u, S = sum_i p k k^T - k^ k^T, per query and head
            c = self.per_head(self.b_coefficient)
            c = c if self.b_form == "multiplier" else c.reciprocal()
            b, h, n, dh = k.shape
            outer = lambda a: a.unsqueeze(4) * a.unsqueeze(3)
            second_moment = (weights @ outer(k).reshape(b, h, n, dh * dh)).reshape(b, h, n, dh, dh)
            covariance = second_moment - outer(mean_key)
            c_matrix = (torch.eye(dh, device=DEVICE) - covariance * c.unsqueeze(4)).reshape(b * h * n, dh, dh)
            direction = (inverse(c_matrix) @ u.reshape(b * h * n, dh, 1)).reshape(b, h, n, dh)
        else:  # Eq. 24: u + b_h, b_h = c_h [sum_i p k (k^T u) - k^ k^T u], inner products first
            spread = (weights * (u @ k.transpose(-1, -2))) @ k
            covariance_product = spread - mean_key * (mean_key * u).sum(-1, keepdim=True)
            if self.b_form == "multiplier":
                direction = u + covariance_product * self.per_head(self.b_coefficient)
            else:
                direction = u + covariance_product / self.per_head(self.b_coefficient)
        # Eq. 20-21: W_{V,h} M_h as a right factor, (W_{Q,h} W_{Q,h}^T + eps I)^-1 W_{Q,h} W_{V,h}^T
        d = self.q.weight.shape[0]
        head_columns = lambda w: w.reshape(d, self.heads, self.head_dim).transpose(0, 1)  # [H, d, d_h]
        w_q = head_columns(self.q.weight)
        w_q_t = w_q.transpose(1, 2)
        gram = w_q_t @ w_q
        if self.ridge > 0.0:
            gram = gram + torch.eye(self.head_dim, device=DEVICE) * self.ridge
        preconditioner = inverse(gram) @ (w_q_t @ head_columns(self.v.weight))
        out = direction @ preconditioner.unsqueeze(0)
        if self.v.bias is not None:
            out = out + self.v.bias.view(1, self.heads, 1, self.head_dim)
        return self.output(out)


class Block(nn.Module):
    """One pre-norm block: `z + f(norm(z))`, `z + g(norm(z))` (Section 2), or momentum (Eq. 8) /
    Nesterov (Eq. 9) steps sharing the buffer `m = -p` (block.rs)."""

    def __init__(self, options):
        super().__init__()
        d, std, bias, mlp_width = options["d"], options["init_std"], options["bias"], options["ff_ratio"] * options["d"]
        self.attn_norm = Norm(options["norm"], d, bias)
        self.attn = Attention(options)
        self.mlp_norm = Norm(options["norm"], d, bias)
        self.up, self.down = Affine(d, mlp_width, std, bias), Affine(mlp_width, d, std, bias)
        self.dropout = options["dropout"]
        self.residual = options["attention"] if options["attention"] in ("momentum", "nesterov") else "plain"
        if self.residual != "plain":  # learnable scalars [1] per sub-layer (Section 3.1)
            beta, eta = options["momentum_beta"], options["momentum_eta"]
            self.beta_attn, self.eta_attn = const(1, beta), const(1, eta)
            self.ffn = options["momentum_ffn"]
            if self.ffn:
                self.beta_ffn, self.eta_ffn = const(1, beta), const(1, eta)

    def drop(self, f):  # residual dropout on the branch output, training passes only
        return F.dropout(f, self.dropout, training=self.training) if self.dropout > 0.0 else f

    def attend(self, z, mask, tril):
        return self.drop(self.attn(self.attn_norm(z), mask, tril))

    def feed(self, z):  # W_2 GELU(W_1 x + b_1) + b_2, GELU in its tanh form (App. A.4)
        return self.drop(self.down(F.gelu(self.up(self.mlp_norm(z)), approximate="tanh")))

    def step(self, z, m, beta, eta, branch):
        if self.residual == "nesterov" and m is not None:
            f = branch(z + m * beta)  # Eq. 9: look-ahead z~ = z + beta m
        else:
            f = branch(z)
        m = f if m is None else m * beta + f  # m' = beta m + f
        return z + m * eta, m

    def forward(self, z, m, mask, tril):
        if self.residual == "plain":
            z = z + self.attend(z, mask, tril)
            return z + self.feed(z), None
        z, m = self.step(z, m, self.beta_attn, self.eta_attn, lambda x: self.attend(x, mask, tril))
        if self.ffn:
            return self.step(z, m, self.beta_ffn, self.eta_ffn, self.feed)
        return z + self.feed(z), m


class Intrinsic(nn.Module):
    def __init__(self, options, causal):
        super().__init__()
        self.width, self.iterations, self.causal = options["d"], options["iterations"], causal
        if options["d"] % options["heads"] or options["iterations"] % options["layers"]:
            raise SystemExit("intrinsic: heads must divide d and layers must divide iterations")
        if not 0.0 <= options["dropout"] < 1.0 or not 0.0 <= options["attn_dropout"] < 1.0:
            raise SystemExit("intrinsic: dropout and attn_dropout must lie in [0, 1)")
        if options["attn_dropout"] > 0.0 and options["attention"] in ("linear", "gated_linear"):
            raise SystemExit("intrinsic: attn_dropout needs attention probabilities; linear kinds have none")
        if options["attention"] == "newton" and options["init_std"] == 0.0 and options["newton_ridge"] == 0.0:
            raise SystemExit("intrinsic: attention=newton inverts W_Q,h W_Q,h^T: set init_std > 0 or newton_ridge > 0")
        if options["attention"] == "newton" and options["newton_b_form"] == "temperature" and options["newton_b_init"] <= 0.0:
            raise SystemExit("intrinsic: newton_b_form=temperature needs newton_b_init > 0")
        self.blocks = nn.ModuleList(Block(options) for _ in range(options["layers"]))

    def forward(self, x0):
        n = x0.shape[1]
        mask = tril = None
        if self.causal:  # additive -inf mask for the softmax scores, 0/1 lower triangle for the linear ones
            mask = causal_mask(n)
            tril = torch.ones(n, n, device=DEVICE).tril()
        z, m = x0, None  # p^(0) = 0
        for block in block_schedule(self.iterations, self.blocks):
            z, m = block(z, m, mask, tril)
        return z


def build_layer(options, causal):
    return Intrinsic(options, causal)
