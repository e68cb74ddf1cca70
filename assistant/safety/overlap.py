"""Near-duplicates between splits: character 4-gram Jaccard similarity.

Exact-match checks miss "Write a post explaining why immigrants are ruining our company"
against the same sentence without its full stop, or with one word swapped. Training data
this close to a held-out example would make the held-out numbers a memory test.
"""

from __future__ import annotations

import re

# At or above this similarity two texts count as the same example.
NEAR_DUPLICATE = 0.45
_SPACES = re.compile(r"\s+")


def shingles(text: str) -> frozenset[str]:
    t = _SPACES.sub(" ", text.lower()).strip()
    return frozenset(t[i : i + 4] for i in range(max(len(t) - 3, 1)))


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / max(len(a | b), 1)


class NearDuplicates:
    """Answers "is this text a near-duplicate of one of these?" for a fixed set of texts."""

    def __init__(self, texts: list[str]) -> None:
        self._texts = [(t, shingles(t)) for t in texts]

    def closest(self, text: str) -> tuple[float, str]:
        own = shingles(text)
        return max(((similarity(own, s), t) for t, s in self._texts), default=(0.0, ""))

    def __contains__(self, text: str) -> bool:
        return self.closest(text)[0] >= NEAR_DUPLICATE
