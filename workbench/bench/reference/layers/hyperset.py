# The `hyperset` layer (plugins/hyperset), default form: seed 000 Eq. 9 and 11 with the
# step-size network of Eq. 12 ("plain" form), bi-softmax attention on RMS-normalised
# projections of one shared W, ReLU feedforward with tied D.


class StepSizeNet(nn.Module):
    """Eq. 12, plain form: e = Linear(GELU(Linear(sinusoid(t)))), [alpha, gamma] = Linear(GELU(e + X0))."""

    def __init__(self, d, time_dim, std):
        super().__init__()
        self.time_dim = time_dim
        self.time_in = nn.Linear(time_dim, d)
        self.time_out = nn.Linear(d, d)
        self.out = nn.Linear(d, 2 * d)
        for lin, init_std in ((self.time_in, std), (self.time_out, std), (self.out, 0.0)):
            normal_(lin.weight, init_std)
            nn.init.zeros_(lin.bias)

    def forward(self, t, cond):
        e = self.time_out(F.gelu(self.time_in(sinusoid(t, self.time_dim))))
        return self.out(F.gelu(cond + e)).chunk(2, dim=-1)


class HyperSet(nn.Module):
    def __init__(self, options):
        super().__init__()
        d, std = options["d"], options["init_std"]
        ff_width = options["ff_ratio"] * d
        self.width, self.heads, self.iterations, self.eps = d, options["heads"], options["iterations"], options["norm_eps"]
        self.w = nn.Parameter(normal_(torch.empty(d, d), std))
        self.d_ff = nn.Parameter(normal_(torch.empty(d, ff_width), std))
        self.attn_norm = nn.Parameter(torch.ones(d // self.heads))
        self.ff_norm = nn.Parameter(torch.ones(ff_width))
        self.step = StepSizeNet(d, options["time_dim"], std)

    def attention_update(self, x):
        b, n, d = x.shape
        p = d // self.heads
        z = rms_norm((x @ self.w).view(b, n, self.heads, p).transpose(1, 2), self.attn_norm, self.eps)
        a = (z @ z.transpose(-1, -2)) / math.sqrt(p)
        mixed = (torch.softmax(a, -1) + torch.softmax(a, -2)) @ z  # Eq. 7-9
        return mixed.transpose(1, 2).reshape(b, n, d) @ self.w.t()

    def feedforward_update(self, x):
        return torch.relu(rms_norm(x @ self.d_ff, self.ff_norm, self.eps)) @ self.d_ff.t()

    def forward(self, x0):
        x = x0
        for t in range(1, self.iterations + 1):
            alpha, gamma = self.step(float(t), x0)
            x = x - alpha * self.attention_update(x)  # Eq. 9
            x = x + gamma * self.feedforward_update(x)  # Eq. 11
        return x


def build_layer(options, causal):
    if causal:
        raise SystemExit("the hyperset reference has no causal form (its bi-softmax attention is symmetric)")
    return HyperSet(options)
