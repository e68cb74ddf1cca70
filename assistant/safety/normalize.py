"""Undo the cheap disguises attackers use before anything is classified.

NFKC folds full-width and mathematical letters; invisible and bidi controls are stripped
(and Unicode tag characters, which smuggle ASCII invisibly, are decoded); look-alike
Cyrillic/Greek letters and leetspeak are folded inside Latin words; letters spelled out
one by one ("i g n o r e") are joined back into words.

Folding is always done; it is reported (and counts as a disguise, a feature the classifier
reads) only where it undid one. Many writing systems use these characters for spelling:
the zero-width non-joiner in Persian and Indic words, zero-width spaces between Thai words,
direction marks in Hebrew and Arabic text, full-width punctuation and letters ("ＶＰＮ")
in Chinese, Japanese and Korean text. Counted as disguises, they made 18% of the benign
lines of data/test_scripts.jsonl look obfuscated.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

_INVISIBLE = re.compile("[\u00ad\u034f\u180e\u200b-\u200d\u2060-\u2064\ufeff]+")
_BIDI = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Overrides reverse the order letters are shown in: never needed to write any language.
_OVERRIDES = re.compile("[\u202d\u202e]")
_RTL = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")
_CJK = re.compile("[\u3000-\u30ff\u3400-\u9fff\uac00-\ud7af\uff66-\uff9f]")
_FULLWIDTH_LETTER = re.compile("[\uff21-\uff3a\uff41-\uff5a]")
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
# A word of letters mixed with leet digits, e.g. "1gn0re", "7h3"; not "Q4" or "2024", and
# not the name and domain around an email's "@" or inside a file or host name.
_LEET_WORD = re.compile(
    r"(?<![\w@$])(?<!\w\.)(?=[\w@$]*[A-Za-z])(?=[\w@$]*[013457@$])(?![$@])"
    r"[A-Za-z013457@$]{3,}(?![\w@$])(?!\.\w)"
)
# Shapes that are ordinary outside leetspeak: a number with a unit or ordinal ("50th",
# "300ms", "135k", "2fa"), a name with a version ("base64", "ipv4", "mp3"), a size
# ("140x70"). Folded only in a text otherwise written in leetspeak ("4ll" beside "1gn0r3").
_ORDINARY_SHAPE = re.compile(r"[0-9]+[A-Za-z]{1,3}|[A-Za-z]+[0-9]+|[0-9]+x[0-9]+")
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
    stylised = _stylised_letters(text) if folded != text else 0
    if stylised:
        reasons.append(f"{stylised} full-width or stylised letter(s) were folded (NFKC)")
    hiding = _hiding_invisibles(folded)
    bidi = _disguising_bidi(folded)
    text = _BIDI.sub("", _INVISIBLE.sub("", folded))
    if hiding:
        reasons.append(f"{hiding} invisible character(s) inside Latin words were stripped")
    if bidi:
        reasons.append(f"{bidi} bidirectional control character(s) were stripped")
    return Normalized(text=text, reasons=reasons, hidden=hidden)


def _stylised_letters(text: str) -> int:
    """Letters that NFKC turns into ASCII ones ("ｉ", "𝐢", "ⓘ"); two or more count. Full-width
    letters count only outside Chinese, Japanese and Korean text, where they are ordinary."""
    skip_fullwidth = bool(_CJK.search(text))
    count = 0
    for ch in text:
        if ch.isascii() or (skip_fullwidth and _FULLWIDTH_LETTER.match(ch)):
            continue
        if _LATIN.fullmatch(unicodedata.normalize("NFKC", ch)):
            count += 1
    return count if count >= 2 else 0


def _hiding_invisibles(text: str) -> int:
    """Invisible characters that split a Latin word: "ig\\u200bnore". Between letters of
    other scripts they are spelling (Persian ZWNJ, Thai word breaks); elsewhere (a
    byte-order mark in front, an emoji joiner) they split no word."""
    count = 0
    for m in _INVISIBLE.finditer(text):
        around = text[max(m.start() - 1, 0) : m.start()] + text[m.end() : m.end() + 1]
        splits = len(around) == 2 and all(c.isalnum() for c in around)
        if splits and any(c.isascii() for c in around):
            count += len(m.group())
    return count


def _disguising_bidi(text: str) -> int:
    """Direction overrides always; marks, embeddings and isolates only outside Hebrew and
    Arabic-script text, which needs them where it quotes left-to-right words."""
    if _RTL.search(text):
        return len(_OVERRIDES.findall(text))
    return len(_BIDI.findall(text))


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
    leet = sum(not _ORDINARY_SHAPE.fullmatch(m.group()) for m in _LEET_WORD.finditer(text))
    if not leet:
        return text
    # In a text written in leetspeak, the ordinary shapes and the all-digit words are
    # disguised too ("4ll", "4", "50").
    everything = leet >= 2

    def fold(match: re.Match[str]) -> str:
        word = match.group()
        return word if _ORDINARY_SHAPE.fullmatch(word) and not everything else word.translate(_LEET)

    text = _LEET_WORD.sub(fold, text)
    if everything:
        text = _LEET_NUMBER.sub(lambda m: m.group().translate(_LEET), text)
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
