#!/usr/bin/env python3
"""The corpus of kvchat's small trained models, from Debian's public-domain English:
Austen's novels (r-cran-janeaustenr), the King James Bible (bible-kjv), a quarter of fortunes,
chats made of the novels' dialogue in kvchat's gpt2 template, synthetic chats that state one to
three facts and ask for each later (filled from thousands of names, words, things and numbers, so
that only copying answers them), and passages read twice with other text between. Holds out
Persuasion and the Revelation (never trained on).

usage: corpus.py OUT_DIR [--kvchat PATH] [--seed S]
Writes OUT_DIR/train.u16 (GPT-2 ids, uint16, documents separated by <|endoftext|>),
OUT_DIR/heldout-austen.txt, OUT_DIR/heldout-kjv.txt, OUT_DIR/corpus.json (shares, versions,
SHA-256 of each text); prints the same. Installs the packages when missing (apt-get). Also the
held-out conversations kvchat bench --policy and perplexity --recall measure, one JSON object a
line: heldout-chats.jsonl (Persuasion's runs of dialogue, {"turns": [...]}, User first) and
heldout-recall.jsonl (a fact stated in the first message and asked for 3 to 6 short exchanges of
Persuasion's dialogue later, filled from Persuasion's own names and words and from things and
numbers no training text holds; {"turns": [...], "answer": "...", "fill": "..."}, the last turn
the question, fill the part of the answer only the fact gives). They draw on their own generator,
so train.u16 is the same with or without them."""
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


FACTS = [  # (the statement, the question, the answer): n a name, p a place, t a thing, k a number
    ("My name is {n}.", "What is my name?", "Your name is {n}."),
    ("I live in {p}.", "Where do I live?", "You live in {p}."),
    ("I have {t}.", "What do I have?", "You have {t}."),
    ("I have {k} sisters.", "How many sisters do I have?", "You have {k} sisters."),
    ("My brother lives in {p}.", "Where does my brother live?", "Your brother lives in {p}."),
    ("My horse is called {n}.", "What is my horse called?", "Your horse is called {n}."),
    ("I was born in {p}.", "Where was I born?", "You were born in {p}."),
    ("My friend {n} gave me {t}.", "What did my friend give me?", "Your friend gave you {t}."),
    ("Our house is number {k}.", "What is the number of our house?", "Your house is number {k}."),
    ("The secret word is {w}.", "What is the secret word?", "The secret word is {w}."),
    ("My father's name was {n}.", "What was my father's name?", "Your father's name was {n}."),
    ("We shall meet at {p}.", "Where shall we meet?", "We shall meet at {p}."),
    ("I lost {t} yesterday.", "What did I lose yesterday?", "You lost {t} yesterday."),
    ("The letter came from {p}.", "Where did the letter come from?",
     "The letter came from {p}."),
    ("I paid {k} pounds for it.", "How many pounds did I pay?", "You paid {k} pounds."),
    ("My cousin is called {n}.", "What is my cousin called?", "Your cousin is called {n}."),
]
ACKS = ["I shall remember it.", "Very well, I will remember.", "Indeed, I am glad to know it.",
        "I understand.", "Thank you for telling me.", "I will not forget it.", "So I see."]
ADJECTIVES = ["grey", "red", "silver", "small", "old", "blue", "white", "green", "brown", "gold",
              "yellow", "black", "broken", "new", "heavy", "little", "painted", "wooden", "fine",
              "plain", "curious", "narrow", "velvet", "copper", "tall", "striped", "faded",
              "crimson", "iron", "golden", "purple", "pale"]
NOUNS = ["horse", "shawl", "watch", "dog", "piano", "carriage", "cat", "ring", "umbrella", "mare",
         "bonnet", "lamp", "chair", "box", "clock", "kettle", "basket", "sword", "bell", "coat",
         "glove", "candle", "mirror", "cup", "pen", "book", "hat", "trunk", "fan", "brooch",
         "cane", "jug", "saddle", "ribbon", "locket", "spoon"]


def word_counts(texts):
    words = {}
    for t in texts:
        for w in re.findall(r"[A-Za-z]+", t):
            words[w] = words.get(w, 0) + 1
    return words


def names_and_words(texts):
    """proper nouns (capitalised where a sentence goes on, never in lower case) and rare words
    (two to five times in the texts)"""
    words = word_counts(texts)
    proper = sorted({m for t in texts for m in re.findall(r"(?<=[a-z,;] )([A-Z][a-z]{3,})\b", t)
                     if m.lower() not in words and words[m] >= 2})
    rare = sorted(w for w, c in words.items() if w.islower() and len(w) >= 6 and 2 <= c <= 5)
    return proper, rare


def pools(texts, heldout):
    """The fills a fact may take, thousands of each kind so that a model cannot guess them from a
    memorised list and must copy: the training texts' proper nouns and rare words, things (an
    adjective and a noun) and numbers (10 to 999). The held-out recall chats' fills are the
    held-out book's own names and words, and a quarter of the things and numbers (by a hash of
    each): none of them in a training chat (unseen() then keeps those no training text holds)."""
    proper, rare = names_and_words(texts)
    held_proper, held_rare = names_and_words([heldout])
    things = ["%s %s %s" % ("an" if a[0] in "aeiou" else "a", a, n)
              for a in ADJECTIVES for n in NOUNS]
    numbers = [str(i) for i in range(10, 1000)]
    train = dict(n=proper, p=proper, w=rare)
    held = dict(n=held_proper, p=held_proper, w=held_rare)
    for key, pool in [("t", things), ("k", numbers)]:
        half = [int(hashlib.sha256(f.encode()).hexdigest(), 16) % 4 == 0 for f in pool]
        train[key] = [f for f, h in zip(pool, half) if not h]
        held[key] = [f for f, h in zip(pool, half) if h]
    return train, held


def fill_facts(rng, facts, fills):
    return [{key: rng.choice(fills[key]) for key in "nptkw"} for _ in facts]


def fact_turns(rng, pairs, fills, least, most):
    """a fact stated first, asked for after several exchanges of the novels' dialogue"""
    st, q, a = rng.choice(FACTS)
    fill = fill_facts(rng, [0], fills)[0]
    turns = [st.format(**fill), rng.choice(ACKS)]
    for _ in range(rng.randint(least, most)):
        turns += rng.choice(pairs)
    key = re.search(r"\{(\w)\}", a).group(1)
    return turns + [q.format(**fill)], a.format(**fill), fill[key]


def fact_chat(rng, pairs, fills):
    """one to three facts stated first and each asked for, in any order, after 2 to 8 exchanges of
    the novels' dialogue: answering takes finding the fact in the context and copying it, the
    skill a model must have to use its context at all"""
    facts = rng.sample(FACTS, rng.randint(1, 3))
    filled = fill_facts(rng, facts, fills)
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


FACT_CHATS = 1600  # about a fifth of the tokens: the copying they ask for is what uses context
REPEATS = 1400  # about a tenth: a passage read again 80-200 words later


def words_of(texts, rng, least, most):
    t = rng.choice(texts).split()
    n = rng.randint(least, most)
    at = rng.randrange(max(1, len(t) - n))
    return " ".join(t[at : at + n])


def repeat_doc(rng, texts):
    """a passage, other text, the passage again: the repeats from which small transformers learn
    to look back for where the present text was read before and copy what followed it (the
    induction heads that recall and exact eviction need)"""
    a = words_of(texts, rng, 30, 70)
    return "\n\n".join([a, words_of(texts, rng, 80, 200), a])


def unseen(held, training):
    """the held-out fills that no training text holds (a word as a word, a phrase anywhere)"""
    text = EOT.join(training)
    words = set(re.findall(r"[A-Za-z0-9]+", text))
    return {key: [f for f in pool if (f not in words if " " not in f else f not in text)]
            for key, pool in held.items()}


def write_heldout_chats(out, persuasion, seed, fills):
    """Persuasion's dialogue as chats, and recall chats built on it (their own generator)"""
    runs = dialogue_runs(persuasion)
    pairs = [r[i : i + 2] for r in runs for i in range(0, len(r) - 1, 2)]
    rng = random.Random(seed + 1)
    short = [p for p in pairs if len(p[0]) + len(p[1]) < 300]  # the question within 512 tokens
    recall = [fact_turns(rng, short, fills, 3, 6) for _ in range(200)]
    with open(os.path.join(out, "heldout-chats.jsonl"), "w") as f:
        for r in runs:
            f.write(json.dumps({"turns": r}) + "\n")
    with open(os.path.join(out, "heldout-recall.jsonl"), "w") as f:
        for turns, answer, fill in recall:
            f.write(json.dumps({"turns": turns, "answer": answer, "fill": fill}) + "\n")
    return {"chats": len(runs), "recall": len(recall),
            "recall_fills": {key: len(pool) for key, pool in fills.items()}}


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
    prose = parts["austen"] + parts["kjv"]
    fills, held_fills = pools(prose, held["austen"])
    parts["fact-chats"] = [fact_chat(rng, pairs, fills) for _ in range(FACT_CHATS)]
    parts["repeats"] = [repeat_doc(rng, prose) for _ in range(REPEATS)]
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
    held_fills = unseen(held_fills, [d for _, d in docs])
    report["fills"] = {key: len(pool) for key, pool in fills.items()}
    report["heldout"]["conversations"] = write_heldout_chats(args.out, persuasion, args.seed,
                                                             held_fills)
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
