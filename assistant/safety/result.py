"""What every check returns, and the vocabulary it is written in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CATEGORIES = (
    "prompt_injection",
    "violence_weapons",
    "self_harm",
    "harassment_hate",
    "sexual",
    "privacy",
    "fraud",
    "malicious_code",
)
DECISIONS = ("allow", "allow_with_caution", "refuse", "redact")


@dataclass(slots=True)
class SafetyResult:
    decision: str
    label: str  # "safe" | "unsafe"
    categories: dict[str, float]
    reasons: list[str] = field(default_factory=list)
    # What to show instead of the model's answer ("refuse"), or before it
    # ("allow_with_caution" leaning towards self-harm: support and resources), when anything.
    response: str | None = None
    # The text with personal data redacted, when decision == "redact".
    redacted: str | None = None

    def __post_init__(self) -> None:
        assert self.decision in DECISIONS, self.decision
        assert self.label in ("safe", "unsafe"), self.label

    @property
    def top_category(self) -> str:
        return max(self.categories, key=self.categories.__getitem__)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "decision": self.decision,
            "label": self.label,
            "categories": {k: round(v, 4) for k, v in self.categories.items()},
            "reasons": self.reasons,
        }
        if self.response is not None:
            out["response"] = self.response
        if self.redacted is not None:
            out["redacted"] = self.redacted
        return out
