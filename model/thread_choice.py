"""How many threads the next native decode step should use, from how the last ones went.

A decode step is ~150 short parallel phases, each ending in a barrier. On a quiet 2-core
machine two threads make a step ~1.4x faster than one; while another process keeps a core
busy, every barrier waits for the descheduled thread's next time slice and a 5 ms step takes
a second (measured: median 750 ms with 2 threads against 6-13 ms with 1). Which one wins
depends on the machine's load at the time, so it is measured, not guessed: each range of
batch sizes (1, 2, 3-4, 5-8, ...) keeps a running average time per sequence for each thread
count, the faster is used, and the other is tried again now and then, less often each time
it loses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FIRST_RETRY = 16  # steps before the losing thread count is tried again
LAST_RETRY = 1024  # the longest it waits (doubling each time it loses again)
SMOOTHING = 0.3  # weight of the newest step time in the running average


@dataclass(slots=True)
class _Choice:
    average: dict[int, float] = field(default_factory=dict)  # seconds per sequence
    retry_in: int = FIRST_RETRY
    countdown: int = FIRST_RETRY
    trying: int | None = None  # the thread count being retried this step


class ThreadChoice:
    def __init__(self) -> None:
        self._by_rows: dict[int, _Choice] = {}

    def pick(self, rows: int, most: int) -> int:
        """Threads for a step of `rows` sequences, at most `most` (torch's thread count)."""
        if most <= 1:
            return 1
        choice = self._by_rows.setdefault((rows - 1).bit_length(), _Choice())
        for threads in (1, most):
            if threads not in choice.average:
                return threads
        best = min((1, most), key=choice.average.__getitem__)
        choice.countdown -= 1
        if choice.countdown > 0:
            return best
        choice.trying = most if best == 1 else 1
        return choice.trying

    def record(self, rows: int, threads: int, seconds: float) -> None:
        choice = self._by_rows.setdefault((rows - 1).bit_length(), _Choice())
        seconds /= rows
        old = choice.average.get(threads)
        # A retried count's old average is stale (the load it measured may be gone): the new
        # time replaces it. The count in use is smoothed over its recent steps.
        fresh = old is None or choice.trying == threads
        choice.average[threads] = seconds if fresh else (1 - SMOOTHING) * old + SMOOTHING * seconds
        if choice.trying == threads:
            # Retried: if it is still the slower one, wait twice as long before the next try.
            others = [t for t in choice.average if t != threads]
            lost = bool(others) and choice.average[threads] > choice.average[others[0]]
            choice.retry_in = min(2 * choice.retry_in, LAST_RETRY) if lost else FIRST_RETRY
            choice.countdown = choice.retry_in
            choice.trying = None
