"""`train.merge_heads`: several heads served as one MLP whose logits are their mean."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from assistant.safety.head import Head, Thresholds  # noqa: E402
from assistant.safety.train import CLASSES, merge_heads  # noqa: E402


def _head(rng: np.random.Generator, width: int, hidden: int) -> dict[str, np.ndarray]:
    return {
        "w1": rng.normal(size=(width, hidden)).astype(np.float32),
        "b1": rng.normal(size=hidden).astype(np.float32),
        "w2": rng.normal(size=(hidden, len(CLASSES))).astype(np.float32),
        "b2": rng.normal(size=len(CLASSES)).astype(np.float32),
    }


def _logits(h: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ h["w1"] + h["b1"], 0) @ h["w2"] + h["b2"]


def test_the_merged_head_serves_the_mean_of_the_heads_logits() -> None:
    rng = np.random.default_rng(0)
    heads = [_head(rng, 12, 5) for _ in range(3)]
    x = rng.normal(size=(7, 12)).astype(np.float32)

    merged = Head(CLASSES, 3, Thresholds(0.5, 0.25), **merge_heads(heads))
    served = merged.probabilities(x)

    mean = np.mean([_logits(h, x) for h in heads], axis=0)
    expected = np.exp(mean - mean.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-6)
    # Not what any one of them says.
    alone = Head(CLASSES, 3, Thresholds(0.5, 0.25), **heads[0]).probabilities(x)
    assert not np.allclose(served, alone, atol=1e-3)


def test_one_head_merges_to_itself() -> None:
    head = _head(np.random.default_rng(1), 12, 5)
    merged = merge_heads([head])
    assert all(np.array_equal(merged[k], head[k]) for k in head)
