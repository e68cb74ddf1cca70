"""The trained classifier head: a one-hidden-layer MLP from features to class scores.

Features (`classifier.chunk_features`): the mean of the token states of the first 3 MiniLM
layers (384), hashed character n-grams (`ngrams.BUCKETS`) and two disguise flags. Out come softmax
scores for "benign" and the eight categories; the unsafe score is 1 - P(benign). Weights
live in `weights.npz` (float16) and the settings that go with them (classes, encoder layers,
thresholds tuned on the validation split, training settings) in `weights.json`. When the
encoder layers were fine-tuned with the head, `weights.json` names their file ("encoder",
float16 safetensors next to it) and the classifier loads them in place of MiniLM's own.
Inference is one small product next to the encoder: microseconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

WEIGHTS_DIR = Path(__file__).parent / "weights"


@dataclass(slots=True)
class Thresholds:
    refuse: float  # unsafe score at or above which a request is refused
    caution: float  # unsafe score at or above which it is allowed with caution


@dataclass(slots=True)
class Head:
    classes: list[str]  # "benign" first, then the categories
    layers: int  # encoder layers the head was trained on
    thresholds: Thresholds
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    meta: dict = field(default_factory=dict)

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        # torch, not numpy: numpy's BLAS threads and torch's would fight over the cores
        # (a 4x4482 product took ~100 ms that way on a busy 2-core machine).
        import torch

        # A window's n-grams fill a few hundred of the buckets: only the rows of w1 for the
        # columns in use take part (0.13 ms instead of 0.46 ms for the four windows of a
        # 500-character text, one thread).
        used = np.flatnonzero(features.any(axis=0))
        with torch.inference_mode():
            x = torch.from_numpy(np.ascontiguousarray(features[:, used], dtype=np.float32))
            hidden = torch.relu(x @ torch.from_numpy(self.w1[used]) + self._t("b1"))
            logits = hidden @ self._t("w2") + self._t("b2")
            return torch.softmax(logits, dim=1).numpy()

    def _t(self, name: str):
        import torch

        return torch.from_numpy(getattr(self, name))

    def save(self, directory: Path = WEIGHTS_DIR) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {k: getattr(self, k).astype(np.float16) for k in ("w1", "b1", "w2", "b2")}
        np.savez_compressed(directory / "weights.npz", **arrays)
        self.save_settings(directory)

    def save_settings(self, directory: Path = WEIGHTS_DIR) -> None:
        """weights.json alone: new thresholds leave the weights file as it was."""
        settings = {
            "classes": self.classes,
            "layers": self.layers,
            "thresholds": {"refuse": self.thresholds.refuse, "caution": self.thresholds.caution},
            **self.meta,
        }
        (directory / "weights.json").write_text(json.dumps(settings, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path = WEIGHTS_DIR) -> Head:
        settings = json.loads((directory / "weights.json").read_text())
        with np.load(directory / "weights.npz") as arrays:
            weights = {k: arrays[k].astype(np.float32) for k in ("w1", "b1", "w2", "b2")}
        meta = {k: v for k, v in settings.items() if k not in ("classes", "layers", "thresholds")}
        return cls(
            classes=settings["classes"],
            layers=settings["layers"],
            thresholds=Thresholds(**settings["thresholds"]),
            meta=meta,
            **weights,
        )
