"""The sentence encoder the classifier heads read: the bundled all-MiniLM-L6-v2.

One instance per process, loaded on first use under a lock so concurrent requests share
it. The injection gate embeds whole sentences with it; the classifier reads token states of
its first `layers` transformer layers through `LeanEncoder` (the heads are trained on
whatever the encoder gives, and fewer layers are faster), with those layers fine-tuned for
the classifier when the weights directory has them (the injection gate and retrieval keep
the model's own).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

    from assistant.safety.lean_encoder import LeanEncoder

_LOCK = threading.Lock()
_MODELS: dict[tuple[str, str, int], SentenceTransformer] = {}
_LEAN: dict[tuple[str, str, int, str, str], LeanEncoder] = {}


def load_encoder(path: str, device: str | None = None, layers: int = 0) -> SentenceTransformer:
    """The shared encoder for `path`; `layers` > 0 keeps only that many transformer layers."""
    import torch
    from sentence_transformers import SentenceTransformer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    key = (path, device, layers)
    with _LOCK:
        if key not in _MODELS:
            model = SentenceTransformer(path, device=device, local_files_only=True)
            if layers:
                encoder = model[0].auto_model.encoder
                encoder.layer = encoder.layer[:layers]
            _MODELS[key] = model.eval()
        return _MODELS[key]


def load_lean_encoder(
    path: str,
    device: str | None = None,
    layers: int = 0,
    tuned: Path | None = None,
    precision: str | None = None,
) -> LeanEncoder:
    """The first `layers` layers of the shared encoder for `path`, ready for `embed_spans`.

    `tuned`: a safetensors file of fine-tuned layer weights to use instead of the model's.
    `precision`: "int8", "bfloat16" or "float32" (`lean_encoder.PRECISIONS`); None runs what
    serving runs on this hardware (`served_precision`).
    """
    from assistant.safety.lean_encoder import PRECISIONS, LeanEncoder, served_precision

    model = load_encoder(path, device)
    precision = precision or served_precision(model.device)
    if precision not in PRECISIONS:
        raise ValueError(f"unknown encoder precision {precision!r}: use one of {list(PRECISIONS)}")
    key = (path, str(model.device), layers, str(tuned or ""), precision)
    with _LOCK:
        if key not in _LEAN:
            lean = LeanEncoder(
                model[0].auto_model,
                model.tokenizer,
                layers,
                model.device,
                PRECISIONS[precision],
                tuned=load_tuned(tuned) if tuned else None,
                int8=precision == "int8",
            )
            lean.warm_up(MAX_TOKENS)
            _LEAN[key] = lean
        return _LEAN[key]


def load_tuned(path: Path) -> dict:
    """Fine-tuned layer weights (float16 on disk) as float32 tensors by name."""
    import torch
    from safetensors.torch import load_file

    return {name: t.to(torch.float32) for name, t in load_file(str(path)).items()}


def embed(model: SentenceTransformer, texts: list[str]) -> np.ndarray:
    """L2-normalised float32 embeddings, one row per text."""
    vectors = model.encode(
        texts,
        batch_size=32,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.asarray(vectors, dtype=np.float32)


# The encoder's own limit; a longer text is read as overlapping segments of this many tokens.
MAX_TOKENS = 256
_STRIDE = 32


@dataclass(slots=True)
class Segments:
    """Texts tokenized as the classifier reads them: a text longer than MAX_TOKENS becomes
    segments of MAX_TOKENS overlapping by _STRIDE, one row each, padded to the longest."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    owner: list[int]  # the text of each row
    starts: np.ndarray  # [rows, tokens] character offsets of each token
    ends: np.ndarray
    real: np.ndarray  # neither a special token nor padding

    def pooling(self, text: int, spans: list[tuple[int, int]]) -> tuple[list[int], np.ndarray]:
        """The rows of text number `text`, and which of their tokens (rows run together)
        each span pools: the token states of those rows, reshaped to [-1, hidden], times
        these weights give the span sums."""
        rows = [r for r, o in enumerate(self.owner) if o == text]
        weights = span_weights(
            self.starts[rows].ravel(), self.ends[rows].ravel(), self.real[rows].ravel(), spans
        )
        return rows, weights


def segments(tokenizer, texts: list[str]) -> Segments:
    """Tokenize `texts` the one way serving (`embed_spans`) and training (`finetune.pool`)
    read them."""
    batch = tokenizer(
        texts,
        padding=True,
        truncation=True,
        max_length=MAX_TOKENS,
        stride=_STRIDE,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        return_tensors="pt",
    )
    offsets = batch["offset_mapping"].numpy()
    starts, ends = offsets[..., 0], offsets[..., 1]
    mask = batch["attention_mask"]
    return Segments(
        input_ids=batch["input_ids"],
        attention_mask=mask,
        owner=batch["overflow_to_sample_mapping"].tolist(),
        starts=starts,
        ends=ends,
        real=(ends > starts) & mask.numpy().astype(bool),
    )


def embed_spans(
    encoder: LeanEncoder, texts: list[str], spans: list[list[tuple[int, int]]]
) -> list[np.ndarray]:
    """For each text, one L2-normalised embedding per character span, from ONE encoder pass.

    The whole text goes through the encoder once (in segments when it is longer than
    MAX_TOKENS) and each span's vector is the mean of the token states inside it, so
    chunks of a long text cost no extra encoder work.
    """
    segs = segments(encoder.tokenizer, texts)
    states = encoder(segs.input_ids, segs.attention_mask).numpy()
    out: list[np.ndarray] = []
    for i, text_spans in enumerate(spans):
        rows, weights = segs.pooling(i, text_spans)
        tokens = states[rows].reshape(-1, states.shape[-1])
        vectors = (weights @ tokens) / np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        out.append(vectors / np.where(norms > 0, norms, 1.0))
    return out


def span_weights(
    starts: np.ndarray, ends: np.ndarray, real: np.ndarray, spans: list[tuple[int, int]]
) -> np.ndarray:
    """[spans, tokens] 0/1: which of a text's tokens (character offsets, `real` = neither
    special nor padding) each span pools. Fine-tuning pools with it too."""
    lo = np.array([s[0] for s in spans])[:, None]
    hi = np.array([s[1] for s in spans])[:, None]
    inside = real & (starts >= lo) & (ends <= hi)
    # A span between tokens takes the tokens overlapping it instead.
    overlap = real & (starts < hi) & (ends > lo)
    return np.where(inside.any(axis=1, keepdims=True), inside, overlap).astype(np.float32)
