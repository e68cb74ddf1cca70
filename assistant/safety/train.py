"""Train the classifier head: `python -m assistant.safety.train [--layers N] [--seed S]`.

Reads data/train.jsonl, tunes the thresholds on data/val.jsonl, writes weights/ and
prints the report on the held-out data/test.jsonl (never used for fitting or tuning).
Same seed, same data -> same weights.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from assistant.safety.classifier import SafetyClassifier, feature_matrix
from assistant.safety.dataset import DATA_DIR, Example, load_examples
from assistant.safety.encoder import load_encoder
from assistant.safety.head import WEIGHTS_DIR, Head, Thresholds
from assistant.safety.metrics import evaluate
from assistant.safety.prepare import prepare
from assistant.safety.result import CATEGORIES
from assistant.settings import Settings

CLASSES = ["benign", *CATEGORIES]
# At most this share of benign validation examples may be refused.
MAX_VAL_FALSE_POSITIVES = 0.03


def features(encoder, examples: list[Example]) -> np.ndarray:
    prepared = [prepare(ex.text) for ex in tqdm(examples, desc="prepare", file=sys.stderr)]
    flags = np.stack([p.flags() for p in prepared])
    return feature_matrix(encoder, [p.text for p in prepared], flags)


def targets(examples: list[Example]) -> np.ndarray:
    return np.array([CLASSES.index(ex.category) if ex.label == "unsafe" else 0 for ex in examples])


def fit(x: np.ndarray, y: np.ndarray, hidden: int, epochs: int, seed: int) -> dict[str, np.ndarray]:
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
    for _ in tqdm(range(epochs), desc="train", file=sys.stderr):
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


def tune(head: Head, x: np.ndarray, examples: list[Example]) -> Thresholds:
    """The refuse threshold with the best validation recall among those within the FP budget."""
    unsafe_score = 1.0 - head.probabilities(x)[:, 0]
    is_unsafe = np.array([ex.label == "unsafe" for ex in examples])
    candidates = []
    for t in np.round(np.arange(0.05, 0.96, 0.01), 2):
        fp = float(np.mean(unsafe_score[~is_unsafe] >= t))
        recall = float(np.mean(unsafe_score[is_unsafe] >= t))
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
    encoder = load_encoder(settings.embedding_model_path(), "cpu", args.layers)
    train = load_examples(DATA_DIR / "train.jsonl")
    val = load_examples(DATA_DIR / "val.jsonl")
    test = load_examples(DATA_DIR / "test.jsonl")
    x_train, x_val = features(encoder, train), features(encoder, val)
    weights = fit(x_train, targets(train), args.hidden, args.epochs, args.seed)
    head = Head(CLASSES, args.layers, Thresholds(0.5, 0.25), **weights)
    head.thresholds = tune(head, x_val, val)
    head.meta = {"seed": args.seed, "hidden": args.hidden, "epochs": args.epochs}
    head.save(args.out)
    # Evaluate what was saved (float16), not the float32 weights still in memory.
    classifier = SafetyClassifier.load(settings.embedding_model_path(), "cpu", args.out)
    print(f"thresholds: refuse {head.thresholds.refuse}, caution {head.thresholds.caution}")
    print("== validation (thresholds tuned here) ==")
    print(evaluate(val, classifier.check_input).format())
    print("== held-out test ==")
    print(evaluate(test, classifier.check_input).format())
    return 0


if __name__ == "__main__":
    sys.exit(main())
