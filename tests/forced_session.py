"""A session for teacher forcing (kvchat replay FILE --verify --dump-logits OUT): two conversations
taking turns, each reply a given list of token ids, long enough to evict in a small window; replayed
with a small --cache-mem, the conversations also go to host memory and come back. Only the recorded
ids matter, not what a model would choose: both backends are fed them.
usage: forced_session.py SESSION_WITH_THE_MODELS_HEADER OUT [WEIGHTS_DTYPE [TOKENS_A_REPLY]]"""
import json
import sys

header = json.loads(open(sys.argv[1]).readline())
N = int(sys.argv[4]) if len(sys.argv) > 4 else 48
header["sampling"]["n_predict"] = N
if len(sys.argv) > 3 and sys.argv[3]:  # --verify runs with the recorded settings, the weight dtype among them
    header["weights_dtype"] = sys.argv[3]
# the GPU check's --cache-mem sizes assume f32 rows: a pool smaller than the two windows, so one
# conversation has to go to host memory (with the default f16 rows both would fit)
header["cache"]["dtype"] = "f32"
header["chat"].update({"template": "none", "keep": 0, "evict_min": 16, "evict": "exact"})
sampling = dict(header["sampling"])
events, t = [], 0.0


def ev(kind, conv, **fields):
    global t
    t += 0.001
    events.append(dict({"ev": kind, "conv": conv, "t": round(t, 3)}, **fields))


ev("new", 1)
ev("new", 2)
for turn in range(6):
    conv = 1 + turn % 2
    ev("user", conv, text="message number %d" % turn)
    for k in range(N):
        ev("token", conv, id=(turn * 997 + k * 7919 + 13) % 50000 + 1, ms=1.0, text="")
    ev("turn_end", conv, reply="", tokens=N, cancelled=False, failed=False, window=[], turns=[], keep=0, rng="0",
       sampling=sampling, n_predict=N, approximate=False)
with open(sys.argv[2], "w") as f:
    for e in [header] + events:
        f.write(json.dumps(e) + "\n")
