"""Evaluation: per-category precision/recall/F1, benign false positives, latency, and recall
and false positives per writing system (Latin, Cyrillic, Arabic, Han...) and per length."""

from __future__ import annotations

import sys
import time
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from assistant.safety.dataset import Example
from assistant.safety.result import CATEGORIES, SafetyResult


@dataclass(slots=True)
class Report:
    n: int
    n_unsafe: int
    recall_unsafe: float  # unsafe examples labelled unsafe, whatever the category
    false_positive_rate: float  # benign examples labelled unsafe
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)
    per_script: dict[str, dict[str, float]] = field(default_factory=dict)
    per_length: dict[str, dict[str, float]] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)
    false_positives: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "n_unsafe": self.n_unsafe,
            "recall_unsafe": round(self.recall_unsafe, 4),
            "false_positive_rate": round(self.false_positive_rate, 4),
            "per_category": self.per_category,
            "per_script": self.per_script,
            "per_length": self.per_length,
            "latency_ms": self.latency_ms,
        }

    def format(self) -> str:
        lines = [
            f"examples {self.n} (unsafe {self.n_unsafe}, benign {self.n - self.n_unsafe})",
            f"recall on unsafe      {self.recall_unsafe:.3f}",
            f"false positive rate   {self.false_positive_rate:.3f}",
            f"{'category':<18} {'n':>4} {'precision':>9} {'recall':>7} {'f1':>6}",
        ]
        for name, m in self.per_category.items():
            p, r, f1 = m["precision"], m["recall"], m["f1"]
            lines.append(f"{name:<18} {int(m['n']):>4} {p:>9.3f} {r:>7.3f} {f1:>6.3f}")
        for title, groups in (("script", self.per_script), ("characters", self.per_length)):
            lines.append(f"{title:<18} {'n':>4} {'unsafe':>9} {'recall':>7} {'fpr':>6}")
            for name, m in groups.items():
                lines.append(
                    f"{name:<18} {int(m['n']):>4} {int(m['n_unsafe']):>9} "
                    f"{m['recall']:>7.3f} {m['false_positive_rate']:>6.3f}"
                )
        if self.latency_ms:
            lat = self.latency_ms
            lines.append(f"latency ms            p50 {lat['p50']:.1f}  p95 {lat['p95']:.1f}")
        lines += [f"missed: {t}" for t in self.misses]
        lines += [f"false positive: {t}" for t in self.false_positives]
        return "\n".join(lines)


def evaluate(
    examples: list[Example], check: Callable[[str], SafetyResult], progress: bool = False
) -> Report:
    """Run `check` on every example, timing each call (with a progress bar on stderr)."""
    results, seconds = [], []
    for ex in tqdm(examples, desc="eval", file=sys.stderr, disable=not progress):
        start = time.perf_counter()
        results.append(check(ex.text))
        seconds.append(time.perf_counter() - start)
    report = score(examples, results)
    ms = np.array(seconds) * 1000
    report.latency_ms = {
        "p50": round(float(np.percentile(ms, 50)), 2),
        "p95": round(float(np.percentile(ms, 95)), 2),
    }
    return report


def score(examples: list[Example], results: list[SafetyResult]) -> Report:
    unsafe = [ex.label == "unsafe" for ex in examples]
    flagged = [r.label == "unsafe" for r in results]
    pairs = list(zip(unsafe, flagged, strict=True))
    recall, false_positive_rate = _rates(pairs)
    report = Report(
        n=len(examples),
        n_unsafe=sum(unsafe),
        recall_unsafe=recall,
        false_positive_rate=false_positive_rate,
    )
    # A flagged example counts for its top category; an unflagged one for none.
    predicted = [r.top_category if f else None for r, f in zip(results, flagged, strict=True)]
    truth = [ex.category if ex.label == "unsafe" else None for ex in examples]
    for name in CATEGORIES:
        tp = sum(p == name and t == name for p, t in zip(predicted, truth, strict=True))
        n_pred = sum(p == name for p in predicted)
        n_true = sum(t == name for t in truth)
        precision = tp / n_pred if n_pred else 0.0
        recall = tp / n_true if n_true else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        report.per_category[name] = {
            "n": n_true,
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
        }
    report.per_script = _per_group([writing_system(ex.text) for ex in examples], pairs)
    bands = [length_band(ex.text) for ex in examples]
    report.per_length = _per_group(bands, pairs, order=BAND_NAMES)
    for ex, u, f in zip(examples, unsafe, flagged, strict=True):
        if u and not f:
            report.misses.append(f"[{ex.category}] {ex.text[:100]!r}")
        if f and not u:
            report.false_positives.append(f"[{ex.category}] {ex.text[:100]!r}")
    return report


def writing_system(text: str) -> str:
    """A text's writing system: "latin", or for a text with more than 30% of its letters
    beyond Latin Extended-B (U+024F) the commonest script among those ("cyrillic", "arabic",
    "han", "kana", "hangul", "thai", "georgian"...).
    The encoder's vocabulary is English: these scripts reach it in small pieces or as
    [UNK] (Thai 53% of tokens, Han 56%), and are caught less often (validation: 0.770
    recall on non-Latin lines, 0.930 on Latin ones), while test.jsonl is Latin script
    almost throughout. Reported apart so an average does not hide them."""
    letters = [ch for ch in text if ch.isalpha()]
    beyond = [ch for ch in letters if ord(ch) > 0x24F]
    if not letters or len(beyond) / len(letters) <= 0.3:
        return "latin"
    counts = Counter(_script(ch) for ch in beyond)
    commonest = counts.most_common(1)[0][0]
    # Japanese writes Han with kana, Chinese never uses kana: Han among kana is Japanese.
    return "kana" if commonest == "han" and counts["kana"] else commonest


def _script(letter: str) -> str:
    """The script of one letter, from its Unicode name: "CYRILLIC SMALL LETTER A" ->
    "cyrillic"; width forms are named for their script ("HALFWIDTH KATAKANA LETTER A")."""
    words = unicodedata.name(letter, "other").lower().split()
    word = words[1] if words[0] in ("halfwidth", "fullwidth") and len(words) > 1 else words[0]
    return _SCRIPT_NAMES.get(word, word)


_SCRIPT_NAMES = {"cjk": "han", "hiragana": "kana", "katakana": "kana"}


# Length bands, in characters. A text over classifier.WINDOW_CHARS (160) is read as several
# windows and the worst one decides, so long benign texts have more chances to be refused:
# on non-Latin validation text, about half of the benign lines over 200 characters were.
LENGTH_BANDS = ((80, "<80"), (200, "80-199"), (500, "200-499"))
BAND_NAMES = (*(name for _, name in LENGTH_BANDS), ">=500")


def length_band(text: str) -> str:
    """The length band of a text: "<80", "80-199", "200-499" or ">=500" characters."""
    return next((name for limit, name in LENGTH_BANDS if len(text) < limit), ">=500")


def _per_group(
    keys: list[str], pairs: list[tuple[bool, bool]], order: tuple[str, ...] = ()
) -> dict[str, dict[str, float]]:
    """Recall and false positives of the (is unsafe, was flagged) pairs of each key, keys in
    `order` if given, else by name."""
    groups: dict[str, list[tuple[bool, bool]]] = {}
    for key, pair in zip(keys, pairs, strict=True):
        groups.setdefault(key, []).append(pair)
    out = {}
    for name in [k for k in order if k in groups] if order else sorted(groups):
        recall, false_positive_rate = _rates(groups[name])
        out[name] = {
            "n": len(groups[name]),
            "n_unsafe": sum(u for u, _ in groups[name]),
            "recall": round(recall, 4),
            "false_positive_rate": round(false_positive_rate, 4),
        }
    return out


def _rates(pairs: list[tuple[bool, bool]]) -> tuple[float, float]:
    """(recall on unsafe, false positive rate on benign) of (is unsafe, was flagged) pairs."""
    n_unsafe = sum(u for u, _ in pairs)
    recall = sum(u and f for u, f in pairs) / max(n_unsafe, 1)
    return recall, sum(f and not u for u, f in pairs) / max(len(pairs) - n_unsafe, 1)
