"""`train --head-only`: a new head on the tuned encoder layers already in --out."""

from __future__ import annotations

import argparse
import os
import shutil

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("torch")

from assistant.safety.dataset import DATA_DIR, load_examples  # noqa: E402
from assistant.safety.finetune import ENCODER_FILE  # noqa: E402
from assistant.safety.head import WEIGHTS_DIR, Head  # noqa: E402
from assistant.safety.prepare import prepare  # noqa: E402
from assistant.safety.train import (  # noqa: E402
    CLASSES,
    features,
    float32_encoder,
    head_on_tuned_layers,
    targets,
    text_scores,
)
from assistant.settings import Settings  # noqa: E402


def _args(out, layers: int = 3, seed: int = 5, heads: int = 1) -> argparse.Namespace:
    return argparse.Namespace(
        out=out, layers=layers, hidden=8, heads=heads, epochs=40, seed=seed, threads=1
    )


@pytest.fixture(scope="module")
def sample():
    # Every class, a few lines each: enough for a head to see all of them.
    examples = load_examples(DATA_DIR / "train.jsonl")
    by_class = {
        c: [e for e in examples if (e.category if e.label == "unsafe" else "benign") == c]
        for c in CLASSES
    }
    picked = [e for c in CLASSES for e in by_class[c][:4]]
    return [prepare(e.text) for e in picked], targets(picked)


def test_a_new_head_is_trained_and_the_tuned_layers_stay(tmp_path, sample) -> None:
    out = shutil.copytree(WEIGHTS_DIR, tmp_path / "weights")
    prepared, y = sample

    weights, meta = head_on_tuned_layers(Settings(), _args(out), prepared, y)

    # It reads what the served head reads, and it has learned its sample.
    before = Head.load(out)
    assert weights["w1"].shape == (before.w1.shape[0], 8)
    assert weights["w2"].shape == (8, len(CLASSES))
    encoder = float32_encoder(Settings(), 3, out / ENCODER_FILE)
    scores = text_scores(weights, *features(encoder, prepared, progress=False))
    assert scores[y > 0].min() > scores[y == 0].max(), scores
    # The layers and what is recorded about them are those of the weights it started from.
    assert (out / ENCODER_FILE).read_bytes() == (WEIGHTS_DIR / ENCODER_FILE).read_bytes()
    assert all(meta[k] == before.meta[k] for k in ("encoder", "encoder_epochs", "seed"))
    assert meta["head_only"] is True and meta["head_seed"] == 5 and meta["hidden"] == 8
    again, _ = head_on_tuned_layers(Settings(), _args(out), prepared, y)
    assert all(np.array_equal(weights[k], again[k]) for k in weights)


def test_several_heads_are_served_as_one(tmp_path, sample) -> None:
    out = shutil.copytree(WEIGHTS_DIR, tmp_path / "weights")
    prepared, y = sample

    one, _ = head_on_tuned_layers(Settings(), _args(out), prepared, y)
    both, meta = head_on_tuned_layers(Settings(), _args(out, heads=2), prepared, y)

    # The first head is the one-head run (same seed); the second, seed 6, is another.
    assert both["w1"].shape == (one["w1"].shape[0], 16) and meta["heads"] == 2
    assert np.array_equal(both["w1"][:, :8], one["w1"])
    assert not np.allclose(both["w1"][:, 8:], one["w1"])
    encoder = float32_encoder(Settings(), 3, out / ENCODER_FILE)
    scores = text_scores(both, *features(encoder, prepared, progress=False))
    assert scores[y > 0].min() > scores[y == 0].max(), scores


def test_weights_without_tuned_layers_are_a_clear_error(tmp_path, sample) -> None:
    out = shutil.copytree(WEIGHTS_DIR, tmp_path / "weights")
    (out / ENCODER_FILE).unlink()
    with pytest.raises(SystemExit, match="needs tuned encoder layers"):
        head_on_tuned_layers(Settings(), _args(out), *sample)


def test_a_layer_count_unlike_the_tuned_layers_is_a_clear_error(tmp_path, sample) -> None:
    out = shutil.copytree(WEIGHTS_DIR, tmp_path / "weights")
    with pytest.raises(SystemExit, match="pass --layers 3"):
        head_on_tuned_layers(Settings(), _args(out, layers=2), *sample)
