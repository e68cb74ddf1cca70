"""The latency benchmark times the served encoder and, with --compare, the others."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("torch")


def test_bench_times_the_served_precision_and_the_compared_ones(classifier, capsys) -> None:
    from assistant.safety.bench import main

    assert main(["--count", "3", "--threads", "1", "--compare", "float32", "bfloat16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [re.search(r"thread\(s\), (.+?): p50 [\d.]+ ms  p95 [\d.]+ ms$", ln)[1] for ln in lines]
    served = classifier.encoder.precision
    others = [p for p in ("float32", "bfloat16") if p != served]
    assert names == [f"served ({served})", *others]
