"""Latency of `check_input` on 500-character inputs: `python -m assistant.safety.bench`.

Prints p50/p95 in milliseconds for each torch thread count, measured in this run on the
machine as it is (a shared machine gives noisy numbers: compare runs side by side).
`--compare float32 bfloat16` also times those encoder precisions next to the served one
(`lean_encoder.served_precision`), in the same run: the baseline, and the check that the
served choice is the fastest here. `--float32` is `--compare float32`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from assistant.safety.dataset import DATA_DIR, load_examples

LENGTH = 500
# The held-out split's mix of languages: its 500-character texts are 132 / 154 tokens
# (p50 / p95). data/test_scripts.jsonl, all in non-Latin scripts that MiniLM's vocabulary
# reads about a character a token (Cyrillic, Arabic, Greek, Bengali), gives ~324 tokens at
# p50: pass it as --source to time that heavier mix.
SOURCE = DATA_DIR / "test.jsonl"


def inputs(count: int, source: Path = SOURCE) -> list[str]:
    """500-character texts made of a split's examples run together, benign and unsafe."""
    texts = [ex.text for ex in load_examples(source)]
    out = []
    for start in range(count):
        parts, i = [], start
        while sum(len(p) + 1 for p in parts) < LENGTH:
            parts.append(texts[i % len(texts)])
            i += 7
        out.append(" ".join(parts)[:LENGTH])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--compare",
        nargs="+",
        default=[],
        choices=["int8", "bfloat16", "float32"],
        help="also time these encoder precisions (float32 is the baseline)",
    )
    parser.add_argument("--float32", action="store_true", help="same as --compare float32")
    parser.add_argument(
        "--source", type=Path, default=SOURCE, help="JSONL examples the inputs are made of"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from assistant.safety.classifier import SafetyClassifier, shared_classifier
    from assistant.settings import Settings

    path = Settings().embedding_model_path()
    served = shared_classifier(path, "cpu")
    variants = {f"served ({served.encoder.precision})": served}
    for precision in dict.fromkeys(args.compare + ["float32"] * args.float32):
        if precision != served.encoder.precision:
            variants[precision] = SafetyClassifier.load(path, "cpu", precision=precision)
    texts = inputs(args.count, args.source)
    import torch

    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, classifier in variants.items():
            classifier.check_input(texts[0])
            ms = []
            for text in texts:
                start = time.perf_counter()
                classifier.check_input(text)
                ms.append((time.perf_counter() - start) * 1000)
            p50, p95 = np.percentile(ms, 50), np.percentile(ms, 95)
            print(
                f"{LENGTH}-char input, {threads} thread(s), {name}: "
                f"p50 {p50:.1f} ms  p95 {p95:.1f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
