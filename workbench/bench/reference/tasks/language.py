# The `language` task (plugins/language) with its defaults: byte tokens (vocabulary 256),
# learnable token and position tables, RMSNorm + Linear head (or the token table, tied),
# mean next-token cross-entropy. The layer runs causally.

BYTE_VOCABULARY = 256


class LanguageModel(nn.Module):
    def __init__(self, options, layer, inputs):
        super().__init__()
        d, std, n = layer.width, options["init_std"], options["seq_len"]
        self.layer = layer
        self.tokens = nn.Parameter(normal_(torch.empty(BYTE_VOCABULARY, d), std))
        if options["positions"] == "learned":
            self.positions, self.token_scale = nn.Parameter(normal_(torch.empty(n, d), std)), 1.0
        else:
            i = torch.arange(n, dtype=torch.float64)[:, None]
            k = (torch.arange(d) // 2).double()[None, :]
            angle = i * torch.pow(10_000.0, -2.0 * k / d)
            table = torch.where(torch.arange(d) % 2 == 0, torch.sin(angle), torch.cos(angle)).float()
            self.register_buffer("positions", table)
            self.token_scale = math.sqrt(d)
        self.head_norm = nn.Parameter(torch.ones(d))
        self.head = None if options["tie_embeddings"] else nn.Parameter(normal_(torch.empty(d, BYTE_VOCABULARY), std))

    def loss(self, ids, targets):
        n = ids.shape[1]
        x = self.tokens[ids]
        if self.token_scale != 1.0:
            x = x * self.token_scale
        h = self.layer(x + self.positions[:n])
        normed = rms_norm(h, self.head_norm, 1e-6).reshape(-1, h.shape[-1])
        logits = normed @ (self.tokens.t() if self.head is None else self.head)
        return F.cross_entropy(logits, targets.reshape(-1))


def build_task(options, layer, inputs):
    return LanguageModel(options, layer, inputs)


def make_batch(options, inputs):
    return torch.randint(0, BYTE_VOCABULARY, tuple(inputs)), torch.randint(0, BYTE_VOCABULARY, tuple(inputs))
