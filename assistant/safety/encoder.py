"""The sentence encoder the classifier heads read: the bundled all-MiniLM-L6-v2.

One instance per process (and per layer count), loaded on first use under a lock so
concurrent requests share it. The classifier may use only the first `layers` transformer
layers: the heads are trained on whatever the encoder gives, and fewer layers are faster.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

_LOCK = threading.Lock()
_MODELS: dict[tuple[str, str, int], SentenceTransformer] = {}


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


def embed_spans(
    model: SentenceTransformer, texts: list[str], spans: list[list[tuple[int, int]]]
) -> list[np.ndarray]:
    """For each text, one L2-normalised embedding per character span, from ONE encoder pass.

    The whole text goes through the encoder once (in segments when it is longer than
    MAX_TOKENS) and each span's vector is the mean of the token states inside it, so
    chunks of a long text cost no extra encoder work.
    """
    import torch

    tokenizer = model.tokenizer
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
    offsets = batch.pop("offset_mapping")
    owner = batch.pop("overflow_to_sample_mapping").tolist()
    device = next(model.parameters()).device
    with torch.inference_mode():
        inputs = {k: v.to(device) for k, v in batch.items()}
        states = model[0].auto_model(**inputs).last_hidden_state.float().cpu()
    starts, ends = offsets[..., 0], offsets[..., 1]
    real = (ends > starts) & batch["attention_mask"].bool()  # no special or padding tokens
    out: list[np.ndarray] = []
    for i, text_spans in enumerate(spans):
        rows = [r for r, o in enumerate(owner) if o == i]
        vectors = np.zeros((len(text_spans), states.shape[-1]), dtype=np.float32)
        for j, (lo, hi) in enumerate(text_spans):
            mask = real[rows] & (starts[rows] >= lo) & (ends[rows] <= hi)
            if not mask.any():  # a span between tokens: take the tokens overlapping it
                mask = real[rows] & (starts[rows] < hi) & (ends[rows] > lo)
            if mask.any():
                vectors[j] = states[rows][mask].mean(dim=0).numpy()
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        out.append(vectors / np.where(norms > 0, norms, 1.0))
    return out
