"""The input and output classifiers: rules + a trained head on sentence embeddings."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from assistant.safety.encoder import embed, load_encoder
from assistant.safety.head import WEIGHTS_DIR, Head
from assistant.safety.ngrams import ngram_features
from assistant.safety.pii import allowed_keys, find_pii, redact
from assistant.safety.prepare import Prepared, prepare
from assistant.safety.responses import OUTPUT_STOPPED, refusal
from assistant.safety.result import CATEGORIES, SafetyResult

# The encoder reads at most 256 word pieces (~1,000 characters); longer text is read in
# overlapping windows and the worst window decides.
WINDOW_CHARS = 900
WINDOW_OVERLAP = 200
_SECRET_KINDS = ("secret", "private_key")


@dataclass(slots=True)
class Scores:
    unsafe: float  # 1 - P(benign), worst window
    categories: dict[str, float]


class SafetyClassifier:
    """Thread-safe once built; build one per process with `SafetyClassifier.load()`."""

    def __init__(self, head: Head, encoder_path: str, device: str | None = None) -> None:
        self.head = head
        self.encoder = load_encoder(encoder_path, device, head.layers)

    @classmethod
    def load(
        cls, encoder_path: str, device: str | None = None, weights: Path = WEIGHTS_DIR
    ) -> SafetyClassifier:
        return cls(Head.load(weights), encoder_path, device)

    def score(self, prepared: Prepared) -> Scores:
        windows = _windows(prepared.text)
        flags = np.tile(prepared.flags(), (len(windows), 1))
        probs = self.head.probabilities(feature_matrix(self.encoder, windows, flags))
        by_class = dict(zip(self.head.classes, probs.max(axis=0).tolist(), strict=True))
        return Scores(
            unsafe=float(1.0 - probs[:, 0].min()),
            categories={c: by_class[c] for c in CATEGORIES},
        )

    def check_input(self, text: str) -> SafetyResult:
        prepared = prepare(text)
        scores = self.score(prepared)
        result = self._decide(scores, prepared)
        secrets = [m.kind for m in find_pii(text) if m.kind in _SECRET_KINDS]
        if secrets and result.decision == "allow":
            result.decision = "allow_with_caution"
        if secrets:
            result.reasons.append(
                "the message contains a secret ("
                + ", ".join(sorted(set(secrets)))
                + "); treat it as exposed and rotate it"
            )
        return result

    def check_output(self, text: str, allowed_sources: Iterable[str] = ()) -> SafetyResult:
        """An answer: refused when unsafe, else personal data not found in the sources redacted."""
        prepared = prepare(text)
        result = self._decide(self.score(prepared), prepared)
        if result.label == "unsafe":
            result.response = (
                refusal("self_harm") if result.top_category == "self_harm" else OUTPUT_STOPPED
            )
            return result
        redacted, removed = redact(text, allowed_keys(allowed_sources))
        if removed:
            result.decision = "redact"
            result.redacted = redacted
            kinds = ", ".join(sorted({m.kind for m in removed}))
            result.reasons.append(
                f"redacted {len(removed)} item(s) of personal data or secrets ({kinds}) "
                "not found in the user's message or the sources"
            )
        return result

    def _decide(self, scores: Scores, prepared: Prepared) -> SafetyResult:
        limits = self.head.thresholds
        top = max(scores.categories, key=scores.categories.__getitem__)
        reasons = list(prepared.reasons)
        if scores.unsafe >= limits.refuse:
            reasons.insert(
                0, f"classifier: unsafe {scores.unsafe:.2f} >= {limits.refuse:.2f}, mostly {top}"
            )
            if top == "self_harm":
                reasons.append("self-harm: answered with support and resources")
            return SafetyResult("refuse", "unsafe", scores.categories, reasons, refusal(top))
        decision = "allow"
        if scores.unsafe >= limits.caution:
            decision = "allow_with_caution"
            reasons.insert(
                0,
                f"classifier: unsafe {scores.unsafe:.2f} "
                f"(caution from {limits.caution:.2f}), mostly {top}",
            )
        elif prepared.encoded:
            decision = "allow_with_caution"
            reasons.append("encoded content was decoded and looks safe")
        return SafetyResult(decision, "safe", scores.categories, reasons)


def feature_matrix(encoder, texts: list[str], flags: np.ndarray) -> np.ndarray:
    """What the head reads, one row per text: embedding, hashed n-grams, disguise flags."""
    grams = np.stack([ngram_features(t) for t in texts])
    return np.hstack([embed(encoder, texts), grams, flags])


_LOCK = threading.Lock()
_SHARED: dict[tuple[str, str | None], SafetyClassifier] = {}


def shared_classifier(encoder_path: str, device: str | None = None) -> SafetyClassifier:
    """The process-wide classifier with the committed weights."""
    with _LOCK:
        key = (encoder_path, device)
        if key not in _SHARED:
            _SHARED[key] = SafetyClassifier.load(encoder_path, device)
        return _SHARED[key]


def _windows(text: str) -> list[str]:
    if len(text) <= WINDOW_CHARS:
        return [text]
    step = WINDOW_CHARS - WINDOW_OVERLAP
    return [text[i : i + WINDOW_CHARS] for i in range(0, len(text) - WINDOW_OVERLAP, step)]
