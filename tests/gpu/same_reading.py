"""Two chats' attention events (--attention 1 --events), the CPU's and a GPU's: the same spans at
each, and the mean and max weights within LIMIT. Prints one line: "ok N events, largest difference
D" or "FAIL why". Plain Python: a GPU machine may have no NumPy.
usage: same_reading.py CPU_EVENTS GPU_EVENTS LIMIT"""
import json
import sys


def reading(path):
    return [e for e in map(json.loads, open(path)) if e["ev"] == "attention"]


want, got, limit = reading(sys.argv[1]), reading(sys.argv[2]), float(sys.argv[3])
worst = 0.0
if not want or len(want) != len(got):
    print("FAIL %d attention events on the GPU, %d on the CPU" % (len(got), len(want)))
    sys.exit(0)
for i, (w, g) in enumerate(zip(want, got)):
    if w["spans"] != g["spans"]:
        print("FAIL event %d: spans %s on the GPU, %s on the CPU" % (i, g["spans"], w["spans"]))
        sys.exit(0)
    for k in ("mean", "max"):
        worst = max([worst] + [abs(a - b) for a, b in zip(w[k], g[k])])
print("%s %d events, largest difference %.3g (limit %g)"
      % ("ok" if worst <= limit else "FAIL", len(want), worst, limit))
