"""`train --place-threshold`: a new threshold for existing weights, tuned on validation
(val.jsonl, and bounded by val_scripts.jsonl's budget too)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("torch")

from assistant.safety.classifier import SafetyClassifier  # noqa: E402
from assistant.safety.dataset import DATA_DIR, load_examples  # noqa: E402
from assistant.safety.head import WEIGHTS_DIR  # noqa: E402
from assistant.safety.train import (  # noqa: E402
    MAX_SCRIPTS_FALSE_POSITIVES,
    MAX_VAL_FALSE_POSITIVES,
    place_threshold,
    served_scores,
    tune,
)
from assistant.settings import Settings  # noqa: E402


def test_a_threshold_is_placed_within_the_budget_and_the_weights_stay(tmp_path, capsys) -> None:
    out = shutil.copytree(WEIGHTS_DIR, tmp_path / "weights")
    settings_file = out / "weights.json"
    planted = {"thresholds": {"refuse": 0.5, "caution": 0.25}}
    settings_file.write_text(json.dumps(json.loads(settings_file.read_text()) | planted))
    val = load_examples(DATA_DIR / "val.jsonl")[:240]

    place_threshold(Settings(), out, val)

    placed = json.loads(settings_file.read_text())
    refuse = placed["thresholds"]["refuse"]
    assert refuse != 0.5 and placed["thresholds"]["caution"] == round(refuse / 2, 3)
    assert (out / "weights.npz").read_bytes() == (WEIGHTS_DIR / "weights.npz").read_bytes()
    classifier = SafetyClassifier.load(Settings().embedding_model_path(), "cpu", out)
    assert placed["threshold_placed_with"] == classifier.encoder.precision
    scores, unsafe = served_scores(classifier, val)
    assert np.mean(scores[~unsafe] >= refuse) <= MAX_VAL_FALSE_POSITIVES
    # One grid step lower would refuse too many benign lines or catch nothing more.
    lower = refuse - 0.005
    assert np.mean(scores[~unsafe] >= lower) > MAX_VAL_FALSE_POSITIVES or np.mean(
        scores[unsafe] >= lower
    ) == np.mean(scores[unsafe] >= refuse)
    assert "validation: recall" in capsys.readouterr().out


def test_the_non_latin_split_bounds_the_threshold_too(tmp_path) -> None:
    out = shutil.copytree(WEIGHTS_DIR, tmp_path / "weights")
    classifier = SafetyClassifier.load(Settings().embedding_model_path(), "cpu", out)
    val = load_examples(DATA_DIR / "val.jsonl")[:240]
    alone = tune(*served_scores(classifier, val)).refuse
    # A non-Latin split that `alone` refuses too many benign lines of: all its unsafe
    # lines, every benign line scoring `alone` or more, and few enough of the others that
    # those are over MAX_SCRIPTS_FALSE_POSITIVES of its benign lines.
    scripts = load_examples(DATA_DIR / "val_scripts.jsonl")
    scores, unsafe = served_scores(classifier, scripts)
    high = [e for e, s, u in zip(scripts, scores, unsafe, strict=True) if not u and s >= alone]
    assert high, "no benign non-Latin line scores above the val.jsonl threshold"
    low = [e for e, s, u in zip(scripts, scores, unsafe, strict=True) if not u and s < alone]
    room = int(len(high) / MAX_SCRIPTS_FALSE_POSITIVES) - len(high) - 1
    hard = [e for e in scripts if e.label == "unsafe"] + high + low[:room]

    place_threshold(Settings(), out, val, hard)

    refuse = json.loads((out / "weights.json").read_text())["thresholds"]["refuse"]
    assert refuse > alone
    scores, unsafe = served_scores(classifier, hard)
    assert np.mean(scores[~unsafe] >= refuse) <= MAX_SCRIPTS_FALSE_POSITIVES
    # It is the lowest grid threshold within that budget (or the lower one catches no more).
    lower = refuse - 0.005
    assert np.mean(scores[~unsafe] >= lower) > MAX_SCRIPTS_FALSE_POSITIVES or np.mean(
        scores[unsafe] >= lower
    ) == np.mean(scores[unsafe] >= refuse)
