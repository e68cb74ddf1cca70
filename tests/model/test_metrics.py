"""Request and engine metrics with explicit timestamps: exact numbers, vLLM names."""

from __future__ import annotations

import re

import pytest

from model.metrics import EngineMetrics, Histogram, RequestMetrics


def finished_request(arrival: float = 10.0) -> RequestMetrics:
    r = RequestMetrics(arrival_time=arrival, prompt_tokens=120, cached_tokens=64)
    r.on_scheduled(arrival + 0.5)
    r.on_scheduled(arrival + 3.0)  # rescheduled after a preemption: queue time is the first
    for t in (1.0, 1.25, 1.75, 2.0):
        r.on_token(arrival + t)
    r.on_finished(arrival + 2.5, "stop")
    return r


def test_request_timeline() -> None:
    r = finished_request()
    assert r.queue_time_seconds == pytest.approx(0.5)
    assert r.time_to_first_token_seconds == pytest.approx(1.0)
    assert r.inter_token_latencies_seconds == pytest.approx([0.25, 0.5, 0.25])
    assert r.e2e_request_latency_seconds == pytest.approx(2.5)
    assert r.prefill_time_seconds == pytest.approx(0.5)
    assert r.decode_time_seconds == pytest.approx(1.0)
    assert r.inference_time_seconds == pytest.approx(2.0)
    assert r.generated_tokens == 4
    assert r.tokens_per_second == pytest.approx(3.0)
    assert r.finish_reason == "stop"


def test_unfinished_request_reports_none() -> None:
    r = RequestMetrics(arrival_time=1.0)
    assert r.queue_time_seconds is None
    assert r.time_to_first_token_seconds is None
    assert r.e2e_request_latency_seconds is None
    assert r.tokens_per_second is None
    assert r.inter_token_latencies_seconds == []


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 3.0):
        h.observe(value)
    assert h.cumulative() == [("0.1", 2), ("1.0", 4), ("+Inf", 5)]
    assert h.count == 5 and h.sum == pytest.approx(4.65)


def test_engine_counters_and_histograms_from_finished_requests() -> None:
    m = EngineMetrics()
    m.observe_finished(finished_request(10.0))
    aborted = RequestMetrics(arrival_time=20.0, prompt_tokens=30)
    aborted.on_finished(21.0, "abort")
    m.observe_finished(aborted)
    m.observe_prefix_cache(queried_tokens=150, hit_tokens=64)
    m.observe_preemption()
    m.set_gauges(running=3, waiting=7, kv_cache_usage=0.25)
    snap = m.snapshot()
    assert snap["prompt_tokens_total"] == 150
    assert snap["generation_tokens_total"] == 4
    assert snap["prefix_cache_hit_rate"] == pytest.approx(64 / 150)
    assert snap["request_success_total"] == {"stop": 1, "abort": 1}
    assert (snap["num_requests_running"], snap["num_requests_waiting"]) == (3, 7)
    assert snap["time_to_first_token_seconds"] == {"count": 1, "sum": pytest.approx(1.0)}
    assert snap["inter_token_latency_seconds"] == {"count": 3, "sum": pytest.approx(1.0)}
    assert snap["e2e_request_latency_seconds"] == {"count": 2, "sum": pytest.approx(3.5)}
    assert snap["num_preemptions_total"] == 1


def test_tokens_per_second_over_a_sliding_window() -> None:
    m = EngineMetrics()
    assert m.throughput() == (0.0, 0.0)
    m.observe_step(100.0, prompt_tokens=500, generated_tokens=0)
    for i in range(1, 11):
        m.observe_step(100.0 + i * 0.5, prompt_tokens=0, generated_tokens=8)
    assert m.throughput() == (pytest.approx(0.0), pytest.approx(80 / 5.0))
    m.observe_step(130.0, prompt_tokens=100, generated_tokens=4)
    # Old steps fell out of the window; one step alone gives no rate.
    assert m.throughput() == (0.0, 0.0)
    m.observe_step(132.0, prompt_tokens=0, generated_tokens=10)
    assert m.throughput() == (pytest.approx(0.0), pytest.approx(5.0))
    assert m.throughput(now=150.0) == (0.0, 0.0)


def parse_prometheus(text: str) -> dict[str, float]:
    """name{labels} -> value, checking every line is well-formed exposition format."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) vllm:[a-z0-9_]+ .+", line), line
            continue
        match = re.fullmatch(r'(vllm:[a-z0-9_]+)\{((?:[a-z_]+="[^"]*",?)*)\} (\S+)', line)
        assert match, line
        samples[f"{match[1]}{{{match[2]}}}"] = float(match[3])
    return samples


def test_prometheus_rendering_uses_vllm_names() -> None:
    m = EngineMetrics(model_name="SmolLM2")
    m.observe_finished(finished_request())
    m.observe_prefix_cache(queried_tokens=120, hit_tokens=64)
    m.set_gauges(running=2, waiting=1, kv_cache_usage=0.5)
    text = m.render_prometheus()
    samples = parse_prometheus(text)
    label = 'model_name="SmolLM2"'
    assert samples[f"vllm:num_requests_running{{{label}}}"] == 2
    assert samples[f"vllm:num_requests_waiting{{{label}}}"] == 1
    assert samples[f"vllm:kv_cache_usage_perc{{{label}}}"] == 0.5
    assert samples[f"vllm:prompt_tokens_total{{{label}}}"] == 120
    assert samples[f"vllm:generation_tokens_total{{{label}}}"] == 4
    assert samples[f"vllm:prefix_cache_queries_total{{{label}}}"] == 120
    assert samples[f"vllm:prefix_cache_hits_total{{{label}}}"] == 64
    assert samples[f'vllm:request_success_total{{{label},finished_reason="stop"}}'] == 1
    ttft = "vllm:time_to_first_token_seconds"
    assert samples[f'{ttft}_bucket{{{label},le="0.75"}}'] == 0
    assert samples[f'{ttft}_bucket{{{label},le="1.0"}}'] == 1
    assert samples[f'{ttft}_bucket{{{label},le="+Inf"}}'] == 1
    assert samples[f"{ttft}_count{{{label}}}"] == 1
    for name in ("inter_token_latency_seconds", "time_per_output_token_seconds"):
        assert samples[f"vllm:{name}_count{{{label}}}"] == 3
        assert samples[f"vllm:{name}_sum{{{label}}}"] == pytest.approx(1.0)
    for name in ("e2e_request_latency_seconds", "request_queue_time_seconds"):
        assert samples[f"vllm:{name}_count{{{label}}}"] == 1
    assert "# TYPE vllm:prompt_tokens counter" in text
    assert "# TYPE vllm:time_to_first_token_seconds histogram" in text


def test_label_values_are_escaped() -> None:
    text = EngineMetrics(model_name='a"b\\c').render_prometheus()
    assert 'model_name="a\\"b\\\\c"' in text
