"""Hashed character n-grams: cheap lexical features beside the embedding.

The sentence encoder is English-first; character n-grams carry word stems in any
language ("falsific", "umbring") and intent phrases ("how do i", "write a"), at the cost
of a lookup table. Hashing with crc32 keeps them stable across processes and versions.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

BUCKETS = 4096
_SPACES = re.compile(r"\s+")


def ngram_features(text: str, buckets: int = BUCKETS) -> np.ndarray:
    """L2-normalised, log-scaled counts of hashed 3-5 character n-grams of each word."""
    vec = np.zeros(buckets, dtype=np.float32)
    for word in _SPACES.sub(" ", text.lower()).split(" "):
        padded = f" {word} "
        for n in (3, 4, 5):
            for i in range(max(len(padded) - n + 1, 1)):
                vec[zlib.crc32(padded[i : i + n].encode()) % buckets] += 1.0
    vec = np.log1p(vec)
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm else vec
