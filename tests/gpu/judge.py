"""The GPU check's verdicts (tests/gpu/check.sh runs the programs, this judges what they left).
Each command prints one line, "ok DETAIL", "FAIL DETAIL", "incomplete DETAIL" or "info DETAIL" (not
counted either way), and exits 0.

  judge.py sanitizer TOOL LOG RC   a compute-sanitizer run of the unit tests, by its summary lines,
                                   the tests' own verdicts and its exit status RC
  judge.py logits GPU CPU LIMIT [ROWS]
                                   two --dump-logits files: the worst relative L2 distance of a row
                                   (ROWS rows of the vocabulary each; one row when not given)
  judge.py ids GPU CPU N [16bit]   two lists of N token ids (generate --output ids): equal, or where
                                   they part; with 16bit, parting is "info" (a near-tie may flip
                                   between 16-bit products), though a short or missing list fails
  judge.py summary ROWS JSON SECONDS BUDGET PROCESSES
                                   the check's two verdicts from its rows (a line each:
                                   SECTION<TAB>VERDICT<TAB>NAME<TAB>DETAIL), printed, and written
                                   with every row to JSON: correctness (PASS when no row failed or
                                   is incomplete) and speed (the targets met and missed)
"""
import json
import os
import re
import sys

VOCAB = 50257
TIMED_OUT = ("124", "137")  # timeout(1)'s, and a kill after its grace period


def verdict(word, detail):
    print("%s %s" % (word, detail))
    sys.exit(0)


def sanitizer(tool, log, rc):
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    if rc in TIMED_OUT:
        verdict("incomplete", "stopped at its time limit, before its summary")
    if "COMPUTE-SANITIZER" not in text:
        first = (text.strip().splitlines() or ["no output"])[0][:80]
        detail = "compute-sanitizer did not run (exit %s): %s" % (rc, first)
        verdict("incomplete" if rc == "127" else "FAIL", detail)
    refused = re.search(r"Device not supported|not supported on this (?:device|platform)", text)
    if tool == "racecheck":
        found = re.findall(r"RACECHECK SUMMARY: (\d+) hazards? displayed "
                           r"\((\d+) errors?, (\d+) warnings?\)", text)
        counts = [sum(int(n) for n in f) for f in found]
        what = "hazards (errors, warnings)"
    else:
        found = re.findall(r"ERROR SUMMARY: (\d+) errors?", text)
        counts = [int(n) for n in found]
        what = "errors"
    if not found:
        if refused:
            verdict("incomplete", "compute-sanitizer could not check this device: "
                    + refused.group(0).strip())
        verdict("FAIL", "no %s summary (exit %s)" % (tool, rc))
    if any(counts):
        reports = re.findall(r"^=+ (?:Invalid|Race|Error|.*hazard).*$", text, re.M)
        lines = [m.strip("= \n") for m in reports[:2]]
        verdict("FAIL", "%d %s: %s" % (sum(counts), what, "; ".join(lines)))
    failed = re.findall(r"^FAIL (\S+)", text, re.M)
    if failed:
        verdict("FAIL", "the tests failed under the tool: %s" % ", ".join(failed))
    passed = re.search(r"^unit: (\d+) passed, 0 failed", text, re.M)
    if not passed or int(passed.group(1)) == 0:
        verdict("FAIL", "the tests did not finish (exit %s)" % rc)
    if rc != "0":
        verdict("FAIL", "exit %s with a clean summary" % rc)
    verdict("ok", "0 %s over %s tests" % (what, passed.group(1)))


def logits(gpu, cpu, limit, rows):
    import numpy as np
    for path in (gpu, cpu):
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            verdict("FAIL", "%s was not written" % os.path.basename(path))
    a = np.fromfile(gpu, "<f4").astype(np.float64)
    b = np.fromfile(cpu, "<f4").astype(np.float64)
    want = rows * VOCAB
    if a.size != want or b.size != want:
        verdict("FAIL", "%d and %d rows of logits, want %d"
                % (a.size // VOCAB, b.size // VOCAB, rows))
    a, b = a.reshape(rows, VOCAB), b.reshape(rows, VOCAB)
    if not np.isfinite(a).all():
        verdict("FAIL", "non-finite logits in row %d" % int(np.argmin(np.isfinite(a).all(axis=1))))
    errors = np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)
    worst = int(np.argmax(errors))
    detail = "worst rel L2 %.2e (row %d of %d)" % (errors[worst], worst, rows)
    verdict("ok" if errors[worst] < limit else "FAIL", detail)


def ids(gpu, cpu, n, ties):
    a, b = [open(p).read().split() if os.path.exists(p) else [] for p in (gpu, cpu)]
    if len(b) != n:
        verdict("FAIL", "the CPU gave %d ids, want %d" % (len(b), n))
    if len(a) != n:
        verdict("FAIL", "the GPU gave %d ids, want %d" % (len(a), n))
    same = 0
    while same < n and a[same] == b[same]:
        same += 1
    if same == n:
        verdict("ok", "identical")
    verdict("info" if ties else "FAIL", "the first %d of %d agree" % (same, n))


def summary(rows_path, out, seconds, budget, processes):
    keys = ("section", "verdict", "name", "detail")
    rows = [dict(zip(keys, line.rstrip("\n").split("\t", 3)))
            for line in open(rows_path) if line.strip()]
    count = {v: sum(r["verdict"] == v for r in rows)
             for v in ("ok", "FAIL", "incomplete", "met", "missed")}
    checked = count["ok"] + count["FAIL"] + count["incomplete"]
    correct = ("FAIL" if count["FAIL"] else "incomplete" if count["incomplete"]
               else "PASS" if checked else "not checked")
    missed = [r["name"] for r in rows if r["verdict"] == "missed"]
    targets = count["met"] + count["missed"]
    speed = "missed" if missed else "met" if targets else "not measured"
    print("correctness: %s (%d passed, %d failed, %d incomplete)"
          % (correct, count["ok"], count["FAIL"], count["incomplete"]))
    print("speed: %s (%d of %d targets met%s)" % (speed, count["met"], targets,
                                                  "; missed: " + ", ".join(missed) if missed
                                                  else ""))
    json.dump({"correctness": {"verdict": correct, "passed": count["ok"],
                               "failed": count["FAIL"], "incomplete": count["incomplete"]},
               "speed": {"verdict": speed, "met": count["met"], "missed": missed},
               "seconds": int(seconds), "budget": int(budget),
               "device_processes": int(processes), "rows": rows},
              open(out, "w"), indent=1)
    sys.exit(0)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "sanitizer":
        sanitizer(args[0], args[1], args[2])
    elif cmd == "logits":
        logits(args[0], args[1], float(args[2]), int(args[3]) if len(args) > 3 else 1)
    elif cmd == "summary":
        summary(*args[:5])
    elif cmd == "ids":
        ids(args[0], args[1], int(args[2]), args[3:] == ["16bit"])
    sys.exit("judge.py: unknown command %s" % cmd)


main()
