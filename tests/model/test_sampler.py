"""Sampler and SamplingParams on synthetic logits with exact expectations."""

from __future__ import annotations

import math

import pytest
import torch

from model.params import SamplingParams
from model.sampler import RequestSampler, sample, truncated_probs

CPU = torch.device("cpu")


def make(params: SamplingParams, vocab: int, prompt: list[int] | None = None) -> RequestSampler:
    return RequestSampler(params, prompt or [], vocab, CPU)


def probs_logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs).log()[None, :]


def test_greedy_is_argmax_per_row() -> None:
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    samplers = [make(SamplingParams(temperature=0.0), 50) for _ in range(6)]
    got = [t.token_id for t in sample(logits, samplers)]
    assert got == logits.argmax(dim=-1).tolist()


def test_top_k_1_equals_argmax_at_any_temperature() -> None:
    gen = torch.Generator().manual_seed(1)
    for seed in range(20):
        logits = torch.randn(3, 100, generator=gen)
        samplers = [
            make(SamplingParams(temperature=5.0, top_k=1, seed=seed + i), 100) for i in range(3)
        ]
        assert [t.token_id for t in sample(logits, samplers)] == logits.argmax(-1).tolist()


def test_top_k_keeps_exactly_k_tokens() -> None:
    logits = torch.randn(2, 30, generator=torch.Generator().manual_seed(2))
    params = [SamplingParams(top_k=5), SamplingParams(top_k=0)]
    probs = truncated_probs(logits, params)
    assert int((probs[0] > 0).sum()) == 5
    assert set(probs[0].nonzero().flatten().tolist()) == set(logits[0].topk(5).indices.tolist())
    assert int((probs[1] > 0).sum()) == 30
    torch.testing.assert_close(probs[1], torch.softmax(logits[1], -1))


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [(0.5, [0]), (0.79, [0, 1]), (0.8, [0, 1]), (0.81, [0, 1, 2]), (1.0, [0, 1, 2, 3])],
)
def test_top_p_keeps_the_smallest_set_reaching_p(top_p: float, kept: list[int]) -> None:
    probs = truncated_probs(probs_logits([0.5, 0.3, 0.15, 0.05]), [SamplingParams(top_p=top_p)])
    assert probs[0].nonzero().flatten().tolist() == kept
    expected = torch.tensor([0.5, 0.3, 0.15, 0.05])[kept]
    torch.testing.assert_close(probs[0, kept], expected / expected.sum())


@pytest.mark.parametrize(("min_p", "kept"), [(0.5, [0, 1]), (0.29, [0, 1, 2]), (0.61, [0])])
def test_min_p_threshold_is_relative_to_the_top_token(min_p: float, kept: list[int]) -> None:
    probs = truncated_probs(probs_logits([0.5, 0.3, 0.15, 0.05]), [SamplingParams(min_p=min_p)])
    assert probs[0].nonzero().flatten().tolist() == kept


def test_sampled_tokens_respect_truncation() -> None:
    logits = torch.randn(1, 40, generator=torch.Generator().manual_seed(3)).repeat(300, 1)
    samplers = [make(SamplingParams(top_k=3, seed=i), 40) for i in range(300)]
    allowed = set(logits[0].topk(3).indices.tolist())
    got = {t.token_id for t in sample(logits, samplers)}
    assert got == allowed


def test_repetition_penalty_hf_semantics() -> None:
    row = torch.tensor([2.0, -2.0, 2.0, -2.0, 1.0])
    s = make(SamplingParams(repetition_penalty=2.0), 5, prompt=[0, 1])
    s.accept(4)
    out = row.clone()
    s.apply_penalties(out)
    assert out.tolist() == [1.0, -4.0, 2.0, -2.0, 0.5]


def test_presence_and_frequency_penalties_count_output_tokens_only() -> None:
    row = torch.zeros(6)
    s = make(SamplingParams(presence_penalty=0.5, frequency_penalty=0.25), 6, prompt=[5, 5])
    for token in [1, 1, 1, 3]:
        s.accept(token)
    s.apply_penalties(row)
    assert row.tolist() == [0.0, -(3 * 0.25 + 0.5), 0.0, -(0.25 + 0.5), 0.0, 0.0]


def test_penalties_change_greedy_choice_through_sample() -> None:
    logits = torch.tensor([[3.0, 2.9, 0.0]])
    s = make(SamplingParams(temperature=0.0, frequency_penalty=1.0), 3)
    assert sample(logits, [s])[0].token_id == 0
    s.accept(0)
    assert sample(logits, [s])[0].token_id == 1


def _run(seed: int, batch_position: int, batch_size: int, steps: int = 12) -> list[int]:
    """Sample one seeded request for `steps` steps inside a batch of unrelated requests."""
    vocab = 64
    target_logits = torch.randn(steps, vocab, generator=torch.Generator().manual_seed(99))
    noise = torch.Generator().manual_seed(1000 + batch_size)
    params = SamplingParams(temperature=0.9, top_p=0.9, presence_penalty=0.3, seed=seed)
    target = make(params, vocab, prompt=[1, 2, 3])
    others = [make(SamplingParams(temperature=1.3, top_k=7), vocab) for _ in range(batch_size - 1)]
    out = []
    for step in range(steps):
        batch = others[:batch_position] + [target] + others[batch_position:]
        logits = torch.randn(batch_size, vocab, generator=noise)
        logits[batch_position] = target_logits[step]
        token = sample(logits, batch)[batch_position].token_id
        target.accept(token)
        out.append(token)
    return out


def test_same_seed_same_tokens_whatever_the_batch() -> None:
    alone = _run(seed=7, batch_position=0, batch_size=1)
    assert _run(seed=7, batch_position=2, batch_size=5) == alone
    assert _run(seed=7, batch_position=6, batch_size=7) == alone
    assert _run(seed=8, batch_position=0, batch_size=1) != alone


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, 0), (0.5, 0), (1.5, 3)])
def test_seeded_samples_match_the_distribution(temperature: float, top_k: int) -> None:
    n, logits_row = 6000, torch.tensor([1.0, 0.5, 0.0, -0.5, -1.0, 2.0])
    samplers = [
        make(SamplingParams(temperature=temperature, top_k=top_k, seed=i), 6) for i in range(n)
    ]
    tokens = torch.tensor([t.token_id for t in sample(logits_row.repeat(n, 1), samplers)])
    scaled = logits_row / temperature
    if top_k:
        scaled[scaled < scaled.topk(top_k).values[-1]] = float("-inf")
    expected = torch.softmax(scaled, -1)
    observed = torch.bincount(tokens, minlength=6).float() / n
    # Five standard errors of a binomial proportion: fails only on a real mismatch.
    tolerance = 5 * torch.sqrt(expected * (1 - expected) / n) + 1e-9
    assert torch.all((observed - expected).abs() <= tolerance), (observed, expected)


def test_logprob_is_raw_log_softmax_of_chosen_token() -> None:
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(4))
    samplers = [
        make(SamplingParams(temperature=0.0, logprobs=True, repetition_penalty=1.5), 20, [1]),
        make(SamplingParams(temperature=0.7, top_p=0.5, logprobs=True, seed=3), 20),
        make(SamplingParams(temperature=0.7), 20),
    ]
    out = sample(logits, samplers)
    raw = torch.log_softmax(logits, -1)
    for i in range(2):
        assert math.isclose(out[i].logprob, float(raw[i, out[i].token_id]), abs_tol=1e-6)
    assert out[2].logprob is None


def test_stop_ids_include_eos_unless_ignored() -> None:
    assert SamplingParams(stop_token_ids=[7]).stop_ids([2, 3]) == {2, 3, 7}
    assert SamplingParams(stop_token_ids=[7], ignore_eos=True).stop_ids([2, 3]) == {7}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"presence_penalty": 3.0}, "presence_penalty"),
        ({"frequency_penalty": -2.5}, "frequency_penalty"),
        ({"stop": "###"}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"seed": 1.5}, "seed"),
        ({"regex": "a+", "choices": ["a"]}, "at most one"),
        ({"choices": []}, "choices"),
    ],
)
def test_invalid_params_are_rejected_clearly(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_logits_shape_must_match_samplers() -> None:
    with pytest.raises(ValueError, match="one row per sampler"):
        sample(torch.zeros(2, 5), [make(SamplingParams(), 5)])


def test_top_p_whose_set_is_larger_than_the_candidates_sorts_the_whole_row() -> None:
    weights = torch.cat([torch.linspace(2.0, 1.0, 1500), torch.full((2596,), 1e-6)]).double()
    mass = (weights / weights.sum()).cumsum(0)
    top_p = float((mass[1299] + mass[1300]) / 2)  # halfway: 1301 tokens reach it
    probs = truncated_probs(weights.float().log()[None, :], [SamplingParams(top_p=top_p)])
    assert probs[0].nonzero().flatten().tolist() == list(range(1301))
