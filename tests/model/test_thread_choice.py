"""The native step's thread count follows measured step times."""

from __future__ import annotations

from model.thread_choice import FIRST_RETRY, LAST_RETRY, ThreadChoice


def run(choice: ThreadChoice, steps: int, cost: dict[int, float], rows: int = 1) -> list[int]:
    picked = []
    for _ in range(steps):
        threads = choice.pick(rows, 2)
        choice.record(rows, threads, cost[threads])
        picked.append(threads)
    return picked


def test_one_thread_when_torch_has_one() -> None:
    assert ThreadChoice().pick(4, 1) == 1


def test_the_faster_count_is_used_and_the_slower_retried_less_and_less_often() -> None:
    choice = ThreadChoice()
    picked = run(choice, 2000, {1: 0.010, 2: 0.800})  # a busy machine: 2 threads crawl
    assert picked[:2] == [1, 2]  # each measured once
    retries = [i for i, t in enumerate(picked) if t == 2][1:]
    gaps = [b - a for a, b in zip(retries, retries[1:], strict=False)]
    assert gaps[0] == 2 * FIRST_RETRY and gaps == sorted(gaps)  # backing off
    assert max(gaps) <= LAST_RETRY
    assert picked.count(2) < 12


def test_it_switches_when_the_load_changes() -> None:
    choice = ThreadChoice()
    run(choice, 50, {1: 0.010, 2: 0.800})
    picked = run(choice, 300, {1: 0.010, 2: 0.005})  # the other process ended
    assert picked[-100:] == [2] * 100


def test_batch_size_ranges_are_measured_apart() -> None:
    choice = ThreadChoice()
    run(choice, 20, {1: 0.010, 2: 0.020}, rows=1)
    run(choice, 20, {1: 0.040, 2: 0.020}, rows=8)
    assert choice.pick(1, 2) == 1 and choice.pick(8, 2) == 2
    assert choice.pick(6, 2) == 2  # 5-8 sequences share what 8 measured
