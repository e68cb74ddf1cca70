"""A request as the scheduler and the runner see it: tokens, progress and its cache blocks."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True)
class Sequence:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    salt: str | None = None
    arrival: int = 0  # arrival order: FIFO admission and preemption of the newest first
    token_ids: list[int] = field(default_factory=list)  # prompt + generated so far
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    num_cached_tokens: int = 0  # of those, how many came from the prefix cache
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)  # chained hashes of full blocks
    status: Status = Status.WAITING
    finish_reason: str | None = None
    num_preemptions: int = 0
    state: Any = None  # the engine's per-request state (sampler, detokenizer, metrics)

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[len(self.prompt_token_ids) :]

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED


@dataclass(slots=True)
class ScheduledSeq:
    """`num_new_tokens` of `seq`, starting at `seq.num_computed_tokens`, run this step."""

    seq: Sequence
    num_new_tokens: int

    @property
    def needs_logits(self) -> bool:
        # Only the step that reaches the end of the known tokens samples a new one.
        return self.seq.num_computed_tokens + self.num_new_tokens == self.seq.num_tokens
