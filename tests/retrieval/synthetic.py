"""Documents with random unit vectors: index mechanics without loading a model."""

from __future__ import annotations

import numpy as np

from retrieval import DocumentInfo, ModelIdentity, PreparedDocument
from retrieval.types import ChunkSpan

DIM = 16
IDENTITY = ModelIdentity("synthetic", DIM, "f" * 64)


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def make_doc(doc_id: int, texts: list[str], **access) -> PreparedDocument:
    chunks, pos, parts = [], 0, []
    for n, text in enumerate(texts):
        chunks.append(ChunkSpan(n, f"Doc {doc_id}", None, pos, pos + len(text), text))
        parts.append(text)
        pos += len(text) + 2
    vectors = np.stack([unit(doc_id * 1000 + n) for n in range(len(texts))])
    info = DocumentInfo(doc_id, f"doc{doc_id}.txt", f"Doc {doc_id}", **access)
    return PreparedDocument(info, "\n\n".join(parts), chunks, [[] for _ in texts], vectors)
