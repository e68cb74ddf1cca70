"""Stop strings over streamed text: hold back what could still become a stop string."""

from __future__ import annotations


class StopStringMatcher:
    """Feed decoded text piece by piece; get back what is safe to show and whether to stop.

    The stop string itself is never emitted, and neither is any text after it. Text that
    might be the start of a stop string is held back until the next piece settles it.
    """

    def __init__(self, stops: list[str]) -> None:
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        self.stops = list(dict.fromkeys(stops))
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text

    def feed(self, text: str) -> tuple[str, bool]:
        """(text safe to emit now, whether a stop string was hit)."""
        if self.stopped:
            return "", True
        buffer = self._held + text
        hit = self._earliest_stop(buffer)
        if hit is not None:
            index, stop = hit
            self.stopped, self.matched, self._held = True, stop, ""
            return buffer[:index], True
        keep = self._longest_partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """At finish without a stop string: release what was held back."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _earliest_stop(self, buffer: str) -> tuple[int, str] | None:
        # The stop string that is completed first wins, as if the text had come one character
        # at a time; on a tie the longest (earliest starting) one, so none of it leaks.
        best: tuple[int, int, str] | None = None
        for stop in self.stops:
            index = buffer.find(stop)
            if index >= 0 and (best is None or (index + len(stop), index) < best[:2]):
                best = (index + len(stop), index, stop)
        return None if best is None else (best[1], best[2])

    def _longest_partial_suffix(self, buffer: str) -> int:
        """Length of the longest suffix of `buffer` that is a proper prefix of a stop string."""
        longest = 0
        for stop in self.stops:
            for length in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:length]):
                    longest = length
                    break
        return longest
