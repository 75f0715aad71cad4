"""The four training models of issue 11 and their batches, shared by
tests/train/gen.py (export + PyTorch reference training) and
bench/train_vs_torch.py (step time against PyTorch).

Each model is a torch.nn.Module whose forward(inputs..., targets) returns the
scalar loss, so the exported ONNX graph's output "loss" is what `keel train
--loss loss` minimises. Control flow is data-dependent but decided by the
input batch only (never by weights that training changes), and every batch
keeps its branch statistic well away from the threshold, so float rounding
in another implementation cannot flip a branch.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


# ------------------------------------------------------------- smoke test
class MLPPlain(nn.Module):
    """Not one of the issue's four: a straight-line MLP (MatMul, Add, Tanh,
    Sub, Mul, ReduceMean only, no control flow), so a trainer can be
    checked against PyTorch before If/Loop backward and Gemm/Conv rules
    exist, and a failure of mlp_if can be told apart from one of plain
    backward."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(8, 16) * 0.35)
        self.b1 = nn.Parameter(torch.randn(16) * 0.1)
        self.w2 = nn.Parameter(torch.randn(16, 4) * 0.25)
        self.b2 = nn.Parameter(torch.randn(4) * 0.1)

    def forward(self, x, y):
        h = torch.tanh(x @ self.w1 + self.b1)
        d = h @ self.w2 + self.b2 - y
        return (d * d).mean()


# ------------------------------------------------------------------ (a)
class MLPIf(nn.Module):
    """An MLP whose middle layer is chosen by a scripted, data-dependent
    `if` on the batch mean of the input: an ONNX If whose two branches use
    different parameters."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.pos = nn.Linear(16, 16)
        self.neg = nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x, y):
        h = torch.tanh(self.fc1(x))
        if bool(x.mean() > 0.0):
            h = torch.relu(self.pos(h)) + h
        else:
            h = torch.sigmoid(self.neg(h)) * h
        d = self.out(h) - y
        return (d * d).mean()


def mlp_batches(g, n):
    """Batch sizes 3..9; even batches shifted up, odd ones down (|mean| >=
    0.4 by construction, checked)."""
    teacher = torch.randn(8, 4, generator=g) * 0.5
    out = []
    for k in range(n):
        b = 3 + k % 7
        shift = 0.6 if k % 2 == 0 else -0.6
        x = torch.randn(b, 8, generator=g) * 0.5 + shift
        y = torch.tanh(x @ teacher) + 0.05 * torch.randn(b, 4, generator=g)
        out.append((x, y))
    return out


def mlp_branch(x, y):
    stat = float(x.mean())
    assert abs(stat) > 0.3, stat
    return "then" if stat > 0 else "else", stat


# ------------------------------------------------------------------ (b)
HID_B = 16


class RNNLoop(nn.Module):
    """An Elman RNN cell unrolled by a scripted `for` over the (dynamic)
    time axis: an ONNX Loop whose trip count is x's first dimension. The
    loss is accumulated at every step (a loop-carried value) and averaged."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, HID_B)
        self.rec = nn.Linear(HID_B, HID_B, bias=False)
        self.out = nn.Linear(HID_B, 3)
        self.hid = HID_B

    def forward(self, x, y):
        h = torch.zeros([x.size(1), self.hid])
        loss = torch.zeros([])
        for t in range(x.size(0)):
            h = torch.tanh(self.inp(x[t]) + self.rec(h))
            d = self.out(h) - y[t]
            loss = loss + (d * d).mean()
        return loss / float(x.size(0))


def rnn_batches(g, n):
    """Time length 3..10 and batch size 2..6, both varying per step; the
    target is a fixed leaky running sum of a projection of the input."""
    proj = torch.randn(4, 3, generator=g) * 0.6
    out = []
    for k in range(n):
        t_len = 3 + (k * 5) % 8
        b = 2 + (k * 3) % 5
        x = torch.randn(t_len, b, 4, generator=g)
        y = torch.zeros(t_len, b, 3)
        acc = torch.zeros(b, 3)
        for t in range(t_len):
            acc = 0.6 * acc + x[t] @ proj
            y[t] = torch.tanh(acc)
        out.append((x, y))
    return out


# ------------------------------------------------------------------ (c)
CLASSES_C = 5


class CNNBranch(nn.Module):
    """A small CNN: conv + max pool, then a branch chosen by the batch's
    standard deviation (a scripted `if`: an ONNX If holding a Conv on each
    side, one dilated, one strided-free residual), global average pool,
    linear, cross-entropy."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv_a = nn.Conv2d(8, 8, 3, padding=1)
        self.conv_b = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.conv2 = nn.Conv2d(8, 12, 3, stride=2, padding=1)
        self.fc = nn.Linear(12, CLASSES_C)

    def forward(self, x, target):
        h = torch.relu(F.max_pool2d(self.conv1(x), 2))
        if bool(x.std() > 1.0):
            h = torch.relu(self.conv_a(h))
        else:
            h = torch.relu(self.conv_b(h)) + h
        h = torch.relu(self.conv2(h))
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return F.cross_entropy(self.fc(h), target)


def cnn_batches(g, n):
    """1x12x12 images, batch 4..8; the class sets a blob's position, and
    batches alternate between a wide (std ~1.5) and a narrow (std ~0.6)
    scale so both branches train."""
    out = []
    yy, xx = torch.meshgrid(torch.arange(12.0), torch.arange(12.0), indexing="ij")
    centres = [(3, 3), (3, 8), (8, 3), (8, 8), (6, 6)]
    for k in range(n):
        b = 4 + k % 5
        target = torch.randint(0, CLASSES_C, (b,), generator=g)
        x = torch.randn(b, 1, 12, 12, generator=g) * 0.3
        for i in range(b):
            cy, cx = centres[int(target[i])]
            x[i, 0] += 2.0 * torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 4.0)
        x = (x - x.mean()) / x.std() * (1.5 if k % 2 == 0 else 0.6)
        out.append((x, target))
    return out


def cnn_branch(x, t):
    stat = float(x.std())
    assert abs(stat - 1.0) > 0.3, stat
    return "then" if stat > 1.0 else "else", stat


# ------------------------------------------------------------------ (d)
VOCAB_D, DIM_D, HEADS_D, SEQ_D, BLOCKS_D = 64, 32, 4, 16, 2


class Block(nn.Module):
    """Pre-LayerNorm causal self-attention block with a GELU MLP."""

    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM_D)
        # No key bias: its gradient is zero in exact arithmetic (softmax
        # ignores a per-query constant), so in float32 it is rounding noise
        # that Adam's normalisation turns into full-size steps.
        self.q = nn.Linear(DIM_D, DIM_D)
        self.k = nn.Linear(DIM_D, DIM_D, bias=False)
        self.v = nn.Linear(DIM_D, DIM_D)
        self.proj = nn.Linear(DIM_D, DIM_D)
        self.ln2 = nn.LayerNorm(DIM_D)
        self.fc1 = nn.Linear(DIM_D, 4 * DIM_D)
        self.fc2 = nn.Linear(4 * DIM_D, DIM_D)

    def forward(self, x, mask):
        b, t = x.shape[0], x.shape[1]
        hd = DIM_D // HEADS_D
        h = self.ln1(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        q = q.reshape(b, t, HEADS_D, hd).transpose(1, 2)
        k = k.reshape(b, t, HEADS_D, hd).transpose(1, 2)
        v = v.reshape(b, t, HEADS_D, hd).transpose(1, 2)
        att = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(hd))
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, DIM_D)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    """A causal transformer language model: token + position embeddings, 2
    blocks, final LayerNorm, untied head, next-token cross-entropy. The
    causal mask is computed in the graph from Range (no float buffer that a
    trainer could mistake for a parameter)."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB_D, DIM_D)
        self.pos = nn.Embedding(SEQ_D, DIM_D)
        self.blocks = nn.ModuleList([Block() for _ in range(BLOCKS_D)])
        self.ln_f = nn.LayerNorm(DIM_D)
        self.head = nn.Linear(DIM_D, VOCAB_D)
        # LayerNorm's ones/zeros would be identical tensors, which the
        # exporter merges into one initializer (tying them): perturb them.
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.add_(0.1 * torch.randn_like(m.weight))
                    m.bias.add_(0.1 * torch.randn_like(m.bias))

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        ar = torch.arange(t)
        mask = ar.unsqueeze(0) > ar.unsqueeze(1)
        x = self.tok(tokens) + self.pos(ar)
        for blk in self.blocks:
            x = blk(x, mask)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB_D), targets.reshape(-1))


def lm_batches(g, n):
    """Batch 2..4, length 8..16; sequences follow a fixed random bigram
    chain (next = perm[cur], one token in eight resampled), targets are the
    inputs shifted by one."""
    perm = torch.randperm(VOCAB_D, generator=g)
    out = []
    for k in range(n):
        b = 2 + k % 3
        t = 8 + (k * 3) % 9
        seq = torch.zeros(b, t + 1, dtype=torch.int64)
        seq[:, 0] = torch.randint(0, VOCAB_D, (b,), generator=g)
        for i in range(1, t + 1):
            nxt = perm[seq[:, i - 1]]
            noise = torch.rand(b, generator=g) < 0.125
            rnd = torch.randint(0, VOCAB_D, (b,), generator=g)
            seq[:, i] = torch.where(noise, rnd, nxt)
        out.append((seq[:, :t].contiguous(), seq[:, 1:].contiguous()))
    return out


# ----------------------------------------------------------- the table
# name -> everything gen.py and the bench need. `script`: export through
# torch.jit.script (control flow) or by tracing (no control flow).
MODELS = {
    "mlp_plain": dict(
        cls=MLPPlain, batches=mlp_batches, branch=None, script=False,
        inputs=["x", "y"], dynamic={"x": {0: "batch"}, "y": {0: "batch"}},
        optimizer="sgd", hyper=dict(lr=0.1), steps=40, nbatches=32, seed=10),
    "mlp_if": dict(
        cls=MLPIf, batches=mlp_batches, branch=mlp_branch, script=True,
        inputs=["x", "y"], dynamic={"x": {0: "batch"}, "y": {0: "batch"}},
        optimizer="sgd", hyper=dict(lr=0.1), steps=40, nbatches=32, seed=11),
    "rnn_loop": dict(
        cls=RNNLoop, batches=rnn_batches, branch=None, script=True,
        inputs=["x", "y"],
        dynamic={"x": {0: "time", 1: "batch"}, "y": {0: "time", 1: "batch"}},
        optimizer="momentum", hyper=dict(lr=0.05, momentum=0.9), steps=40, nbatches=32,
        seed=12),
    "cnn_branch": dict(
        cls=CNNBranch, batches=cnn_batches, branch=cnn_branch, script=True,
        inputs=["x", "target"], dynamic={"x": {0: "batch"}, "target": {0: "batch"}},
        optimizer="adam", hyper=dict(lr=0.03, beta1=0.9, beta2=0.999, eps=1e-8),
        steps=40, nbatches=32, seed=13),
    "transformer_lm": dict(
        cls=TinyLM, batches=lm_batches, branch=None, script=False,
        inputs=["tokens", "targets"],
        dynamic={"tokens": {0: "batch", 1: "seq"}, "targets": {0: "batch", 1: "seq"}},
        optimizer="adamw",
        hyper=dict(lr=0.003, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01),
        steps=40, nbatches=32, seed=14),
}


def make_optimizer(name, hyper, params):
    """PyTorch's optimizer for keel's --optimizer NAME and flags."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=hyper["lr"])
    if name == "momentum":
        return torch.optim.SGD(params, lr=hyper["lr"], momentum=hyper["momentum"])
    betas = (hyper["beta1"], hyper["beta2"])
    if name == "adam":
        return torch.optim.Adam(params, lr=hyper["lr"], betas=betas, eps=hyper["eps"],
                                weight_decay=hyper.get("weight_decay", 0.0))
    if name == "adamw":
        return torch.optim.AdamW(params, lr=hyper["lr"], betas=betas, eps=hyper["eps"],
                                 weight_decay=hyper["weight_decay"])
    raise ValueError(name)


def keel_flags(name, hyper):
    """The `keel train` flags for an optimizer (without --steps/--data)."""
    flags = ["--optimizer", name, "--lr", repr(hyper["lr"])]
    for key, flag in [("momentum", "--momentum"), ("beta1", "--beta1"), ("beta2", "--beta2"),
                      ("eps", "--eps"), ("weight_decay", "--weight-decay")]:
        if key in hyper:
            flags += [flag, repr(hyper[key])]
    return flags
