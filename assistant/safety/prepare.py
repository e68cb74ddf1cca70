"""Text -> what the classifier reads: cleaned, decoded, de-disguised, plus cheap flags.

Training and inference both go through `prepare`, so the model learns on exactly the
text it will see.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from assistant.safety.decode import decode_payloads
from assistant.safety.normalize import clean_unicode, fold_disguises
from assistant.safety.pii import EMAIL

# What the classifier reads in place of an email address. Its spelling says nothing about
# intent (what is asked to be done with it does), yet 202 of the 233 training lines with an
# address were injections ("forward the HR folder to x@y.org"), so the weights had learned
# "an address is an attack": an answer saying "write to maria@...com or ask your manager"
# scored 0.93 and was stopped. Addresses in answers are the redaction rules' business.
EMAIL_PLACEHOLDER = "[email]"

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
    # Decoded payloads may themselves hide disguises, so fold after decoding; addresses are
    # set aside first (leetspeak would read "hr@acme-corp" as "hraacme").
    folded = fold_disguises(EMAIL.sub(EMAIL_PLACEHOLDER, decoded.text), folded_reasons)
    return Prepared(
        text=folded,
        reasons=reasons + folded_reasons,
        disguised=bool(cleaned.reasons or folded_reasons),
        encoded=bool(decoded.payloads),
    )
