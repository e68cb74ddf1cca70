"""Continuous batching without a network: budgets, chunking, FIFO, preemption, abort, leaks."""

from __future__ import annotations

import random

import pytest

from model.kv_cache import BlockPool
from model.scheduler import Scheduler
from model.sequence import Sequence, Status


def seq(name: str, n: int, max_tokens: int = 8, arrival: int = 0) -> Sequence:
    return Sequence(
        name, list(range(1000 * arrival, 1000 * arrival + n)), max_tokens, arrival=arrival
    )


def run(scheduler: Scheduler) -> dict[str, int]:
    """One step: schedule, pretend the network ran, append token 7 where a token is due."""
    out = scheduler.schedule()
    scheduler.after_step(out.scheduled)
    for entry in out.scheduled:
        if entry.seq.num_computed_tokens == entry.seq.num_tokens:
            entry.seq.token_ids.append(7)
    return {e.seq.request_id: e.num_new_tokens for e in out.scheduled}


def test_long_prompt_is_chunked_and_mixed_with_decodes() -> None:
    s = Scheduler(BlockPool(64), max_num_seqs=8, max_num_batched_tokens=32)
    s.add(seq("short", 10, arrival=0))
    s.add(seq("long", 70, arrival=1))
    assert run(s) == {"short": 10, "long": 22}
    assert run(s) == {"short": 1, "long": 31}
    assert run(s) == {"short": 1, "long": 17}
    assert run(s) == {"short": 1, "long": 1}


def test_admission_is_fifo_and_bounded_by_max_num_seqs() -> None:
    s = Scheduler(BlockPool(64), max_num_seqs=2, max_num_batched_tokens=100)
    for i in range(4):
        s.add(seq(f"r{i}", 5, arrival=i))
    assert run(s) == {"r0": 5, "r1": 5}
    s.finish(s.running[0], "stop")
    assert run(s) == {"r1": 1, "r2": 5}


def test_head_of_queue_is_not_overtaken_when_blocks_are_short() -> None:
    s = Scheduler(BlockPool(4), max_num_seqs=8, max_num_batched_tokens=200)
    s.add(seq("a", 40, max_tokens=8, arrival=0))  # 3 blocks
    s.add(seq("big", 40, max_tokens=8, arrival=1))  # does not fit beside it
    s.add(seq("tiny", 3, max_tokens=8, arrival=2))  # would fit, but must wait its turn
    assert run(s) == {"a": 40}
    assert [q.request_id for q in s.waiting] == ["big", "tiny"]


def test_preemption_takes_the_newest_and_it_resumes_first() -> None:
    s = Scheduler(BlockPool(4), max_num_seqs=8, max_num_batched_tokens=200)
    s.add(seq("old", 31, max_tokens=30, arrival=0))
    s.add(seq("new", 31, max_tokens=30, arrival=1))
    assert run(s) == {"old": 31, "new": 31}  # 2 blocks each; both fill block 2 next step
    assert run(s) == {"old": 1, "new": 1}
    step = s.schedule()  # both need a third block: none free, so "new" is preempted
    assert [q.request_id for q in step.preempted] == ["new"]
    assert [e.seq.request_id for e in step.scheduled] == ["old"]
    new = step.preempted[0]
    assert new.status is Status.WAITING and new.num_computed_tokens == 0 and not new.block_table
    assert s.waiting[0] is new and new.num_tokens == 33  # keeps the token it generated


def test_abort_frees_blocks_at_once() -> None:
    pool = BlockPool(16)
    s = Scheduler(pool, max_num_seqs=8, max_num_batched_tokens=64)
    a = seq("a", 50)
    s.add(a)
    run(s)
    assert pool.num_free_blocks == 16 - 4
    s.finish(a, "abort")
    assert pool.num_free_blocks == 16 and a.finish_reason == "abort" and not s.has_unfinished()


def test_request_larger_than_the_pool_is_refused() -> None:
    s = Scheduler(BlockPool(2), max_num_seqs=8, max_num_batched_tokens=64)
    with pytest.raises(ValueError, match="KV blocks"):
        s.add(seq("huge", 30, max_tokens=10))


def test_random_operations_never_leak_blocks() -> None:
    rng = random.Random(1234)
    pool = BlockPool(12)
    s = Scheduler(pool, max_num_seqs=6, max_num_batched_tokens=48)
    live: list[Sequence] = []
    every: list[Sequence] = []
    prefixes = [[rng.randrange(50) for _ in range(40)] for _ in range(3)]
    for op in range(500):
        choice = rng.random()
        if choice < 0.35:
            prompt = rng.choice(prefixes)[: rng.randrange(1, 40)] + [rng.randrange(50)]
            new = Sequence(f"r{op}", prompt, rng.randrange(1, 40), arrival=op)
            s.add(new)
            live.append(new)
            every.append(new)
        elif choice < 0.5 and live:
            victim = live.pop(rng.randrange(len(live)))
            s.finish(victim, "abort")
        else:
            run(s)
            for done in [q for q in live if len(q.output_token_ids) >= q.max_tokens]:
                s.finish(done, "length")
                live.remove(done)
        held = {b for q in s.running for b in q.block_table}
        assert sum(pool.ref_counts) == sum(len(q.block_table) for q in s.running)
        assert pool.num_free_blocks == pool.num_blocks - len(held)
        assert not any(q.block_table for q in s.waiting)
    for q in list(live):
        s.finish(q, "abort")
    assert pool.num_free_blocks == pool.num_blocks and not any(pool.ref_counts)
    # The run exercised what it is meant to: preemptions and prefix-cache hits happened.
    assert any(q.num_preemptions for q in every) and pool.hit_tokens > 0
