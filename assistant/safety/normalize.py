"""Undo the cheap disguises attackers use before anything is classified.

NFKC folds full-width and mathematical letters; invisible and bidi controls are stripped
(and Unicode tag characters, which smuggle ASCII invisibly, are decoded); look-alike
Cyrillic/Greek letters and leetspeak are folded inside Latin words; letters spelled out
one by one ("i g n o r e") are joined back into words.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

_INVISIBLE = re.compile("[\u00ad\u034f\u180e\u200b-\u200f\u2060-\u2064\ufeff]")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_TAGS = re.compile("[\U000e0000-\U000e007f]+")

# Cyrillic and Greek letters that render like Latin ones.
_HOMOGLYPHS = str.maketrans(
    {
        "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "х": "x", "у": "y", "і": "i",
        "ј": "j", "ѕ": "s", "к": "k", "м": "m", "т": "t", "в": "b", "н": "h", "ԁ": "d",
        "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
        "С": "C", "Т": "T", "Х": "X", "І": "I", "ο": "o", "α": "a", "ε": "e", "ι": "i",
        "κ": "k", "ν": "v", "ρ": "p", "τ": "t", "υ": "u", "Α": "A", "Β": "B", "Ε": "E",
        "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Χ": "X",
    }
)  # fmt: skip
_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}
)
_WORD = re.compile(r"[^\s]+")
_LATIN = re.compile(r"[A-Za-z]")
_NON_LATIN_LETTER = re.compile(r"[\u0370-\u03ff\u0400-\u04ff]")
# A word of letters mixed with leet digits, e.g. "1gn0re", "7h3"; not "Q4", "2024", "mp3".
_LEET_WORD = re.compile(
    r"(?<![\w@$])(?=[\w@$]*[A-Za-z])(?=[\w@$]*[013457@$])(?![$@])[A-Za-z013457@$]{3,}(?![\w@$])"
)
_LEET_NUMBER = re.compile(r"(?<![\w.,])[013457]{1,3}(?![\w.,%])")
# Four or more single characters separated by one space, or by - . _ *
_SPELLED = re.compile(r"(?<!\S)(?:[^\W_](?:[ \-._*])){3,}[^\W_](?!\S)")


@dataclass(slots=True)
class Normalized:
    text: str
    reasons: list[str] = field(default_factory=list)
    hidden: str = ""  # text that was smuggled in invisible tag characters


def clean_unicode(text: str) -> Normalized:
    """Decode tag-smuggled text, apply NFKC, strip invisible and bidi control characters."""
    reasons: list[str] = []
    hidden = "".join(chr(ord(c) - 0xE0000) for m in _TAGS.finditer(text) for c in m.group())
    if hidden.strip():
        reasons.append("hidden text in invisible Unicode tag characters was decoded")
    text = _TAGS.sub("", text)
    folded = unicodedata.normalize("NFKC", text)
    if folded != text:
        reasons.append("full-width or stylised characters were folded (NFKC)")
    text, n_invisible = _INVISIBLE.subn("", folded)
    text, n_bidi = _BIDI.subn("", text)
    if n_invisible:
        reasons.append(f"{n_invisible} invisible character(s) were stripped")
    if n_bidi:
        reasons.append(f"{n_bidi} bidirectional control character(s) were stripped")
    return Normalized(text=text, reasons=reasons, hidden=hidden)


def fold_disguises(text: str, reasons: list[str]) -> str:
    """Join spelled-out letters, fold look-alike letters and leetspeak; note what was done."""
    return _fold_words(_join_spelled_out(text, reasons), reasons)


def _fold_words(text: str, reasons: list[str]) -> str:
    homoglyphs = 0

    def fold_script(match: re.Match[str]) -> str:
        nonlocal homoglyphs
        word = match.group()
        if _LATIN.search(word) and _NON_LATIN_LETTER.search(word):
            homoglyphs += 1
            return word.translate(_HOMOGLYPHS)
        return word

    text = _WORD.sub(fold_script, text)
    if homoglyphs:
        reasons.append(f"look-alike letters were folded in {homoglyphs} word(s)")
    text, leet = _LEET_WORD.subn(lambda m: m.group().translate(_LEET), text)
    if leet >= 2:
        # In a text written in leetspeak, the all-digit words are disguised too ("4", "50").
        text = _LEET_NUMBER.sub(lambda m: m.group().translate(_LEET), text)
    if leet:
        reasons.append(f"leetspeak was folded in {leet} word(s)")
    return text


def _join_spelled_out(text: str, reasons: list[str]) -> str:
    tokens = text.split()
    if len(tokens) >= 6 and sum(len(t) == 1 for t in tokens) >= 0.6 * len(tokens):
        # The whole text is spelled out: single spaces join letters, wider gaps split words.
        reasons.append("letters spelled out one by one were joined")
        return " ".join(w.replace(" ", "") for w in re.split(r"\s{2,}", text.strip()))
    joined = 0

    def join(match: re.Match[str]) -> str:
        nonlocal joined
        word = re.sub(r"[ \-._*]", "", match.group())
        if sum(c.isalpha() for c in word) < 3:
            return match.group()
        joined += 1
        return word

    text = _SPELLED.sub(join, text)
    if joined:
        reasons.append("letters spelled out one by one were joined")
    return text
