"""Near-duplicates between splits: character 4-gram Jaccard similarity.

Exact-match checks miss "Write a post explaining why immigrants are ruining our company"
against the same sentence without its full stop, or with one word swapped. Training data
this close to a held-out example would make the held-out numbers a memory test.
"""

from __future__ import annotations

import re

import numpy as np

# At or above this similarity two texts count as the same example.
NEAR_DUPLICATE = 0.45
_SPACES = re.compile(r"\s+")


def shingles(text: str) -> frozenset[str]:
    t = _SPACES.sub(" ", text.lower()).strip()
    return frozenset(t[i : i + 4] for i in range(max(len(t) - 3, 1)))


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / max(len(a | b), 1)


class NearDuplicates:
    """Answers "is this text a near-duplicate of one of these?" for a fixed set of texts.

    Each shingle lists the texts that have it, so a query counts its overlap with every text
    at once (only texts sharing a shingle are touched): exact Jaccard, thousands of queries
    a second against thousands of texts, where comparing set against set took minutes.
    """

    def __init__(self, texts: list[str]) -> None:
        self._texts = texts
        self._sizes = np.zeros(len(texts), dtype=np.int64)
        lists: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            own = shingles(text)
            self._sizes[i] = len(own)
            for gram in own:
                lists.setdefault(gram, []).append(i)
        self._holders = {gram: np.array(ids, dtype=np.int64) for gram, ids in lists.items()}

    def closest(self, text: str) -> tuple[float, str]:
        own = shingles(text)
        found = [self._holders[g] for g in own if g in self._holders]
        if not found:
            return 0.0, ""
        shared = np.bincount(np.concatenate(found), minlength=len(self._texts))
        jaccard = shared / np.maximum(self._sizes + len(own) - shared, 1)
        best = int(np.argmax(jaccard))
        return float(jaccard[best]), self._texts[best]

    def __contains__(self, text: str) -> bool:
        return self.closest(text)[0] >= NEAR_DUPLICATE
