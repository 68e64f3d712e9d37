#!/usr/bin/env python3
"""The corpus of kvchat's small trained models, from Debian's public-domain English:
Austen's novels (r-cran-janeaustenr), the King James Bible (bible-kjv), a quarter of fortunes,
chats made of the novels' dialogue in kvchat's gpt2 template, and synthetic chats that state one to
three facts and ask for each later. Holds out Persuasion and the Revelation (never trained on).

usage: corpus.py OUT_DIR [--kvchat PATH] [--seed S]
Writes OUT_DIR/train.u16 (GPT-2 ids, uint16, documents separated by <|endoftext|>),
OUT_DIR/heldout-austen.txt, OUT_DIR/heldout-kjv.txt, OUT_DIR/corpus.json (shares, versions,
SHA-256 of each text); prints the same. Installs the packages when missing (apt-get). Also the
held-out conversations kvchat bench --policy measures eviction on, one JSON object a line:
heldout-chats.jsonl (Persuasion's runs of dialogue, {"turns": [...]}, User first) and
heldout-recall.jsonl (a fact stated first and asked for 3 to 6 short exchanges of Persuasion's
dialogue later, filled from names, places and things the training chats never use; {"turns": [...],
"answer": "..."}, the last turn the question). They draw on their own generator, so train.u16 is
the same with or without them."""
import argparse
import array
import hashlib
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdata  # noqa: E402

PACKAGES = ["r-cran-janeaustenr", "bible-kjv", "bible-kjv-text", "fortunes"]
AUSTEN = "/usr/lib/R/site-library/janeaustenr/data/Rdata"
FORTUNES = "/usr/share/games/fortunes"
EOT = "<|endoftext|>"
PREAMBLE = "A conversation between a curious user and a helpful assistant.\n"  # template.c's


def ensure_packages():
    missing = [p for p in PACKAGES
               if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]
    if missing:
        print("installing", " ".join(missing), file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-q"] + missing, check=True,
                       stdout=subprocess.DEVNULL)
    out = {}
    for p in PACKAGES:
        v = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", p], capture_output=True,
                           text=True, check=True).stdout
        out[p] = v
    return out


def paragraphs(lines):
    """lines to paragraphs: blank lines separate them, a paragraph's lines joined by spaces"""
    out, cur = [], []
    for ln in lines + [""]:
        ln = (ln or "").strip()
        if ln:
            cur.append(ln)
        elif cur:
            out.append(" ".join(cur))
            cur = []
    return out


def austen():
    books = rdata.read_lazyload(AUSTEN)
    return {name: paragraphs(lines) for name, lines in books.items()}


def kjv():
    """{book: text}: a verse a line (no numbers), a blank line between chapters"""
    raw = subprocess.run(["bible", "-p", "/usr/lib", "Gen1:1-Rev22:21"], capture_output=True,
                         text=True, check=True).stdout
    books, book = {}, None
    for ln in raw.splitlines():
        m = re.match(r"^(\S.*) (\d+)$", ln)
        if m:  # "Genesis 1": a chapter heading
            if m.group(1) != book:
                book = m.group(1)
                books[book] = []
            books[book].append([])
            continue
        v = re.match(r"^\s+\d+ (.*)$", ln)
        if v:
            books[book][-1].append(v.group(1).strip())
        elif ln.strip() and books.get(book):
            books[book][-1][-1] += " " + ln.strip()
    return {b: "\n\n".join("\n".join(ch) for ch in chs) for b, chs in books.items()}


def fortunes():
    out = []
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            out += [q.strip("\n") for q in f.read().split("\n%\n") if q.strip()]
    return out


QUOTE = re.compile(r"[\"“]([^\"”]+)[\"”]")


def dialogue_runs(paras, least=4, most=12):
    """runs of consecutive paragraphs that open with speech: each its quoted words, joined"""
    runs, cur = [], []
    for p in paras + [""]:
        said = " ".join(q.strip() for q in QUOTE.findall(p)) if p.startswith(("\"", "“")) else ""
        if said and len(said) < 600:
            cur.append(said)
            continue
        while len(cur) >= least:
            runs.append(cur[:most])
            cur = cur[most:]
        cur = []
    return runs


def chat(turns):
    """turns in kvchat's gpt2 template, alternate speakers as the two sides"""
    out = PREAMBLE
    for i, t in enumerate(turns):
        out += ("User: %s\n" % t) if i % 2 == 0 else ("Assistant: %s\n" % t)
    return out.rstrip("\n")


NAMES = ["Anne", "Eliza", "Marianne", "Edward", "Henry", "Fanny", "Robert", "Harriet", "James",
         "Lucy", "Charles", "Mary", "Thomas", "Jane", "William", "Catherine", "George", "Sophia"]
PLACES = ["Bath", "London", "Derby", "Kent", "Brighton", "Devon", "Oxford", "York", "Dover",
          "Norfolk", "Surrey", "Exeter", "Lyme", "Portsmouth", "Sussex", "Bristol"]
THINGS = ["a grey horse", "a red shawl", "a silver watch", "a small dog", "an old piano",
          "a blue carriage", "a garden of roses", "a copy of Cowper", "a white cat"]
NUMBERS = ["three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve"]
FACTS = [  # (the statement, the question, the answer), each filled from the lists above
    ("My name is {n}.", "What is my name?", "Your name is {n}."),
    ("I live in {p}.", "Where do I live?", "You live in {p}."),
    ("I have {t}.", "What do I have?", "You have {t}."),
    ("I have {k} sisters.", "How many sisters do I have?", "You have {k} sisters."),
    ("My brother lives in {p}.", "Where does my brother live?", "Your brother lives in {p}."),
]
ACKS = ["I shall remember it.", "Very well, I will remember.", "Indeed, I am glad to know it.",
        "I understand.", "Thank you for telling me."]


# the held-out recall chats' fills: none of them in a training chat's role
HELD_FILLS = dict(
    n=["Frederick", "Louisa", "Henrietta", "Walter", "Penelope", "Benwick", "Harville", "Clay"],
    p=["Uppercross", "Kellynch", "Taunton", "Plymouth", "Winthrop", "Chester", "Cardiff", "Leeds"],
    t=["a gold ring", "a green umbrella", "a brown mare", "a book of sermons", "a yellow bonnet"],
    k=["two", "eleven", "fifteen", "twenty"])


FACT_CHATS = 1300  # about a fifth of the tokens: the copying they ask for is what uses context


def fact_turns(rng, pairs, fills, least, most):
    """a fact stated first, asked for after several exchanges of the novels' dialogue"""
    st, q, a = rng.choice(FACTS)
    fill = {key: rng.choice(fills[key]) for key in "nptk"}  # in this order: train.u16's draws
    turns = [st.format(**fill), rng.choice(ACKS)]
    for _ in range(rng.randint(least, most)):
        turns += rng.choice(pairs)
    return turns + [q.format(**fill)], a.format(**fill)


def fact_chat(rng, pairs):
    """one to three facts stated first and each asked for, in any order, after 2 to 8 exchanges of
    the novels' dialogue: answering takes finding the fact in the context and copying it, the
    skill a model must have to use its context at all"""
    fills = dict(n=NAMES, p=PLACES, t=THINGS, k=NUMBERS)
    facts = rng.sample(FACTS, rng.randint(1, 3))
    filled = [{key: rng.choice(fills[key]) for key in "nptk"} for _ in facts]
    turns = []
    for (st, _, _), f in zip(facts, filled):
        turns += [st.format(**f), rng.choice(ACKS)]
    for _ in range(rng.randint(2, 8)):
        turns += rng.choice(pairs)
    order = list(range(len(facts)))
    rng.shuffle(order)
    for i in order:
        turns += [facts[i][1].format(**filled[i]), facts[i][2].format(**filled[i])]
    return chat(turns)


def write_heldout_chats(out, persuasion, seed):
    """Persuasion's dialogue as chats, and recall chats built on it (their own generator)"""
    runs = dialogue_runs(persuasion)
    pairs = [r[i : i + 2] for r in runs for i in range(0, len(r) - 1, 2)]
    rng = random.Random(seed + 1)
    short = [p for p in pairs if len(p[0]) + len(p[1]) < 300]  # the question within 512 tokens
    recall = [fact_turns(rng, short, HELD_FILLS, 3, 6) for _ in range(100)]
    with open(os.path.join(out, "heldout-chats.jsonl"), "w") as f:
        for r in runs:
            f.write(json.dumps({"turns": r}) + "\n")
    with open(os.path.join(out, "heldout-recall.jsonl"), "w") as f:
        for turns, answer in recall:
            f.write(json.dumps({"turns": turns, "answer": answer}) + "\n")
    return {"chats": len(runs), "recall": len(recall)}


def tokenize(kvchat, text):
    r = subprocess.run([kvchat, "tokenize", "--special"], input=text.encode(),
                       capture_output=True, check=True)
    return [int(x) for x in r.stdout.split()]


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--kvchat", default="build/kvchat")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    versions = ensure_packages()
    novels, bible, quotes = austen(), kjv(), fortunes()
    persuasion = novels.pop("persuasion")
    held = {"austen": "\n\n".join(persuasion), "kjv": bible.pop("Revelation")}
    parts = {
        "austen": [("\n\n".join(p)) for p in novels.values()],
        "kjv": list(bible.values()),
        # a quarter: short unrelated quotations teach a model to ignore what came before them
        "fortunes": rng.sample(quotes, len(quotes) // 4),
    }
    runs = [r for p in novels.values() for r in dialogue_runs(p)]
    parts["austen-chats"] = [chat(r) for r in runs]
    pairs = [r[i : i + 2] for r in runs for i in range(0, len(r) - 1, 2)]
    parts["fact-chats"] = [fact_chat(rng, pairs) for _ in range(FACT_CHATS)]
    os.makedirs(args.out, exist_ok=True)
    report = {"packages": versions, "parts": {}, "heldout": {}}
    ids, counts = [], {}
    docs = [(name, d) for name, ds in parts.items() for d in ds]
    rng.shuffle(docs)  # documents of every kind all through: no part is learnt last
    for name in parts:
        text = EOT.join(d for n, d in docs if n == name)
        report["parts"][name] = {"documents": len(parts[name]), "sha256": sha(text)}
    chunk = 400  # documents a tokenizer call
    for i in range(0, len(docs), chunk):
        ids += tokenize(args.kvchat, "".join(d + EOT for _, d in docs[i : i + chunk]))
    for name in parts:  # the tokens each part takes, for the shares
        counts[name] = len(tokenize(args.kvchat, EOT.join(parts[name])))
    total = sum(counts.values())
    for name in parts:
        report["parts"][name].update(tokens=counts[name], share=round(counts[name] / total, 4))
    for name, text in held.items():
        path = os.path.join(args.out, "heldout-%s.txt" % name)
        with open(path, "w") as f:
            f.write(text)
        report["heldout"][name] = {"file": os.path.basename(path), "sha256": sha(text),
                                   "tokens": len(tokenize(args.kvchat, text))}
    report["heldout"]["conversations"] = write_heldout_chats(args.out, persuasion, args.seed)
    a = array.array("H", ids)
    with open(os.path.join(args.out, "train.u16"), "wb") as f:
        a.tofile(f)
    report["train_tokens"] = len(ids)
    report["order"] = "%d documents, shuffled with seed %d" % (len(docs), args.seed)
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(report, f, indent=1)
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
