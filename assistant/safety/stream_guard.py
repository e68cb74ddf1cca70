"""Output safety on a token stream: classify as it grows, redact, never leak a half email.

The chat loop feeds each delta to `StreamGuard.feed` and shows only `update.text`. A short
tail is held back (and never cut inside a word or a match) so personal data is redacted
before any of it reaches the user. Every `check_every` characters, and at the end, the
whole answer so far is classified; on a refuse the stream stops and the chat loop replaces
what was shown with `update.replacement`. `final_text` is what may be stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from assistant.safety.classifier import SafetyClassifier
from assistant.safety.events import SafetyEventRecord
from assistant.safety.pii import PiiMatch, allowed_keys, find_pii

CHECK_EVERY_CHARS = 200
HOLD_BACK_CHARS = 48


@dataclass(slots=True)
class StreamUpdate:
    text: str = ""  # new text that may be shown now
    stopped: bool = False
    replacement: str | None = None  # on stop: the message to show instead of the answer
    events: list[SafetyEventRecord] = field(default_factory=list)


class StreamGuard:
    def __init__(
        self,
        classifier: SafetyClassifier,
        allowed_sources: Iterable[str] = (),
        check_every: int = CHECK_EVERY_CHARS,
        hold_back: int = HOLD_BACK_CHARS,
    ) -> None:
        self.classifier = classifier
        self.allowed = allowed_keys(allowed_sources)
        self.check_every = check_every
        self.hold_back = hold_back
        self._raw = ""
        self._emitted = 0  # characters of _raw already handed out (before redaction)
        self._checked = 0
        self._shown: list[str] = []
        self._redacted: list[PiiMatch] = []
        self.stopped = False
        self.replacement: str | None = None

    @property
    def final_text(self) -> str:
        """What the chat loop may store as the answer: the safe message if stopped."""
        return self.replacement if self.stopped and self.replacement else "".join(self._shown)

    def feed(self, delta: str) -> StreamUpdate:
        if self.stopped:
            return StreamUpdate(stopped=True, replacement=self.replacement)
        self._raw += delta
        if len(self._raw) - self._checked >= self.check_every:
            stop = self._classify()
            if stop is not None:
                return stop
        return StreamUpdate(text=self._release(self._safe_end()))

    def finish(self) -> StreamUpdate:
        """End of the stream: classify the whole answer, release the tail, report."""
        if self.stopped:
            return StreamUpdate(stopped=True, replacement=self.replacement)
        stop = self._classify()
        if stop is not None:
            return stop
        update = StreamUpdate(text=self._release(len(self._raw)))
        if self._redacted:
            kinds = sorted({m.kind for m in self._redacted})
            update.events.append(
                SafetyEventRecord(
                    stage="output",
                    decision="redact",
                    label="safe",
                    categories={},
                    reasons=[
                        f"redacted {len(self._redacted)} item(s) not present in the user's "
                        f"message or the sources: {', '.join(kinds)}"
                    ],
                    excerpt=self.final_text[:200],
                )
            )
        return update

    def _classify(self) -> StreamUpdate | None:
        self._checked = len(self._raw)
        result = self.classifier.check_output(self._raw)
        if result.label != "unsafe":
            return None
        self.stopped = True
        self.replacement = result.response
        event = SafetyEventRecord.from_result("output", result, self._raw)
        return StreamUpdate(stopped=True, replacement=self.replacement, events=[event])

    def _safe_end(self) -> int:
        """How far the raw text may be released: not the tail, not mid-word, not mid-match."""
        end = len(self._raw) - self.hold_back
        if end <= self._emitted:
            return self._emitted
        while end > self._emitted and not self._raw[end - 1].isspace():
            end -= 1
        for match in find_pii(self._raw):
            if match.start < end < match.end:
                end = match.start
        return max(end, self._emitted)

    def _release(self, end: int) -> str:
        """Raw text from the last release up to `end`, with disallowed matches redacted."""
        if end <= self._emitted:
            return ""
        out, pos = [], self._emitted
        for match in find_pii(self._raw):
            if match.end <= self._emitted or match.start >= end or match.key in self.allowed:
                continue
            # A match that began in released text (rare: longer than the hold-back) still
            # has its unreleased part redacted.
            out.append(self._raw[pos : max(match.start, pos)])
            out.append(f"[redacted {match.kind.replace('_', ' ')}]")
            self._redacted.append(match)
            pos = min(match.end, end)
        out.append(self._raw[pos:end])
        self._emitted = end
        text = "".join(out)
        self._shown.append(text)
        return text
