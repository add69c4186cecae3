# The `image` task (plugins/image-task), as seed 000's image-classification code: each patch
# through LayerNorm -> Linear -> LayerNorm, a learnable [CLS] token in front, fixed sinusoidal
# positions added, head LayerNorm -> Linear on the [CLS] output, cross-entropy with label
# smoothing. Linear layers and LayerNorms are PyTorch's defaults (eps 1e-5).

SHAPES_CLASSES = 10  # the generated `shapes` data set, the only one the reference models


class ImageModel(nn.Module):
    def __init__(self, options, layer, inputs):
        super().__init__()
        _, tokens, features = inputs
        d = layer.width
        self.layer, self.label_smoothing = layer, options["label_smoothing"]
        self.patch_norm = nn.LayerNorm(features)
        self.patch_projection = nn.Linear(features, d)
        self.token_norm = nn.LayerNorm(d)
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        rows = [sinusoid(float(t), d) for t in range(tokens + 1)]
        if d % 2 == 1:
            rows = [torch.cat([row, torch.zeros(1)]) for row in rows]
        self.register_buffer("positions", torch.stack(rows))
        self.head_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, SHAPES_CLASSES)

    def loss(self, patches, labels):
        tokens = self.token_norm(self.patch_projection(self.patch_norm(patches)))
        cls = self.cls.expand(tokens.shape[0], 1, -1)
        h = self.layer(torch.cat([cls, tokens], 1) + self.positions)
        logits = self.head(self.head_norm(h[:, 0]))
        return F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)


def build_task(options, layer, inputs):
    return ImageModel(options, layer, inputs)


def make_batch(options, inputs):
    return torch.rand(tuple(inputs)), torch.randint(0, SHAPES_CLASSES, (inputs[0],))
