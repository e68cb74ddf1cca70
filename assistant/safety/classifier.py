"""The input and output classifiers: rules + a trained head on sentence embeddings.

The embeddings come from the first layers of MiniLM, fine-tuned for this classifier
(`assistant.safety.finetune`) when weights/ holds the tuned layers (`encoder` in
weights.json), as token states pooled over each window of the text.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from assistant.safety.encoder import embed_spans, load_lean_encoder
from assistant.safety.head import WEIGHTS_DIR, Head
from assistant.safety.ngrams import BUCKETS, ngram_features
from assistant.safety.pii import allowed_keys, find_pii, redact
from assistant.safety.prepare import FLAG_NAMES, Prepared, prepare
from assistant.safety.responses import OUTPUT_STOPPED, SELF_HARM_RESOURCES, refusal
from assistant.safety.result import CATEGORIES, SafetyResult

# The head was trained on requests of a sentence or two. A longer text is read as chunks
# of whole sentences (an unsafe request padded with harmless text would otherwise be
# averaged away by mean pooling), and the worst chunk decides. The encoder still runs once
# per text: each chunk pools the token states inside its span.
WINDOW_CHARS = 160
WINDOW_OVERLAP = 60
_SENTENCE_END = re.compile(r"(?<=[.!?。])\s+|\n+")
_SECRET_KINDS = ("secret", "private_key")


@dataclass(slots=True)
class Scores:
    unsafe: float  # 1 - P(benign), worst window
    categories: dict[str, float]


class SafetyClassifier:
    """Thread-safe once built; build one per process with `SafetyClassifier.load()`."""

    def __init__(
        self,
        head: Head,
        encoder_path: str,
        device: str | None = None,
        threads: int | None = 1,
        tuned: Path | None = None,
        precision: str | None = None,
    ) -> None:
        import torch

        self.head = head
        # `tuned`: the fine-tuned encoder layers the head was trained with (None: the model's);
        # `precision`: the encoder's products, "int8", "bfloat16" or "float32" (None: what
        # this hardware serves: bfloat16 on AMX and CUDA, int8 on other CPUs).
        self.encoder = load_lean_encoder(encoder_path, device, head.layers, tuned, precision)
        width = self.encoder.word.shape[1] + BUCKETS + len(FLAG_NAMES)
        if head.w1.shape[0] != width:
            raise ValueError(
                f"the head's weights read {head.w1.shape[0]} features, this code makes {width} "
                f"({BUCKETS} n-gram buckets): retrain with `python -m assistant.safety.train`"
            )
        # One torch thread (process-wide, set once: changing it per call rebuilds the thread
        # pool, which costs more than the check). On a shared CPU more threads mostly wait on
        # each other, and concurrent requests run in parallel anyway. None keeps torch's.
        if threads:
            torch.set_num_threads(threads)

    @classmethod
    def load(
        cls,
        encoder_path: str,
        device: str | None = None,
        weights: Path = WEIGHTS_DIR,
        precision: str | None = None,
    ) -> SafetyClassifier:
        head = Head.load(weights)
        tuned = weights / head.meta["encoder"] if head.meta.get("encoder") else None
        return cls(head, encoder_path, device, tuned=tuned, precision=precision)

    def score(self, prepared: Prepared) -> Scores:
        return self.score_many([prepared])[0]

    def score_many(self, prepared: list[Prepared]) -> list[Scores]:
        """Scores for many texts, their windows embedded in one batch."""
        spans = [windows(p.text) for p in prepared]
        rows = chunk_features(self.encoder, prepared, spans)
        probs = self.head.probabilities(np.vstack(rows))
        out, start = [], 0
        for ws in spans:
            rows = probs[start : start + len(ws)]
            start += len(ws)
            by_class = dict(zip(self.head.classes, rows.max(axis=0).tolist(), strict=True))
            out.append(
                Scores(
                    unsafe=float(1.0 - rows[:, 0].min()),
                    categories={c: by_class[c] for c in CATEGORIES},
                )
            )
        return out

    def check_input(self, text: str) -> SafetyResult:
        return self.check_inputs([text])[0]

    def check_inputs(self, texts: list[str]) -> list[SafetyResult]:
        """Like `check_input` for each text, in order, with one batched encoder call."""
        prepared = [prepare(t) for t in texts]
        scores = self.score_many(prepared)
        return [
            self._input_result(t, p, s) for t, p, s in zip(texts, prepared, scores, strict=True)
        ]

    def _input_result(self, text: str, prepared: Prepared, scores: Scores) -> SafetyResult:
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
        decision, response = "allow", None
        if scores.unsafe >= limits.caution:
            decision = "allow_with_caution"
            reasons.insert(
                0,
                f"classifier: unsafe {scores.unsafe:.2f} "
                f"(caution from {limits.caution:.2f}), mostly {top}",
            )
            if top == "self_harm":
                # Below the refuse line the answer still goes out, but a message that leans
                # towards self-harm gets the resources with it: an unneeded helpline number
                # costs a line of text, a missed one can cost far more.
                response = SELF_HARM_RESOURCES
                reasons.append("self-harm: support and resources shown with the answer")
        elif prepared.encoded:
            decision = "allow_with_caution"
            reasons.append("encoded content was decoded and looks safe")
        return SafetyResult(decision, "safe", scores.categories, reasons, response)


def chunk_features(
    encoder, prepared: list[Prepared], spans: list[list[tuple[int, int]]]
) -> list[np.ndarray]:
    """What the head reads, one row per span of each text: embedding, n-grams, disguise flags."""
    vectors = embed_spans(encoder, [p.text for p in prepared], spans)
    return [
        np.hstack([vecs, side_features(p, text_spans)])
        for p, text_spans, vecs in zip(prepared, spans, vectors, strict=True)
    ]


def side_features(prepared: Prepared, spans: list[tuple[int, int]]) -> np.ndarray:
    """The rest of each span's row: its n-grams and the text's disguise flags (float32)."""
    flags = prepared.flags()
    return np.stack(
        [np.concatenate([ngram_features(prepared.text[lo:hi]), flags]) for lo, hi in spans]
    )


_LOCK = threading.Lock()
_SHARED: dict[tuple[str, str | None], SafetyClassifier] = {}


def shared_classifier(encoder_path: str, device: str | None = None) -> SafetyClassifier:
    """The process-wide classifier with the committed weights."""
    with _LOCK:
        key = (encoder_path, device)
        if key not in _SHARED:
            _SHARED[key] = SafetyClassifier.load(encoder_path, device)
        return _SHARED[key]


def windows(text: str) -> list[tuple[int, int]]:
    """Spans of consecutive sentences packed into chunks of at most WINDOW_CHARS characters:
    what the head reads of a text, in serving and in training alike."""
    if len(text) <= WINDOW_CHARS:
        return [(0, len(text))]
    chunks: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for lo, hi in _sentences(text):
        for piece in _split_long(lo, hi):
            if current and piece[1] - current[0] > WINDOW_CHARS:
                chunks.append(current)
                current = piece
            else:
                current = (current[0], piece[1]) if current else piece
    if current:
        chunks.append(current)
    return chunks or [(0, len(text))]


def _sentences(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return [(lo, hi) for lo, hi in spans if text[lo:hi].strip()]


def _split_long(lo: int, hi: int) -> list[tuple[int, int]]:
    if hi - lo <= WINDOW_CHARS:
        return [(lo, hi)]
    step = WINDOW_CHARS - WINDOW_OVERLAP
    return [(i, min(i + WINDOW_CHARS, hi)) for i in range(lo, hi - WINDOW_OVERLAP, step)]
