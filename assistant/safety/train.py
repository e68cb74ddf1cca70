"""Train the classifier head: `python -m assistant.safety.train [--layers N] [--seed S]`.

Reads data/train.jsonl and data/train_synth.jsonl (written by `assistant.safety.synth`),
picks the refuse threshold on data/val.jsonl with the classifier as it is served, writes
weights/ and prints the validation report. The held-out data/test.jsonl is not read here:
it is an exam taken once, with `assistant safety eval`, after the weights are final.
Same seed, same data -> same weights and threshold.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from assistant.safety.classifier import SafetyClassifier, chunk_features
from assistant.safety.dataset import DATA_DIR, Example, load_examples
from assistant.safety.encoder import load_lean_encoder
from assistant.safety.head import WEIGHTS_DIR, Head, Thresholds
from assistant.safety.metrics import evaluate
from assistant.safety.prepare import prepare
from assistant.safety.result import CATEGORIES
from assistant.settings import Settings

CLASSES = ["benign", *CATEGORIES]
# The issue allows 3% false positives on benign requests. A threshold placed at exactly 3%
# of ~300 benign validation examples lands on the noisy edge and overshoots on new data
# (4.1% on the held-out split last round), so validation gets half that budget: at most
# this share of benign validation examples may be refused.
MAX_VAL_FALSE_POSITIVES = 0.015
BATCH = 32


def features(encoder, examples: list[Example]) -> np.ndarray:
    """One row per example (the whole text is one span), encoded in batches of similar length."""
    prepared = [prepare(ex.text) for ex in tqdm(examples, desc="prepare", file=sys.stderr)]
    order = sorted(range(len(prepared)), key=lambda i: len(prepared[i].text))
    rows: list[np.ndarray] = [np.empty(0)] * len(prepared)
    for start in tqdm(range(0, len(order), BATCH), desc="encode", file=sys.stderr):
        batch = [prepared[i] for i in order[start : start + BATCH]]
        spans = [[(0, len(p.text))] for p in batch]
        for i, row in zip(
            order[start : start + BATCH], chunk_features(encoder, batch, spans), strict=True
        ):
            rows[i] = row[0]
    return np.stack(rows)


def targets(examples: list[Example]) -> np.ndarray:
    return np.array([CLASSES.index(ex.category) if ex.label == "unsafe" else 0 for ex in examples])


def fit(
    x: np.ndarray, y: np.ndarray, hidden: int, epochs: int, seed: int, progress: bool = True
) -> dict[str, np.ndarray]:
    """A one-hidden-layer MLP, full batch, class-balanced cross-entropy."""
    import torch

    torch.manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    counts = torch.bincount(yt, minlength=len(CLASSES)).clamp(min=1).float()
    weight = counts.sum() / (len(CLASSES) * counts)
    net = torch.nn.Sequential(
        torch.nn.Dropout(0.3),
        torch.nn.Linear(x.shape[1], hidden),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.3),
        torch.nn.Linear(hidden, len(CLASSES)),
    )
    optimiser = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=0.1)
    loss_fn = torch.nn.CrossEntropyLoss(weight=weight, label_smoothing=0.1)
    for _ in tqdm(range(epochs), desc="train", file=sys.stderr, disable=not progress):
        optimiser.zero_grad()
        loss_fn(net(xt), yt).backward()
        optimiser.step()
    first, second = net[1], net[4]
    return {
        "w1": first.weight.detach().numpy().T.copy(),
        "b1": first.bias.detach().numpy().copy(),
        "w2": second.weight.detach().numpy().T.copy(),
        "b2": second.bias.detach().numpy().copy(),
    }


def tune(scores: np.ndarray, is_unsafe: np.ndarray) -> Thresholds:
    """The refuse threshold with the best recall among those within the FP budget.

    One threshold for all categories: validation has 16-32 unsafe examples per category,
    too few to place a threshold per category without fitting its noise.
    """
    candidates = []
    for t in np.round(np.arange(0.05, 0.995, 0.005), 3):
        fp = float(np.mean(scores[~is_unsafe] >= t))
        recall = float(np.mean(scores[is_unsafe] >= t))
        # Within the budget, best recall; else fewest false positives. Ties: higher threshold.
        candidates.append(
            (
                fp <= MAX_VAL_FALSE_POSITIVES,
                recall if fp <= MAX_VAL_FALSE_POSITIVES else -fp,
                float(t),
            )
        )
    refuse = max(candidates)[2]
    return Thresholds(refuse=refuse, caution=round(refuse / 2, 3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=3, help="encoder layers to keep (0 = all)")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=WEIGHTS_DIR, help="where to write weights")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    # One thread: reproducible, and faster than two on a shared machine.
    torch.set_num_threads(1)
    settings = Settings()
    encoder = load_lean_encoder(settings.embedding_model_path(), "cpu", args.layers)
    train = load_examples(DATA_DIR / "train.jsonl") + load_examples(DATA_DIR / "train_synth.jsonl")
    val = load_examples(DATA_DIR / "val.jsonl")
    weights = fit(features(encoder, train), targets(train), args.hidden, args.epochs, args.seed)
    head = Head(CLASSES, args.layers, Thresholds(0.5, 0.25), **weights)
    head.meta = {"seed": args.seed, "hidden": args.hidden, "epochs": args.epochs}
    head.save(args.out)
    # The threshold comes from the classifier as it is served (float16 weights, bfloat16
    # encoder where the CPU has it, long texts read in windows), not from training features.
    classifier = SafetyClassifier.load(settings.embedding_model_path(), "cpu", args.out)
    scores = np.array([s.unsafe for s in classifier.score_many([prepare(e.text) for e in val])])
    head.thresholds = classifier.head.thresholds = tune(
        scores, np.array([ex.label == "unsafe" for ex in val])
    )
    head.save(args.out)
    print(f"thresholds: refuse {head.thresholds.refuse}, caution {head.thresholds.caution}")
    print("== validation (the threshold was tuned on it) ==")
    print(evaluate(val, classifier.check_input).format())
    return 0


if __name__ == "__main__":
    sys.exit(main())
