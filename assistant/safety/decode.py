"""Find encoded payloads (base64, hex, URL-encoding, rot13) and decode them in place.

A payload is only replaced when it decodes to readable text, so hashes, ids and keys stay
as they are. Decoding runs twice, which unwraps one level of nesting (hex inside base64).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import urllib.parse
from dataclasses import dataclass, field

_HEX = re.compile(r"(?<![0-9A-Za-z])(?:[0-9A-Fa-f]{2}[ :]?){8,}(?![0-9A-Za-z])")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}={0,2}")
_URL_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_SEGMENTS = re.compile(r"[^:\n]+")
_WORDS = re.compile(r"[a-z]{2,}")
# Frequent English words: rot13 text has almost none, its decoding has many.
_COMMON = frozenset(
    "the an and or to of in on for with is are was be it this that you your me my how what "
    "do does can will not all any now from as at by if so tell give make write please their "
    "them they our we us who which when where why have has list show".split()
)


@dataclass(slots=True)
class Decoded:
    text: str
    payloads: list[tuple[str, str]] = field(default_factory=list)  # (encoding, decoded text)

    @property
    def reasons(self) -> list[str]:
        return [f"{kind} payload decoded: {text[:60]!r}" for kind, text in self.payloads]


def decode_payloads(text: str) -> Decoded:
    """The text with every readable encoded payload replaced by its decoding."""
    result = Decoded(text=text)
    for _ in range(2):
        before = len(result.payloads)
        result.text = _replace(_HEX, result.text, _from_hex, "hex", result.payloads)
        result.text = _replace(_BASE64, result.text, _from_base64, "base64", result.payloads)
        result.text = _decode_url(result.text, result.payloads)
        result.text = _decode_rot13(result.text, result.payloads)
        if len(result.payloads) == before:
            break
    return result


def _replace(pattern: re.Pattern[str], text: str, decode, kind: str, found: list) -> str:
    def sub(match: re.Match[str]) -> str:
        decoded = decode(match.group())
        if decoded is None:
            return match.group()
        found.append((kind, decoded))
        return decoded

    return pattern.sub(sub, text)


def _readable(raw: bytes) -> str | None:
    nested = _nested(raw)
    if nested is not None:
        return nested
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.strip():
        return None
    letters = sum(c.isalpha() or c.isspace() for c in text)
    printable = sum(c.isprintable() or c in "\n\t" for c in text)
    if printable < len(text) * 0.95 or letters < len(text) * 0.7:
        return None
    # Real words, not base64 that happened to decode into letters.
    return text if " " in text.strip() or len(text) < 12 else None


def _nested(raw: bytes) -> str | None:
    """A payload that decodes to another readable payload (hex inside base64, ...)."""
    if len(raw) < 16 or not raw.isascii():
        return None
    text = raw.decode("ascii").strip()
    if _HEX.fullmatch(text) and _from_hex(text) is not None:
        return text
    if _BASE64.fullmatch(text) and _from_base64(text) is not None:
        return text
    return None


def _from_hex(chunk: str) -> str | None:
    try:
        return _readable(bytes.fromhex(re.sub(r"[ :]", "", chunk)))
    except ValueError:
        return None


def _from_base64(chunk: str) -> str | None:
    padded = chunk + "=" * (-len(chunk) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None
    return _readable(raw)


def _decode_url(text: str, found: list) -> str:
    if len(_URL_ESCAPE.findall(text)) < 3:
        return text
    decoded = urllib.parse.unquote(text)
    found.append(("url-encoded", decoded))
    return decoded


def _english_score(text: str) -> float:
    words = _WORDS.findall(text.lower())
    return sum(w in _COMMON for w in words) / max(len(words), 4)


def _is_rot13(text: str) -> bool:
    rotated = _english_score(codecs.encode(text, "rot13"))
    return rotated >= 0.2 and rotated > 3 * _english_score(text)


def _decode_rot13(text: str, found: list) -> str:
    if _is_rot13(text):
        decoded = codecs.encode(text, "rot13")
        found.append(("rot13", decoded.strip()))
        return decoded

    # A plain-text preamble ("rot13: ...") followed by the payload.
    def sub(match: re.Match[str]) -> str:
        segment = match.group()
        if len(_WORDS.findall(segment)) >= 4 and _is_rot13(segment):
            found.append(("rot13", codecs.encode(segment, "rot13").strip()))
            return codecs.encode(segment, "rot13")
        return segment

    return _SEGMENTS.sub(sub, text)
