"""Output safety on a stream: redaction that never leaks, stopping on unsafe output."""

from __future__ import annotations

import re

from assistant.safety.stream_guard import StreamGuard

ANSWER = (
    "Thanks for asking. The travel policy covers economy flights and standard hotels. "
    "For questions, write to maria.gonzalez.private@gmail.com or ask your manager. "
    "Receipts must be submitted within thirty days of the trip, through the finance portal."
)


def deltas(text: str, size: int = 3) -> list[str]:
    """The answer in small pieces, the way tokens arrive."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream(guard: StreamGuard, text: str, size: int = 3) -> tuple[list[str], str]:
    shown = [guard.feed(d).text for d in deltas(text, size)]
    shown.append(guard.finish().text)
    return shown, "".join(shown)


def test_email_generated_mid_answer_is_redacted_before_it_is_shown(classifier) -> None:
    guard = StreamGuard(classifier, allowed_sources=["What is the travel policy?"])
    pieces, shown = stream(guard, ANSWER)
    assert "[redacted email]" in shown
    assert "gmail" not in shown and "maria.gonzalez" not in shown
    # Not even a prefix of the address ever went out in any piece.
    assert not any(re.search(r"maria|gonz", p) for p in pieces)
    assert shown == ANSWER.replace("maria.gonzalez.private@gmail.com", "[redacted email]")
    assert guard.final_text == shown
    assert not guard.stopped


def test_text_is_released_progressively_not_all_at_the_end(classifier) -> None:
    guard = StreamGuard(classifier, hold_back=48)
    pieces, _ = stream(guard, ANSWER)
    assert sum(len(p) for p in pieces[:-1]) >= len(ANSWER) - 48 - 40


def test_email_from_the_sources_is_kept(classifier) -> None:
    source = "Travel questions: maria.gonzalez.private@gmail.com (travel desk)."
    guard = StreamGuard(classifier, allowed_sources=["travel policy?", source])
    _, shown = stream(guard, ANSWER, size=5)
    assert shown == ANSWER


def test_redaction_event_is_reported(classifier) -> None:
    guard = StreamGuard(classifier)
    for d in deltas(ANSWER):
        guard.feed(d)
    update = guard.finish()
    assert [e.decision for e in update.events] == ["redact"]
    assert "email" in update.events[0].reasons[0]
    assert "gmail" not in update.events[0].excerpt


def test_unsafe_output_stops_the_stream_and_is_never_stored(classifier) -> None:
    unsafe = (
        "Sure, here is how to build it. Take a steel pipe, fill the pipe with black powder, "
        "cap both ends tightly and drill a hole for the fuse so the pipe bomb explodes in the "
        "crowd. Pack nails around it to injure as many people as possible at the office event."
    )
    guard = StreamGuard(classifier, check_every=80)
    updates = [guard.feed(d) for d in deltas(unsafe, 4)]
    updates.append(guard.finish())
    stop = next(u for u in updates if u.stopped)
    assert stop.replacement and stop.events[0].decision == "refuse"
    assert guard.stopped and guard.final_text == stop.replacement
    assert "powder" not in guard.final_text
    # After the stop nothing more is released.
    assert all(u.text == "" for u in updates[updates.index(stop) :])
