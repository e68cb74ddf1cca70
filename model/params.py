"""SamplingParams: how one request is decoded, validated when it is built."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

# OpenAI's documented range for presence and frequency penalties.
PENALTY_RANGE = (-2.0, 2.0)


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0  # 0 means greedy (argmax)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # HF semantics, over prompt and output tokens
    presence_penalty: float = 0.0  # OpenAI semantics, over output tokens
    frequency_penalty: float = 0.0  # OpenAI semantics, over output tokens
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: bool = False
    ignore_eos: bool = False
    json_schema: dict | str | None = None
    regex: str | None = None
    choices: list[str] | None = None

    def __post_init__(self) -> None:
        self._check_lengths()
        self._check_distribution()
        self._check_penalties()
        self._check_stops()
        self._check_constraint()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def constrained(self) -> bool:
        return any(c is not None for c in (self.json_schema, self.regex, self.choices))

    @property
    def has_penalties(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )

    def stop_ids(self, eos_token_ids: Iterable[int]) -> frozenset[int]:
        """Every token id that finishes this request: its own stop ids plus EOS unless ignored."""
        ids = set(self.stop_token_ids)
        if not self.ignore_eos:
            ids.update(eos_token_ids)
        return frozenset(ids)

    def _check_lengths(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise ValueError(f"max_tokens must be an integer, got {self.max_tokens!r}.")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}.")

    def _check_distribution(self) -> None:
        _finite("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}.")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}.")
        _finite("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}.")
        _finite("min_p", self.min_p)
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1] (0 = off), got {self.min_p}.")

    def _check_penalties(self) -> None:
        _finite("repetition_penalty", self.repetition_penalty)
        if self.repetition_penalty <= 0:
            raise ValueError(
                f"repetition_penalty must be > 0 (1 = off), got {self.repetition_penalty}."
            )
        low, high = PENALTY_RANGE
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _finite(name, value)
            if not low <= value <= high:
                raise ValueError(f"{name} must be in [{low}, {high}] (0 = off), got {value}.")

    def _check_stops(self) -> None:
        if isinstance(self.stop, str):
            raise ValueError("stop must be a list of strings, not a single string: use [stop].")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}.")
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise ValueError(
                f"stop_token_ids must be non-negative integers, got {self.stop_token_ids!r}."
            )

    def _check_constraint(self) -> None:
        given = [
            name for name in ("json_schema", "regex", "choices") if getattr(self, name) is not None
        ]
        if len(given) > 1:
            raise ValueError(
                f"Give at most one of json_schema, regex and choices; got {', '.join(given)}."
            )
        if self.json_schema is not None and not isinstance(self.json_schema, dict | str):
            raise ValueError("json_schema must be a dict or a JSON string.")
        if self.regex is not None and (not isinstance(self.regex, str) or not self.regex):
            raise ValueError("regex must be a non-empty string.")
        if self.choices is not None:
            if isinstance(self.choices, str) or not self.choices:
                raise ValueError("choices must be a non-empty list of strings.")
            if any(not isinstance(c, str) or not c for c in self.choices):
                raise ValueError(f"every choice must be a non-empty string, got {self.choices!r}.")


def _finite(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
