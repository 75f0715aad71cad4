#!/usr/bin/env /usr/bin/python3
"""The GPT of tests/gpt (issue 12: keel shard), exported from PyTorch.

A GPT-2-style decoder: token and position embeddings, 4 pre-LayerNorm
blocks (8 heads, hidden 256, causal self-attention with separate q, k, v
projections, a GELU MLP of 1024), a final LayerNorm and an LM head, vocab
256. Two models:
  plain/  logits = gpt(tokens)                       (torch.onnx.export, traced)
  loop/   tokens, logits = greedy(tokens, n)         (torch.jit.script: a Loop
          that runs the whole decoder once per new token, appending argmax)
Weights come from tools/gpt_weights.py (a seeded numpy generator); the
.onnx files keep them as external data (weights.bin, ~13 MB, written at
test time by gpt_weights.py from weights.txt, not committed). Expected
outputs are PyTorch's, in test_data_set_0.

Run: /usr/bin/python3 tools/gen_gpt.py   (python3-torch, python3-onnx)
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_weights  # noqa: E402

OUT = os.environ.get("KEEL_GPT_OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpt")
VOCAB, HIDDEN, HEADS, BLOCKS, MLP, MAXPOS = 256, 256, 8, 4, 1024, 64
KV_HEADS = 4  # the gqa/ models' key/value heads


def repeat_kv(h, n_rep: int):
    """[B, n_kv, T, D] -> [B, n_kv * n_rep, T, D], as Hugging Face's Llama
    writes it (the export: Shape/Gather of h, Unsqueeze, Expand, Reshape)."""
    b, n, s, d = h.shape
    return h[:, :, None, :, :].expand(b, n, n_rep, s, d).reshape(b, n * n_rep, s, d)


class Attention(torch.nn.Module):
    def __init__(self, kv_heads: int = HEADS):
        super().__init__()
        hd = HIDDEN // HEADS
        self.q = torch.nn.Linear(HIDDEN, HIDDEN)
        self.k = torch.nn.Linear(HIDDEN, kv_heads * hd)
        self.v = torch.nn.Linear(HIDDEN, kv_heads * hd)
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)
        self.nh = HEADS
        self.nkv = kv_heads  # fewer than nh: grouped-query attention (gqa/ models)
        self.dynamic_mask = False  # True for the dynmask/ models
        self.register_buffer("mask", torch.tril(torch.ones(MAXPOS, MAXPOS)).view(1, 1, MAXPOS, MAXPOS))

    def forward(self, x):
        B, T, C = x.size()
        q = self.q(x).view(B, T, self.nh, C // self.nh).transpose(1, 2)
        k = self.k(x).view(B, T, self.nkv, C // self.nh).transpose(1, 2)
        v = self.v(x).view(B, T, self.nkv, C // self.nh).transpose(1, 2)
        return self.attend(q, k, v, B, T, C)

    def attend(self, q, k, v, B: int, T: int, C: int):
        """[B, heads, T, D] q, k, v (k and v of nkv heads) -> the projected output."""
        if self.nkv != self.nh:
            k = repeat_kv(k, self.nh // self.nkv)
            v = repeat_kv(v, self.nh // self.nkv)
        att = (q @ k.transpose(-2, -1)) * (1.0 / float(C // self.nh) ** 0.5)
        if self.dynamic_mask:
            # the mask from the input length, as most GPT code writes it:
            # Shape -> ConstantOfShape [T, T] -> Trilu in the export
            att = att + torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        else:
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class FusedAttention(Attention):
    """q, k and v from one projection split into unequal parts (GQA), as
    Phi-3's qkv_proj writes it."""

    def __init__(self, kv_heads: int):
        super().__init__(kv_heads)
        del self.q, self.k, self.v
        self.qkv = torch.nn.Linear(HIDDEN, HIDDEN + 2 * kv_heads * (HIDDEN // HEADS))

    def forward(self, x):
        B, T, C = x.size()
        hd = C // self.nh
        q, k, v = self.qkv(x).split([HIDDEN, self.nkv * HIDDEN // HEADS, self.nkv * HIDDEN // HEADS], dim=-1)
        q = q.view(B, T, self.nh, hd).transpose(1, 2)
        k = k.view(B, T, self.nkv, hd).transpose(1, 2)
        v = v.view(B, T, self.nkv, hd).transpose(1, 2)
        return self.attend(q, k, v, B, T, C)


class Block(torch.nn.Module):
    def __init__(self, kv_heads: int = HEADS, fused: bool = False):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(HIDDEN)
        self.attn = FusedAttention(kv_heads) if fused else Attention(kv_heads)
        self.ln2 = torch.nn.LayerNorm(HIDDEN)
        self.fc = torch.nn.Linear(HIDDEN, MLP)
        self.act = torch.nn.GELU()
        self.out = torch.nn.Linear(MLP, HIDDEN)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, kv_heads: int = HEADS, fused: bool = False):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, HIDDEN)
        self.wpe = torch.nn.Embedding(MAXPOS, HIDDEN)
        self.blocks = torch.nn.ModuleList([Block(kv_heads, fused) for _ in range(BLOCKS)])
        self.ln_f = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        x = self.wte(tokens)
        # positions 0..T-1 as a Slice of the table (the exporter folds an
        # arange over the tokens' size to the first iteration's length)
        x = x + self.wpe.weight[: x.size(1)]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class Greedy(torch.nn.Module):
    """Greedy decoding: n times, the whole decoder on the tokens so far,
    then the argmax of the last position's logits appended."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt
        self.vocab = VOCAB

    def forward(self, tokens, n: int):
        logits = torch.zeros(1, self.vocab)
        for _ in range(n):
            logits = self.gpt(tokens)[:, -1, :]
            nxt = logits.argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], 1)
        return tokens, logits


def seeded_gpt(kv_heads=HEADS, fused=False):
    torch.manual_seed(0)
    m = GPT(kv_heads, fused).eval()
    for name, p in m.named_parameters():
        p.data = torch.from_numpy(gpt_weights.param(name, list(p.shape)))
    return m


def externalize(path, model_torch, listing):
    """Initializers equal to a torch parameter (or its transpose) move to
    weights.bin; weights.txt lists them in file order for gpt_weights.py."""
    params = {n: p.detach().numpy() for n, p in model_torch.named_parameters()}
    m = onnx.load(path)
    lines, offset = [], 0
    inits = [t for t in m.graph.initializer]
    for g in [m.graph] + [a.g for n in m.graph.node for a in n.attribute if a.g.name]:
        pass
    for t in inits:
        a = numpy_helper.to_array(t)
        hit = None
        for n, p in params.items():
            if p.shape == a.shape and np.array_equal(p, a):
                hit = (n, 0)
            elif p.ndim == 2 and p.T.shape == a.shape and np.array_equal(p.T, a):
                hit = (n, 1)
            if hit:
                break
        if not hit:
            continue
        nbytes = a.size * 4
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(nbytes))):
            e = t.external_data.add()
            e.key, e.value = k, v
        lines.append(f"{t.name} {hit[0]} {hit[1]} {' '.join(str(d) for d in a.shape)}")
        offset += nbytes
    onnx.save(m, path)
    with open(listing, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{path}: {len(lines)} initializers external, {offset} bytes; inline {os.path.getsize(path)} bytes")


def save_pb(d, kind, i, name, a):
    with open(os.path.join(d, "test_data_set_0", f"{kind}_{i}.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.asarray(a), name).SerializeToString())


def export(name, module, args, input_names, output_names, script):
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    path = os.path.join(d, "model.onnx")
    mod = torch.jit.script(module) if script else module
    with torch.no_grad():
        expected = mod(*args)
        if not isinstance(expected, tuple):
            expected = (expected,)
        torch.onnx.export(mod, args, path, opset_version=17, input_names=input_names,
                          output_names=output_names, do_constant_folding=True,
                          dynamic_axes={input_names[0]: {1: "T"}} if not script else None)
    gpt = module if isinstance(module, GPT) else module.gpt
    externalize(path, gpt, os.path.join(d, "weights.txt"))
    for i, a in enumerate(args):
        save_pb(d, "input", i, input_names[i], a.numpy() if isinstance(a, torch.Tensor) else np.array(a, np.int64))
    for i, e in enumerate(expected):
        save_pb(d, "output", i, output_names[i], e.numpy())
    return expected


def main():
    gpt = seeded_gpt()
    tokens = torch.tensor([[3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62, 64, 33, 83, 27, 95]], dtype=torch.long)
    export("plain", gpt, (tokens,), ["tokens"], ["logits"], False)
    out = export("loop", Greedy(gpt), (tokens[:, :5], 8), ["tokens", "n"], ["generated", "logits"], True)
    print("generated", out[0].tolist())
    # the same weights with the causal mask computed from the length
    # (issue 24): dynmask/ (traced, T dynamic) and dynmask_loop/ (scripted)
    for b in gpt.blocks:
        b.attn.dynamic_mask = True
    export("dynmask", gpt, (tokens,), ["tokens"], ["logits"], False)
    out = export("dynmask_loop", Greedy(gpt), (tokens[:, :5], 8), ["tokens", "n"], ["generated", "logits"], True)
    print("generated (dynamic mask)", out[0].tolist())
    # grouped-query attention (issue 24): 8 query heads, 4 key/value heads,
    # repeat_kv as Llama writes it, the causal mask from the length
    gqa = seeded_gpt(KV_HEADS)
    for b in gqa.blocks:
        b.attn.dynamic_mask = True
    export("gqa", gqa, (tokens,), ["tokens"], ["logits"], False)
    out = export("gqa_loop", Greedy(gqa), (tokens[:, :5], 8), ["tokens", "n"], ["generated", "logits"], True)
    print("generated (gqa)", out[0].tolist())
    # the same with q, k and v in one projection split into unequal parts
    fused = seeded_gpt(KV_HEADS, fused=True)
    for b in fused.blocks:
        b.attn.dynamic_mask = True
    export("gqa_fused", fused, (tokens,), ["tokens"], ["logits"], False)
    # multi-query attention: one key/value head for the 8 query heads, which
    # keel shard replicates on every rank
    mqa = seeded_gpt(1)
    for b in mqa.blocks:
        b.attn.dynamic_mask = True
    export("mqa", mqa, (tokens,), ["tokens"], ["logits"], False)


if __name__ == "__main__":
    main()
