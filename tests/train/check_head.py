#!/usr/bin/env python3
"""train.py's chunked LM head against autograd on the plain expression (the logits of every row,
then cross-entropy): the same loss and the same gradient of every parameter, on a tiny model with
chunks that do not divide the rows. Prints the differences; exits 1 past 1e-6 of the loss
(relative) or 1e-5 of a gradient."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

torch.manual_seed(0)
m = train.GPT2(2, 32, 2, 16)
x = torch.randint(0, train.VOCAB, (3, 17))
mine = m.loss(x[:, :-1], x[:, 1:], chunk=7)
mine.backward()
grads = [p.grad.clone() for p in m.parameters()]
m.zero_grad()
h = m.hidden(x[:, :-1]).reshape(-1, 32)
plain = F.cross_entropy(h @ m.wte.t(), x[:, 1:].reshape(-1))
plain.backward()
worst = max((g - p.grad).abs().max().item() for g, p in zip(grads, m.parameters()))
rel = abs(mine.item() - plain.item()) / plain.item()
print("loss %.6f = %.6f (relative %.1g), gradients within %.2g" % (mine.item(), plain.item(), rel,
                                                                    worst))
sys.exit(int(rel > 1e-6 or worst > 1e-5))
