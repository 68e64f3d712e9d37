#!/usr/bin/env python3
"""What train.py wrote is the model it trained: the logits of the trained model (train.pt, in
PyTorch) for IDS against the float64 NumPy GPT-2 reading OUT's config.json and model.safetensors
(tests/reference/gpt2_ref.py). The file is f16, so they agree to its rounding (relative L2 under
1e-2); a name, an orientation or a tie gone wrong differs by the order of 1.

usage: check_export.py OUT IDS"""
import json
import os
import sys

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "reference")]
import gpt2_ref  # noqa: E402
import train  # noqa: E402

out, ids = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]
cfg = json.load(open(os.path.join(out, "config.json")))
m = train.GPT2(cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["n_positions"])
m.load_state_dict(torch.load(os.path.join(out, "train.pt"))["model"])
with torch.no_grad():
    mine = (m.hidden(torch.tensor([ids]))[0, -1] @ m.wte.t()).double().numpy()
ref = gpt2_ref.GPT2(out).logits(ids)[-1]
err = np.linalg.norm(mine - ref) / np.linalg.norm(ref)
print("the trained model's logits = the written file's to %.2g (relative L2)" % err)
sys.exit(int(err > 1e-2))
