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
