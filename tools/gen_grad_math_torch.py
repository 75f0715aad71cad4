#!/usr/bin/env python3
"""Writes tests/grad_math_torch.h: PyTorch's gradients of cross_entropy
(float64) for the cases test_grad_math.c checks keel's
SoftmaxCrossEntropyLoss and LogSoftmax + NegativeLogLikelihoodLoss rules
against. The inputs and R (L = sum(loss * R), as tests/gradcheck.h
weights it) are rebuilt here from the same formulas as in the C test.

    /usr/bin/python3 tools/gen_grad_math_torch.py > tests/grad_math_torch.h
"""
import math

import torch

X = [2.9 * math.sin(0.9 * i + 0.3) + 0.01 * i for i in range(24)]
T6 = [1, 0, 3, 2, 3, 1]
T4 = [2, 0, 1, 2]
W = [0.7, 1.3, 0.9, 1.6]


def r_of(n):
    return torch.tensor([0.5 + 0.37 * math.sin(1.3 * i + 0.2) for i in range(n)], dtype=torch.float64)


def grad(shape, target, tshape, weight, ignore, reduction):
    x = torch.tensor(X[: math.prod(shape)], dtype=torch.float64).reshape(shape).requires_grad_()
    t = torch.tensor(target, dtype=torch.int64).reshape(tshape)
    w = torch.tensor(W[: shape[1]], dtype=torch.float64) if weight else None
    loss = torch.nn.functional.cross_entropy(x, t, weight=w, ignore_index=ignore, reduction=reduction)
    (loss * r_of(loss.numel()).reshape(loss.shape)).sum().backward()
    return x.grad.flatten().tolist()


def main():
    print("/* tests/grad_math_torch.h: written by tools/gen_grad_math_torch.py (PyTorch %s);"
          % torch.__version__.split("+")[0])
    print(" * do not edit. d(sum(cross_entropy(x, t) * R))/dx in float64. */")
    print("typedef struct torch_ce { int nd, weight, ignore; const char *reduction; double dx[24]; } torch_ce;")
    print("static const torch_ce TORCH_CE[] = {")
    for nd in (2, 3):
        for weight in (0, 1):
            for ignore in (-100, 3 if nd == 2 else 0):
                for red in ("none", "sum", "mean"):
                    if nd == 2:
                        g = grad([6, 4], T6, [6], weight, ignore, red)
                    else:
                        g = grad([2, 3, 2], T4, [2, 2], weight, ignore, red)
                    vals = ", ".join("%.17g" % v for v in g)
                    print('    {%d, %d, %d, "%s", {%s}},' % (nd, weight, ignore, red, vals))
    print("};")


main()
