"""Request and engine metrics, named as vLLM names them so existing dashboards fit.

Every method takes explicit timestamps (seconds, e.g. `time.monotonic()`), so the numbers
are the engine's own and tests need no clocks.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter, deque
from dataclasses import dataclass, field

# vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), so histograms line up with theirs.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)
THROUGHPUT_WINDOW_S = 10.0


@dataclass(slots=True)
class RequestMetrics:
    """One request's timeline; created at arrival, fed by the engine."""

    arrival_time: float
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    generated_tokens: int = 0
    scheduled_time: float | None = None  # first time it was scheduled (not after preemption)
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    finish_reason: str | None = None
    inter_token_latencies_seconds: list[float] = field(default_factory=list)

    def on_scheduled(self, t: float) -> None:
        if self.scheduled_time is None:
            self.scheduled_time = t

    def on_token(self, t: float) -> None:
        self.generated_tokens += 1
        if self.first_token_time is None:
            self.first_token_time = t
        else:
            self.inter_token_latencies_seconds.append(t - self.last_token_time)
        self.last_token_time = t

    def on_finished(self, t: float, reason: str) -> None:
        self.finished_time = t
        self.finish_reason = reason

    @property
    def queue_time_seconds(self) -> float | None:
        return _since(self.arrival_time, self.scheduled_time)

    @property
    def time_to_first_token_seconds(self) -> float | None:
        return _since(self.arrival_time, self.first_token_time)

    @property
    def e2e_request_latency_seconds(self) -> float | None:
        return _since(self.arrival_time, self.finished_time)

    @property
    def prefill_time_seconds(self) -> float | None:
        return _since(self.scheduled_time, self.first_token_time)

    @property
    def decode_time_seconds(self) -> float | None:
        return _since(self.first_token_time, self.last_token_time)

    @property
    def inference_time_seconds(self) -> float | None:
        return _since(self.scheduled_time, self.finished_time)

    @property
    def tokens_per_second(self) -> float | None:
        """Decode speed of this request: tokens after the first over the time they took."""
        decode = self.decode_time_seconds
        if not decode:
            return None
        return (self.generated_tokens - 1) / decode


def _since(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


class Histogram:
    """A Prometheus histogram: cumulative counts per upper bound, a sum and a count."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * (len(self.buckets) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le label, observations <= le) for every bucket and +Inf."""
        labels = [_number(b) for b in self.buckets] + ["+Inf"]
        running, out = 0, []
        for label, count in zip(labels, self.counts, strict=True):
            running += count
            out.append((label, running))
        return out


# name (without "vllm:"), help text, buckets, and how to read the values off a request.
_REQUEST_HISTOGRAMS = (
    ("time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS),
    ("inter_token_latency_seconds", "Time between consecutive output tokens.", ITL_BUCKETS),
    ("time_per_output_token_seconds", "Older name of inter_token_latency_seconds.", ITL_BUCKETS),
    ("e2e_request_latency_seconds", "Arrival to finish.", LATENCY_BUCKETS),
    ("request_queue_time_seconds", "Time waiting before first scheduled.", LATENCY_BUCKETS),
    ("request_prefill_time_seconds", "First scheduled to first token.", LATENCY_BUCKETS),
    ("request_decode_time_seconds", "First token to last token.", LATENCY_BUCKETS),
    ("request_inference_time_seconds", "First scheduled to finish.", LATENCY_BUCKETS),
    ("request_prompt_tokens", "Prompt length of finished requests.", TOKEN_BUCKETS),
    ("request_generation_tokens", "Output length of finished requests.", TOKEN_BUCKETS),
)


def _request_values(name: str, r: RequestMetrics) -> list[float]:
    if name in ("inter_token_latency_seconds", "time_per_output_token_seconds"):
        return list(r.inter_token_latencies_seconds)
    value = {
        "time_to_first_token_seconds": r.time_to_first_token_seconds,
        "e2e_request_latency_seconds": r.e2e_request_latency_seconds,
        "request_queue_time_seconds": r.queue_time_seconds,
        "request_prefill_time_seconds": r.prefill_time_seconds,
        "request_decode_time_seconds": r.decode_time_seconds,
        "request_inference_time_seconds": r.inference_time_seconds,
        "request_prompt_tokens": r.prompt_tokens,
        "request_generation_tokens": r.generated_tokens,
    }[name]
    return [] if value is None else [value]


class EngineMetrics:
    """Engine-wide counters, gauges and histograms; thread-safe (the engine runs on its own
    thread while the web server reads)."""

    def __init__(self, model_name: str = "default") -> None:
        self.model_name = model_name
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prefix_cache_queries_total = 0  # prompt tokens looked up in the prefix cache
        self.prefix_cache_hits_total = 0  # of those, tokens found
        self.num_preemptions_total = 0
        self.request_success_total: Counter[str] = Counter()  # by finish reason
        self.num_requests_running = 0
        self.num_requests_waiting = 0
        self.kv_cache_usage_perc = 0.0  # fraction of KV blocks in use, 0..1 as vLLM reports
        self.histograms = {name: Histogram(b) for name, _, b in _REQUEST_HISTOGRAMS}
        self._steps: deque[tuple[float, int, int]] = deque()  # (t, prompt, generated) per step
        self._lock = threading.Lock()

    def observe_finished(self, request: RequestMetrics) -> None:
        """Count a finished (or aborted) request into the counters and histograms."""
        with self._lock:
            self.prompt_tokens_total += request.prompt_tokens
            self.generation_tokens_total += request.generated_tokens
            self.request_success_total[request.finish_reason or "unknown"] += 1
            for name, histogram in self.histograms.items():
                for value in _request_values(name, request):
                    histogram.observe(value)

    def observe_prefix_cache(self, queried_tokens: int, hit_tokens: int) -> None:
        with self._lock:
            self.prefix_cache_queries_total += queried_tokens
            self.prefix_cache_hits_total += hit_tokens

    def observe_preemption(self, count: int = 1) -> None:
        with self._lock:
            self.num_preemptions_total += count

    def set_gauges(self, running: int, waiting: int, kv_cache_usage: float) -> None:
        with self._lock:
            self.num_requests_running = running
            self.num_requests_waiting = waiting
            self.kv_cache_usage_perc = kv_cache_usage

    def observe_step(self, t: float, prompt_tokens: int, generated_tokens: int) -> None:
        """One engine step's work, for the tokens/s over the last THROUGHPUT_WINDOW_S."""
        with self._lock:
            self._steps.append((t, prompt_tokens, generated_tokens))
            while self._steps and self._steps[0][0] < t - THROUGHPUT_WINDOW_S:
                self._steps.popleft()

    def throughput(self, now: float | None = None) -> tuple[float, float]:
        """(prompt tokens/s, generation tokens/s) over the window ending at `now` (the last
        step when not given): the tokens of the steps after the window's first step, over the
        time since that step."""
        with self._lock:
            if not self._steps:
                return 0.0, 0.0
            now = self._steps[-1][0] if now is None else now
            recent = [s for s in self._steps if now - THROUGHPUT_WINDOW_S <= s[0] <= now]
        if len(recent) < 2 or now <= recent[0][0]:
            return 0.0, 0.0
        span = now - recent[0][0]
        return sum(s[1] for s in recent[1:]) / span, sum(s[2] for s in recent[1:]) / span

    @property
    def prefix_cache_hit_rate(self) -> float:
        queries = self.prefix_cache_queries_total
        return self.prefix_cache_hits_total / queries if queries else 0.0

    def snapshot(self) -> dict[str, float | int | dict[str, float | int]]:
        """Every number at once, keyed by vLLM metric name (without the 'vllm:' prefix)."""
        prompt_tps, generation_tps = self.throughput()
        with self._lock:
            out: dict[str, float | int | dict[str, float | int]] = {
                "num_requests_running": self.num_requests_running,
                "num_requests_waiting": self.num_requests_waiting,
                "kv_cache_usage_perc": self.kv_cache_usage_perc,
                "prompt_tokens_total": self.prompt_tokens_total,
                "generation_tokens_total": self.generation_tokens_total,
                "prefix_cache_queries_total": self.prefix_cache_queries_total,
                "prefix_cache_hits_total": self.prefix_cache_hits_total,
                "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
                "num_preemptions_total": self.num_preemptions_total,
                "request_success_total": dict(self.request_success_total),
                "prompt_tokens_per_second": prompt_tps,
                "generation_tokens_per_second": generation_tps,
            }
            for name, h in self.histograms.items():
                out[name] = {"count": h.count, "sum": h.sum}
        return out

    def render_prometheus(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        label = f'model_name="{_escape(self.model_name)}"'
        lines: list[str] = []
        with self._lock:
            self._render_scalars(lines, label)
            for name, help_text, _ in _REQUEST_HISTOGRAMS:
                _render_histogram(lines, f"vllm:{name}", help_text, label, self.histograms[name])
        return "\n".join(lines) + "\n"

    def _render_scalars(self, lines: list[str], label: str) -> None:
        gauges = (
            ("num_requests_running", "Requests running.", self.num_requests_running),
            ("num_requests_waiting", "Requests waiting.", self.num_requests_waiting),
            ("kv_cache_usage_perc", "KV-cache usage, 1 = 100%.", self.kv_cache_usage_perc),
        )  # fmt: skip
        for name, help_text, value in gauges:
            _render_metric(lines, f"vllm:{name}", "gauge", help_text, [(label, value)])
        counters = (
            ("prompt_tokens", "Prompt tokens processed.", self.prompt_tokens_total),
            ("generation_tokens", "Tokens generated.", self.generation_tokens_total),
            ("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
             self.prefix_cache_queries_total),
            ("prefix_cache_hits", "Prompt tokens found in the prefix cache.",
             self.prefix_cache_hits_total),
            ("num_preemptions", "Preemptions of running requests.", self.num_preemptions_total),
        )  # fmt: skip
        for name, help_text, value in counters:
            _render_metric(lines, f"vllm:{name}", "counter", help_text, [(label, value)], "_total")
        by_reason = [
            (f'{label},finished_reason="{_escape(reason)}"', count)
            for reason, count in sorted(self.request_success_total.items())
        ]
        _render_metric(
            lines, "vllm:request_success", "counter", "Finished requests.", by_reason, "_total"
        )


def _render_metric(
    lines: list[str],
    name: str,
    kind: str,
    help_text: str,
    samples: list[tuple[str, float]],
    suffix: str = "",
) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{suffix}{{{labels}}} {_number(value)}" for labels, value in samples]


def _render_histogram(
    lines: list[str], name: str, help_text: str, label: str, histogram: Histogram
) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for le, count in histogram.cumulative():
        lines.append(f'{name}_bucket{{{label},le="{le}"}} {count}')
    lines.append(f"{name}_sum{{{label}}} {_number(histogram.sum)}")
    lines.append(f"{name}_count{{{label}}} {histogram.count}")


def _number(value: float) -> str:
    return repr(float(value))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
