"""LLMEngine: requests in, deltas out, one `step()` at a time.

`add_request` and `abort` may be called from any thread: they only queue work, which
`step()` (always on one thread) takes in before scheduling. AsyncEngine runs that step
loop on a background thread and hands each request's deltas to an asyncio iterator.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import torch

from model.config import ModelConfig
from model.dequantize import Q4Groups
from model.kv_cache import BlockPool, num_blocks_for_budget
from model.linear import cpu_has_bf16, packed_kernels_available
from model.llama import LlamaModel
from model.metrics import EngineMetrics, RequestMetrics
from model.native_step import native_step_supported
from model.params import SamplingParams
from model.runner import ModelRunner
from model.sampler import RequestSampler, SampledToken, sample
from model.scheduler import Scheduler
from model.sequence import Sequence
from model.stops import StopStringMatcher

DEFAULT_KV_CACHE_BYTES = 1 << 30


@dataclass(slots=True)
class Delta:
    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str | None = None  # None until the last delta: "stop" | "length" | "abort"
    logprobs: list[float] | None = None
    metrics: RequestMetrics | None = None  # on the last delta: the request's counts and times


@dataclass(slots=True)
class EngineOptions:
    device: torch.device
    dtype: torch.dtype
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES
    num_blocks: int | None = None  # overrides kv_cache_bytes (tests force preemption with it)
    max_num_seqs: int = 64
    # Tokens per step. Decodes in the batch wait for the step, so this bounds their stall
    # while a prompt is prefilled (0.5-1 s for 1024 tokens on one CPU core in bfloat16); a
    # typical prompt still fits one chunk (later chunks attend through a mask, which SDPA
    # runs ~2.5x slower on the CPU). 512, 1024 and 2048 gave the same throughput within
    # noise on 32 concurrent requests.
    max_num_batched_tokens: int = 1024
    enable_prefix_caching: bool = True
    # "native": whole steps run as one native call over the file's 4-bit codes
    # (model/native_step.py); "packed": 4-/8-bit copies of the projections for torch's
    # weight-only kernels (model/linear.py); "dense": float copies only. "auto": native
    # where it runs, else packed where those kernels are fast, else dense.
    weight_format: str = "auto"


@dataclass(slots=True)
class RequestState:
    params: SamplingParams
    sampler: RequestSampler
    stop_ids: frozenset[int]
    metrics: RequestMetrics
    decoder: Any = None  # IncrementalDecoder when there is a tokenizer
    stops: StopStringMatcher | None = None


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    # bfloat16 on GPUs and on CPUs with bfloat16 matrix instructions (AVX512-BF16/AMX), where
    # it is several times faster than float32; float32 elsewhere (emulated bfloat16 is slow).
    if device.type == "cuda" or cpu_has_bf16():
        return torch.bfloat16
    return torch.float32


def engine_dtype(
    device: torch.device, weight_format: str, config: ModelConfig, q4: dict[str, Q4Groups]
) -> torch.dtype:
    """The dtype an engine gets when none is asked for: `default_dtype`, except on CPUs
    where the native step runs every step (model/llama.py): its products are integer ones
    whatever the dtype, which then only sets the KV cache's (and embedding's) storage, and
    bfloat16 halves the cache bytes each decode reads (32 sequences of 400 tokens: 600 MB a
    step in float32, six times the weights)."""
    dtype = default_dtype(device)
    if (
        dtype == torch.float32
        and device.type == "cpu"
        and weight_format in ("auto", "native")
        and native_step_supported(config, torch.bfloat16, device, q4)
    ):
        return torch.bfloat16
    return dtype


WEIGHT_FORMATS = ("auto", "native", "packed", "dense")


def weight_format_for(
    requested: str,
    config: ModelConfig,
    device: torch.device,
    dtype: torch.dtype,
    q4: dict[str, Q4Groups],
) -> str:
    """The format the model is built with: "native", "packed" or "dense"."""
    if requested not in WEIGHT_FORMATS:
        raise ValueError(
            f"weight_format must be one of {', '.join(WEIGHT_FORMATS)}, not {requested!r}."
        )
    if requested == "dense":  # nothing to check (and no kernel to build)
        return requested
    native = requested in ("auto", "native") and native_step_supported(config, dtype, device, q4)
    packed = packed_kernels_available(device, dtype)
    if requested == "native" and not native:
        raise ValueError(
            "weight_format='native' needs a CPU with AVX2, a C compiler and a model file "
            "whose layer matrices are Q4_0/Q4_1; use 'auto' here."
        )
    if requested == "packed" and not packed:
        raise ValueError(
            "weight_format='packed' needs bfloat16 on a CPU with AVX512-BF16; "
            "use weight_format='auto' or 'dense' here."
        )
    if requested != "auto":
        return requested
    return "native" if native else "packed" if packed else "dense"


class LLMEngine:
    def __init__(
        self,
        config: ModelConfig,
        weights: dict[str, torch.Tensor],
        tokenizer: Any = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        q4: dict[str, Q4Groups] | None = None,
        **options: Any,
    ) -> None:
        """`weights`: float32 tensors under HF names; `q4`: the file's 4-bit codes of some of
        them (LoadedModel.q4), which packed weights use as they are."""
        device = torch.device(device) if device is not None else default_device()
        unknown = set(options) - set(EngineOptions.__dataclass_fields__) - {"device", "dtype"}
        if unknown:
            raise ValueError(
                f"Unknown engine option(s) {', '.join(sorted(unknown))}; the options are "
                f"{', '.join(f for f in EngineOptions.__dataclass_fields__ if f != 'device')}."
            )
        if dtype is None:
            dtype = engine_dtype(device, options.get("weight_format", "auto"), config, q4 or {})
        self.options = EngineOptions(device=device, dtype=dtype, **options)
        self.config = config
        self.tokenizer = tokenizer
        self.weight_format = weight_format_for(
            self.options.weight_format, config, device, self.options.dtype, q4 or {}
        )
        self.model = LlamaModel(
            config,
            weights,
            device,
            self.options.dtype,
            q4,
            packed=self.weight_format == "packed",
            native=self.weight_format == "native",
        )
        num_blocks = self.options.num_blocks or num_blocks_for_budget(
            config, self.options.dtype, self.options.kv_cache_bytes
        )
        self.pool = BlockPool(num_blocks, self.options.enable_prefix_caching)
        self.scheduler = Scheduler(
            self.pool, self.options.max_num_seqs, self.options.max_num_batched_tokens
        )
        self.runner = ModelRunner(self.model, self.model.new_cache(num_blocks))
        self.metrics = EngineMetrics()
        self.eos_token_ids = list(
            getattr(tokenizer, "eos_token_ids", None) or config.eos_token_ids or []
        )
        self.requests: dict[str, Sequence] = {}
        self._incoming: deque[Sequence] = deque()
        self._aborts: deque[str] = deque()
        self._ids = itertools.count()
        self._grammar = None
        self._grammar_lock = threading.Lock()

    @property
    def device(self) -> torch.device:
        return self.options.device

    # -- requests -------------------------------------------------------------------------

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        salt: str | None = None,
    ) -> str:
        """Queue a request; it joins the running batch at the next step. Returns its id."""
        params = params or SamplingParams()
        prompt_ids = self._prompt_ids(prompt)
        arrival = next(self._ids)
        request_id = request_id or f"req-{arrival}"
        if request_id in self.requests:
            raise ValueError(f"Request id '{request_id}' is already in use.")
        limit = self.config.max_position_embeddings
        if len(prompt_ids) + params.max_tokens > limit:
            raise ValueError(
                f"The prompt ({len(prompt_ids)} tokens) plus max_tokens ({params.max_tokens}) "
                f"exceeds the model's context window of {limit} tokens; shorten one of them."
            )
        seq = Sequence(request_id, prompt_ids, params.max_tokens, salt=salt, arrival=arrival)
        seq.state = self._request_state(params, prompt_ids)
        self.scheduler.check_fits(seq)
        self.requests[request_id] = seq
        self._incoming.append(seq)
        return request_id

    def abort(self, request_id: str) -> None:
        """Stop a request and free its blocks at the next step; its last delta says "abort"."""
        self._aborts.append(request_id)

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("This engine has no tokenizer: pass the prompt as token ids.")
            ids = self.tokenizer.encode(prompt, add_special_tokens=True)
        else:
            ids = list(prompt)
        if not ids:
            raise ValueError("The prompt is empty: give at least one token.")
        vocab = self.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"Token id {bad[0]} is outside the vocabulary (0..{vocab - 1}).")
        return ids

    def _request_state(self, params: SamplingParams, prompt_ids: list[int]) -> RequestState:
        matcher = self._grammar_compiler().matcher_for(params) if params.constrained else None
        sampler = RequestSampler(params, prompt_ids, self.config.vocab_size, self.device, matcher)
        decoder = self.tokenizer.incremental_decoder() if self.tokenizer is not None else None
        return RequestState(
            params=params,
            sampler=sampler,
            stop_ids=params.stop_ids(self.eos_token_ids),
            metrics=RequestMetrics(time.monotonic()),
            decoder=decoder,
            stops=StopStringMatcher(params.stop) if params.stop else None,
        )

    def _grammar_compiler(self):
        if self.tokenizer is None:
            raise ValueError("Constrained decoding needs a tokenizer.")
        with self._grammar_lock:
            if self._grammar is None:
                from model.grammar import GrammarCompiler

                self._grammar = GrammarCompiler(
                    self.tokenizer.backend, self.config.vocab_size, self.eos_token_ids
                )
        return self._grammar

    # -- the step ---------------------------------------------------------------------------

    def step(self) -> list[Delta]:
        """Take in queued requests and aborts, run one batch, return what each request gained."""
        deltas = self.apply_pending()
        out = self.scheduler.schedule()
        now = time.monotonic()
        for seq in out.admitted:
            seq.state.metrics.on_scheduled(now)
            if self.pool.enable_prefix_caching:
                self.metrics.observe_prefix_cache(seq.num_tokens, seq.num_cached_tokens)
        if out.preempted:
            self.metrics.observe_preemption(len(out.preempted))
        if out.scheduled:
            logits, sampled = self.runner.run(out.scheduled)
            self.scheduler.after_step(out.scheduled)
            tokens = sample(logits, [e.seq.state.sampler for e in sampled])
            now = time.monotonic()
            deltas.extend(self._append(e.seq, t, now) for e, t in zip(sampled, tokens, strict=True))
            decodes = sum(1 for e in out.scheduled if e.num_new_tokens == 1)
            self.metrics.observe_step(now, out.num_tokens - decodes, len(sampled))
        self.metrics.set_gauges(
            len(self.scheduler.running), len(self.scheduler.waiting), self.pool.usage
        )
        return deltas

    def apply_pending(self) -> list[Delta]:
        """Take in queued requests and aborts now (`step()` does this first); aborts free
        their blocks at once and return their last deltas."""
        while self._incoming:
            self.scheduler.add(self._incoming.popleft())
        deltas = []
        while self._aborts:
            seq = self.requests.get(self._aborts.popleft())
            if seq is not None and not seq.is_finished:
                deltas.append(
                    self._finish(seq, "abort", time.monotonic(), Delta(seq.request_id, "", []))
                )
        return deltas

    def _append(self, seq: Sequence, token: SampledToken, now: float) -> Delta:
        state: RequestState = seq.state
        seq.token_ids.append(token.token_id)
        state.sampler.accept(token.token_id)
        state.metrics.on_token(now)
        delta = Delta(seq.request_id, "", [token.token_id])
        if state.params.logprobs:
            delta.logprobs = [token.logprob]
        if token.token_id in state.stop_ids:
            return self._finish(seq, "stop", now, delta)
        delta.text, stopped = self._text_of(state, token.token_id)
        if stopped or state.sampler.grammar_terminated:
            return self._finish(seq, "stop", now, delta)
        if len(seq.output_token_ids) >= seq.max_tokens:
            return self._finish(seq, "length", now, delta)
        return delta

    def _text_of(self, state: RequestState, token_id: int) -> tuple[str, bool]:
        if state.decoder is None:
            return "", False
        text = state.decoder.push(token_id)
        return state.stops.feed(text) if state.stops is not None else (text, False)

    def _finish(self, seq: Sequence, reason: str, now: float, delta: Delta) -> Delta:
        state: RequestState = seq.state
        if reason != "stop" or state.stops is None or not state.stops.stopped:
            delta.text += self._flush_text(state)
        self.scheduler.finish(seq, reason)
        del self.requests[seq.request_id]
        metrics = state.metrics
        metrics.prompt_tokens = seq.num_prompt_tokens
        metrics.cached_tokens = seq.num_cached_tokens
        metrics.generated_tokens = len(seq.output_token_ids)
        metrics.on_finished(now, reason)
        self.metrics.observe_finished(metrics)
        delta.finish_reason = reason
        delta.metrics = metrics
        return delta

    def _flush_text(self, state: RequestState) -> str:
        if state.decoder is None:
            return ""
        tail = state.decoder.flush()
        if state.stops is None:
            return tail
        text, _ = state.stops.feed(tail)
        return text + state.stops.flush()


class AsyncEngine:
    """Runs `LLMEngine.step()` on one background thread; each request gets an async iterator.

    The thread sleeps on an event while there is nothing to do, and wakes when a request or
    an abort arrives.
    """

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self.error: BaseException | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="engine-step", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)
        self._wake.set()

    async def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        salt: str | None = None,
    ) -> AsyncIterator[Delta]:
        """Deltas of one request as they come; leaving the loop early aborts the request."""
        if self._thread is None:
            raise RuntimeError("AsyncEngine.start() was not called.")
        queue: asyncio.Queue = asyncio.Queue()
        with self._lock:
            request_id = self.engine.add_request(prompt, params, request_id, salt)
            self._streams[request_id] = (asyncio.get_running_loop(), queue)
        self._wake.set()
        finished = False
        try:
            while not finished:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise RuntimeError("The engine failed while running this request.") from item
                finished = item.finish_reason is not None
                yield item
        finally:
            with self._lock:
                self._streams.pop(request_id, None)
            if not finished:
                self.abort(request_id)

    def _loop(self) -> None:
        engine = self.engine
        while not self._stopping:
            if not engine.has_unfinished():
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                deltas = engine.step()
            except Exception as exc:  # every waiting stream must hear about it, not hang
                self.error = exc
                self._fail_all(exc)
                return
            self._deliver(deltas)

    def _deliver(self, deltas: list[Delta]) -> None:
        with self._lock:
            for delta in deltas:
                target = self._streams.get(delta.request_id)
                if target is not None:
                    loop, queue = target
                    loop.call_soon_threadsafe(queue.put_nowait, delta)

    def _fail_all(self, exc: BaseException) -> None:
        with self._lock:
            for loop, queue in self._streams.values():
                loop.call_soon_threadsafe(queue.put_nowait, exc)
