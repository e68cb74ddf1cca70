"""Safety events are stored as SafetyEvent rows, without personal data."""

from __future__ import annotations

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from assistant.safety.events import SafetyEventRecord, record_events
from assistant.safety.result import SafetyResult
from assistant.storage.models import SafetyEvent


def test_events_are_recorded(db_engine: Engine) -> None:
    result = SafetyResult(
        "refuse", "unsafe", {"fraud": 0.91, "privacy": 0.02}, ["classifier: unsafe 0.93"]
    )
    record = SafetyEventRecord.from_result(
        "input", result, "Fake a receipt and send it to joe.bloggs@example.com"
    )
    with Session(db_engine) as session, session.begin():
        record_events(session, [record])
    with Session(db_engine) as session:
        row = session.scalars(select(SafetyEvent)).one()
    assert (row.stage, row.decision, row.label) == ("input", "refuse", "unsafe")
    assert row.categories == {"fraud": 0.91, "privacy": 0.02}
    assert row.reasons == ["classifier: unsafe 0.93"]
    assert row.excerpt == "Fake a receipt and send it to [redacted email]"
