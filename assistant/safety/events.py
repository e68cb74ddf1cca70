"""Safety decisions worth keeping, and the helper that stores them as SafetyEvent rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from assistant.safety.pii import redact
from assistant.safety.result import SafetyResult
from assistant.storage.models import SAFETY_STAGES, SafetyEvent

EXCERPT_CHARS = 200


@dataclass(slots=True)
class SafetyEventRecord:
    stage: str  # input | output | document | tool
    decision: str
    label: str
    categories: dict[str, float]
    reasons: list[str] = field(default_factory=list)
    excerpt: str = ""

    @classmethod
    def from_result(cls, stage: str, result: SafetyResult, text: str) -> SafetyEventRecord:
        assert stage in SAFETY_STAGES, stage
        return cls(
            stage=stage,
            decision=result.decision,
            label=result.label,
            categories={k: round(v, 4) for k, v in result.categories.items()},
            reasons=list(result.reasons),
            excerpt=safe_excerpt(text),
        )


def safe_excerpt(text: str) -> str:
    """The start of the text with all personal data redacted: events never store PII."""
    return redact(text[: EXCERPT_CHARS * 2], set())[0][:EXCERPT_CHARS]


def record_events(
    session: Session,
    events: Iterable[SafetyEventRecord],
    *,
    user_id: int | None = None,
    conversation_id: int | None = None,
    message_id: int | None = None,
) -> list[SafetyEvent]:
    rows = [
        SafetyEvent(
            user_id=user_id,
            conversation_id=conversation_id,
            message_id=message_id,
            stage=e.stage,
            decision=e.decision,
            label=e.label,
            categories=e.categories,
            reasons=e.reasons,
            excerpt=e.excerpt,
        )
        for e in events
    ]
    session.add_all(rows)
    session.flush()
    return rows
