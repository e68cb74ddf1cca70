"""BM25 over the same chunks as the vectors (bm25s), with a mask evaluated in the scoring."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers him his how i if in into is it its itself just
    me more most my no nor not now of off on once only or other our ours out over own same she
    should so some such than that the their theirs them then there these they this those through
    to too under until up very was we were what when where which while who whom why will with
    would you your yours""".split()
)


def _stem(word: str) -> str:
    """A light suffix stripper: enough to match 'days'/'day', 'approved'/'approve'."""
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, replacement in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", "e")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + replacement
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


def chunk_tokens(section: str, text: str) -> list[str]:
    """What BM25 indexes for a chunk: its breadcrumb and its text."""
    return tokenize(f"{section}\n{text}")


class Bm25:
    """Scores every chunk for a query; rows outside the mask score zero and are never ranked.

    Built by the writer at commit and saved with the generation, so readers only load it.
    `tokens` (kept when built in this process) lets the next commit tokenize new rows only.
    """

    def __init__(self, model, size: int, tokens: list[list[str]] | None) -> None:
        self._model = model
        self.size = size
        self.tokens = tokens

    @classmethod
    def build(cls, tokens: list[list[str]]) -> Bm25:
        import bm25s

        model = bm25s.BM25()
        # bm25s needs a non-empty vocabulary; a placeholder token matches no query.
        model.index([t or ["\x00"] for t in tokens] or [["\x00"]], show_progress=False)
        return cls(model, len(tokens), tokens)

    @classmethod
    def load(cls, folder: Path, size: int) -> Bm25:
        import bm25s

        return cls(bm25s.BM25.load(str(folder)), size, None)

    def save(self, folder: Path) -> list[Path]:
        """Writes the index files into `folder`; returns them so the caller can fsync."""
        self._model.save(str(folder))
        return sorted(p for p in folder.iterdir() if p.is_file())

    def top(self, query: str, k: int, mask: np.ndarray | None) -> list[tuple[int, float]]:
        tokens = [t for t in tokenize(query) if t in self._model.vocab_dict]
        if not tokens or self.size == 0:
            return []
        scores = np.asarray(self._model.get_scores(tokens), dtype=np.float32)[: self.size]
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        k = min(k, int(np.count_nonzero(scores > 0)))
        if k == 0:
            return []
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(i), float(scores[i])) for i in best]
