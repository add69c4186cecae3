# The `sudoku` task (plugins/sudoku): learnable token and per-cell position embeddings,
# RMSNorm + Linear head, cross-entropy on the blank cells.


class SudokuModel(nn.Module):
    def __init__(self, options, layer):
        super().__init__()
        d, std = layer.width, options["init_std"]
        self.layer, self.eps = layer, options["norm_eps"]
        self.tokens = nn.Parameter(normal_(torch.empty(10, d), std))
        self.positions = nn.Parameter(normal_(torch.empty(81, d), std))
        self.head_norm = nn.Parameter(torch.ones(d))
        self.head = nn.Parameter(normal_(torch.empty(d, 9), std))

    def loss(self, boards, targets, blanks):
        h = self.layer(self.tokens[boards] + self.positions)
        logits = (rms_norm(h, self.head_norm, self.eps) @ self.head).reshape(-1, 9)
        nll = F.cross_entropy(logits, targets.reshape(-1), reduction="none")
        weights = blanks.reshape(-1)
        return (nll * weights).sum() / weights.sum().clamp_min(1e-12)


def build_task(options, layer, inputs):
    return SudokuModel(options, layer)


def make_batch(options, inputs):
    boards = torch.randint(0, 10, tuple(inputs))
    targets = torch.randint(0, 9, tuple(inputs))
    return boards, targets, (boards == 0).float()
