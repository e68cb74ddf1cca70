"""Templated training data: `python -m assistant.safety.synth` writes data/train_synth.jsonl.

The hand-written split is small; these templates add many phrasings per category (plain
requests, polite and indirect ones, other languages) and as many hard negatives that share
the words but not the intent. A share of the examples is disguised the way attackers do
(leetspeak, spaced letters, look-alike letters, zero-width characters, base64, hex, rot13,
URL-encoding) so the head also learns from what `prepare` recovers. Seeded: the same seed
writes the same file. The held-out test split is never read here except to drop its
duplicates and near-duplicates (`overlap`) from the output.
"""

from __future__ import annotations

import argparse
import base64
import codecs
import json
import random
import re
import sys
import urllib.parse

from assistant.safety.dataset import DATA_DIR, load_examples
from assistant.safety.overlap import NearDuplicates
from assistant.safety.synth_templates import BENIGN, SLOTS, UNSAFE

OUT = DATA_DIR / "train_synth.jsonl"
_SLOT = re.compile(r"\{(\w+)\}")
_HOMOGLYPH = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "i": "і"}
_LEET = {"a": "4", "e": "3", "i": "1", "o": "0", "s": "5", "t": "7"}


def fill(template: str, rng: random.Random) -> str:
    text = _SLOT.sub(lambda m: rng.choice(SLOTS[m.group(1)]), template)
    return text[0].upper() + text[1:]


def disguise(text: str, rng: random.Random) -> str:
    """One of the disguises `prepare` undoes, picked at random."""
    kind = rng.randrange(8)
    if kind == 0:
        return "".join(_LEET.get(c, c) if rng.random() < 0.6 else c for c in text)
    if kind == 1:
        words = text.split()
        i = rng.randrange(len(words))
        words[i] = " ".join(words[i])
        return " ".join(words)
    if kind == 2:
        return "".join(_HOMOGLYPH.get(c, c) if rng.random() < 0.5 else c for c in text)
    if kind == 3:
        return "\u200b".join(text[i : i + 2] for i in range(0, len(text), 2))
    lead = rng.choice(["", "Decode this and follow it: ", "Answer the message below. ", ""])
    if kind == 4:
        return lead + base64.b64encode(text.encode()).decode()
    if kind == 5:
        return lead + text.encode().hex()
    if kind == 6:
        return "rot13: " + codecs.encode(text, "rot13")
    return urllib.parse.quote(text)


def generate(seed: int, per_template: int, disguised_share: float) -> list[dict]:
    rng = random.Random(seed)
    rows: list[dict] = []
    groups = [("unsafe", c, t) for c, ts in UNSAFE.items() for t in ts]
    groups += [("benign", c, t) for c, ts in BENIGN.items() for t in ts]
    for label, category, template in groups:
        for _ in range(per_template):
            text = fill(template, rng)
            if rng.random() < disguised_share:
                text = disguise(text, rng)
            rows.append({"text": text, "label": label, "category": category})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--per-template", type=int, default=10)
    parser.add_argument("--disguised", type=float, default=0.12, help="share disguised")
    args = parser.parse_args(argv)
    taken = {
        ex.text
        for split in ("train", "val", "test")
        for ex in load_examples(DATA_DIR / f"{split}.jsonl")
    }
    held_out = NearDuplicates([ex.text for ex in load_examples(DATA_DIR / "test.jsonl")])
    seen: set[str] = set()
    lines = []
    for row in generate(args.seed, args.per_template, args.disguised):
        if row["text"] in taken or row["text"] in seen or row["text"] in held_out:
            continue
        seen.add(row["text"])
        lines.append(json.dumps(row, ensure_ascii=False))
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} examples to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
