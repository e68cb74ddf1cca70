"""Text -> what the classifier reads: cleaned, decoded, de-disguised, plus cheap flags.

Training and inference both go through `prepare`, so the model learns on exactly the
text it will see.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from assistant.safety.decode import decode_payloads
from assistant.safety.normalize import clean_unicode, fold_disguises

# Names of the cheap features appended to the embedding, in order.
FLAG_NAMES = ("disguised", "encoded")


@dataclass(slots=True)
class Prepared:
    text: str
    reasons: list[str] = field(default_factory=list)
    disguised: bool = False
    encoded: bool = False

    def flags(self) -> np.ndarray:
        return np.array([self.disguised, self.encoded], dtype=np.float32)


def prepare(text: str) -> Prepared:
    cleaned = clean_unicode(text)
    body = cleaned.text + (f"\n{cleaned.hidden}" if cleaned.hidden.strip() else "")
    decoded = decode_payloads(body)
    reasons = cleaned.reasons + decoded.reasons
    folded_reasons: list[str] = []
    folded = fold_disguises(decoded.text, folded_reasons)
    # Decoded payloads may themselves hide disguises, so fold after decoding.
    return Prepared(
        text=folded,
        reasons=reasons + folded_reasons,
        disguised=bool(cleaned.reasons or folded_reasons),
        encoded=bool(decoded.payloads),
    )
