"""Continuous batching: which tokens of which sequences run in the next step.

Each step has a token budget. Running sequences come first (a decode costs one token, an
unfinished prompt continues with a chunk), then waiting ones are admitted in arrival order
while budget, sequence slots and blocks last. When a running sequence needs a block and
none is free, the newest running sequence is preempted: its blocks are released and it
goes back to the front of the queue to be recomputed later (its full blocks usually
survive in the prefix cache, so recomputing is cheap).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from model.kv_cache import BlockPool, blocks_for
from model.llama import BLOCK_SIZE
from model.sequence import ScheduledSeq, Sequence, Status


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)


class Scheduler:
    def __init__(self, pool: BlockPool, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be at least 1.")
        self.pool = pool
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def check_fits(self, seq: Sequence) -> None:
        """Refuse a request that could never run, even alone in the pool."""
        needed = blocks_for(seq.num_prompt_tokens + seq.max_tokens)
        if needed > self.pool.num_blocks:
            raise ValueError(
                f"The request needs {needed} KV blocks (prompt {seq.num_prompt_tokens} + "
                f"max_tokens {seq.max_tokens}) but the pool has {self.pool.num_blocks}; "
                "shorten it or give the KV cache more memory."
            )

    def add(self, seq: Sequence) -> None:
        self.check_fits(seq)
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.max_num_batched_tokens)
        if not out.preempted:
            self._admit_waiting(out, budget)
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            if not self._grow(seq, seq.num_computed_tokens + n, out):
                break  # seq itself was preempted: nothing after it is left
            out.scheduled.append(ScheduledSeq(seq, n))
            budget -= n
            i += 1
        return budget

    def _grow(self, seq: Sequence, num_tokens: int, out: SchedulerOutput) -> bool:
        """Give `seq` blocks for `num_tokens`, preempting the newest others; False if it is one."""
        missing = blocks_for(num_tokens) - len(seq.block_table)
        while not self.pool.can_allocate(missing):
            victim = self.running[-1]
            self._preempt(victim, out)
            if victim is seq:
                return False
        seq.block_table.extend(self.pool.allocate(max(missing, 0)))
        return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.pool.release(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        out.preempted.append(seq)

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = self.pool.find_cached(seq)
            computed = len(cached) * BLOCK_SIZE
            n = min(seq.num_tokens - computed, budget)
            missing = blocks_for(computed + n) - len(cached)
            if not self.pool.can_allocate(missing, cached):
                break  # FIFO: later requests do not overtake the head of the queue
            self.waiting.popleft()
            self.pool.record_lookup(seq.num_tokens, computed)
            self.pool.take(cached)
            seq.block_table = cached + self.pool.allocate(missing)
            seq.num_computed_tokens = computed
            seq.num_cached_tokens = computed
            seq.status = Status.RUNNING
            self.running.append(seq)
            out.admitted.append(seq)
            out.scheduled.append(ScheduledSeq(seq, n))
            budget -= n

    def after_step(self, scheduled: list[ScheduledSeq]) -> None:
        """The step ran: its tokens are in the cache; name the blocks that became full."""
        for entry in scheduled:
            seq = entry.seq
            old = seq.num_computed_tokens
            seq.num_computed_tokens += entry.num_new_tokens
            self.pool.register_full_blocks(seq, old)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Take `seq` out (finished or aborted) and free its blocks at once."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.pool.release(seq)
        seq.status = Status.FINISHED
        seq.finish_reason = reason
