"""LLM: the synchronous front door. Load a model once, then generate, chat or stream."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from model.engine import Delta, LLMEngine
from model.params import SamplingParams

if TYPE_CHECKING:
    from model.loader import LoadedModel


@dataclass(slots=True)
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" | "length" | "abort"
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    logprobs: list[float] | None = None
    metrics: Any = None  # the request's RequestMetrics


class LLM:
    def __init__(
        self,
        model_path: str | Path | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        progress: bool = True,
        **engine_options: Any,
    ) -> None:
        from model.loader import load_model

        self._attach(load_model(model_path, progress=progress), device, dtype, engine_options)

    @classmethod
    def from_loaded(
        cls,
        loaded: LoadedModel,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        **engine_options: Any,
    ) -> LLM:
        """An LLM on weights already in memory (one load shared by several engines)."""
        llm = cls.__new__(cls)
        llm._attach(loaded, device, dtype, engine_options)
        return llm

    def _attach(self, loaded: LoadedModel, device, dtype, engine_options: dict) -> None:
        self.config = loaded.config
        self.tokenizer = loaded.tokenizer
        self.engine = LLMEngine(
            loaded.config,
            loaded.weights,
            loaded.tokenizer,
            device,
            dtype,
            q4=loaded.q4,
            **engine_options,
        )

    def generate(
        self,
        prompts: str | list[int] | list[str] | list[list[int]],
        params: SamplingParams | None = None,
    ) -> list[Completion]:
        """Submit every prompt at once (they share the batch) and wait for them all."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        ids: list[str] = []
        try:
            for prompt in prompts:
                ids.append(self.engine.add_request(prompt, params))
        except ValueError:
            for request_id in ids:  # all or nothing: no orphan requests left in the engine
                self.engine.abort(request_id)
            self.engine.apply_pending()
            raise
        builders = {i: _Builder() for i in ids}
        while any(not b.done for b in builders.values()):
            for delta in self.engine.step():
                if delta.request_id in builders:
                    builders[delta.request_id].add(delta)
        return [builders[i].completion() for i in ids]

    def chat(self, messages: list[dict], params: SamplingParams | None = None) -> Completion:
        """Render the model's chat template (with the assistant turn opened), then generate."""
        ids = self.tokenizer.encode_chat(messages, add_generation_prompt=True)
        return self.generate([ids], params)[0]

    def stream(
        self, prompt: str | list[int], params: SamplingParams | None = None
    ) -> Iterator[Delta]:
        """Deltas as they come; closing the iterator early aborts the request."""
        request_id = self.engine.add_request(prompt, params)
        finished = False
        try:
            while not finished:
                for delta in self.engine.step():
                    if delta.request_id == request_id:
                        finished = delta.finish_reason is not None
                        yield delta
        finally:
            if not finished:
                self.engine.abort(request_id)
                self.engine.apply_pending()


class _Builder:
    """Collects one request's deltas into its Completion."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.token_ids: list[int] = []
        self.logprobs: list[float] | None = None
        self.last: Delta | None = None

    @property
    def done(self) -> bool:
        return self.last is not None

    def add(self, delta: Delta) -> None:
        self.text.append(delta.text)
        self.token_ids.extend(delta.token_ids)
        if delta.logprobs is not None:
            self.logprobs = self.logprobs if self.logprobs is not None else []
            self.logprobs.extend(delta.logprobs)
        if delta.finish_reason is not None:
            self.last = delta

    def completion(self) -> Completion:
        metrics = self.last.metrics
        return Completion(
            text="".join(self.text),
            token_ids=self.token_ids,
            finish_reason=self.last.finish_reason,
            prompt_tokens=metrics.prompt_tokens,
            completion_tokens=len(self.token_ids),
            cached_tokens=metrics.cached_tokens,
            logprobs=self.logprobs,
            metrics=metrics,
        )
