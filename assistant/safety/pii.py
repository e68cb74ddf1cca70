"""Personal data and secrets found by pattern, with checksums where the format has one.

Rules are right here: an IBAN either passes mod-97 or it does not, a card number passes
Luhn or it does not. Redaction keeps any value that already appears in an allowed source
(the user's own message, the retrieved passages), because repeating it discloses nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class PiiMatch:
    kind: str
    start: int
    end: int
    value: str

    @property
    def key(self) -> str:
        """The value as compared against allowed sources: case and separators ignored."""
        if self.kind in ("email", "secret", "private_key"):
            return self.value.lower()
        return re.sub(r"[^0-9A-Za-z]", "", self.value).upper()


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _card_ok(value: str) -> bool:
    digits = re.sub(r"\D", "", value)
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _iban_ok(value: str) -> bool:
    iban = re.sub(r"\s", "", value).upper()
    if not 15 <= len(iban) <= 34:
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _phone_ok(value: str) -> bool:
    digits = re.sub(r"\D", "", value)
    return 9 <= len(digits) <= 15 and not re.fullmatch(r"(19|20)\d\d[-./]\d\d[-./]\d\d", value)


EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_PATTERNS: list[tuple[str, re.Pattern[str], Callable[[str], bool] | None]] = [
    (
        "private_key",
        re.compile(
            # A key cut off before its END line is still a key.
            r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----"
            r"(?:[\s\S]*?-----END (?:[A-Z]+ )?PRIVATE KEY-----|[\s\S]*)"
        ),
        None,
    ),
    (
        "secret",
        re.compile(
            r"\b(?:AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,}|xox[abprs]-[A-Za-z0-9-]{10,}"
            r"|sk-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{35}"
            r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
        ),
        None,
    ),
    (
        "secret",
        re.compile(
            r"(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|token)"
            r"\s*[:=]\s*[\"']?[^\s\"']{5,}[^\s\"'.,;:!?)]"
        ),
        None,
    ),
    ("email", EMAIL, None),
    ("iban", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b"), _iban_ok),
    ("card_number", re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"), _card_ok),
    ("us_ssn", re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b"), None),
    (
        "phone",
        # International (+44 ...), bracketed area code, national trunk 0, or US 555-123-4567:
        # bare digit groups are too often amounts, ids or dates.
        re.compile(
            r"(?<![\w+])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){2,4}"
            r"|\(\d{2,4}\)[ .-]?\d{3,4}[ .-]?\d{3,4}|0\d{2,4}[ .-]\d{3,4}[ .-]?\d{3,4}"
            r"|\d{3}[.-]\d{3}[.-]\d{4})\b"
        ),
        _phone_ok,
    ),
]


def find_pii(text: str) -> list[PiiMatch]:
    """Non-overlapping matches, earlier patterns (more specific) winning overlaps."""
    found: list[PiiMatch] = []
    for kind, pattern, valid in _PATTERNS:
        for m in pattern.finditer(text):
            if valid is not None and not valid(m.group()):
                continue
            if any(m.start() < f.end and f.start < m.end() for f in found):
                continue
            found.append(PiiMatch(kind, m.start(), m.end(), m.group()))
    return sorted(found, key=lambda f: f.start)


def allowed_keys(sources: Iterable[str]) -> set[str]:
    return {match.key for source in sources for match in find_pii(source)}


def redact(text: str, allowed: set[str]) -> tuple[str, list[PiiMatch]]:
    """The text with every match not in `allowed` replaced, and the matches replaced."""
    removed = [m for m in find_pii(text) if m.key not in allowed]
    out, last = [], 0
    for m in removed:
        out.append(text[last : m.start])
        out.append(f"[redacted {m.kind.replace('_', ' ')}]")
        last = m.end
    out.append(text[last:])
    return "".join(out), removed
