"""The real bundled weights through our network and paged cache against the reference library."""

from __future__ import annotations

import pytest
import torch

from model.engine import LLMEngine
from model.llama import BLOCK_SIZE, AttentionBatch, LlamaModel, PrefillSpan
from model.params import SamplingParams
from model.runner import ModelRunner
from model.sequence import ScheduledSeq, Sequence

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Employees may carry over up to five days of unused annual leave into the next year, "
    "provided that the request is approved by their manager before",
]
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def ours(loaded_model) -> LlamaModel:
    return LlamaModel(loaded_model.config, loaded_model.weights, torch.device("cpu"), torch.float32)


@pytest.fixture(scope="module")
def encoded(hf_reference) -> list[list[int]]:
    return [hf_reference[1].encode(p, add_special_tokens=False) for p in PROMPTS]


def reference_logits(hf_reference, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_reference[0](torch.tensor([tokens])).logits[0].float()


def reference_greedy(hf_model, prompt: list[int], count: int) -> list[int]:
    """The reference's own cached forward, argmax each step, straight through end-of-turn
    tokens (its `generate` would suppress them under min_new_tokens)."""
    out, past, step = [], None, torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(count):
            result = hf_model(step, past_key_values=past, use_cache=True)
            past = result.past_key_values
            out.append(int(result.logits[0, -1].argmax()))
            step = torch.tensor([[out[-1]]])
    return out


def test_full_prefill_logits_match_the_reference(ours, encoded, hf_reference) -> None:
    for tokens in encoded:
        n = len(tokens)
        table = [5 + 3 * b for b in range(-(-n // BLOCK_SIZE))]  # scattered blocks
        slots = [table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(n)]
        batch = AttentionBatch(torch.tensor(slots), prefills=(PrefillSpan(0, n, 0, None),))
        got = ours.forward(
            torch.tensor(tokens), torch.arange(n), batch, ours.new_cache(64), torch.arange(n)
        )
        assert (got - reference_logits(hf_reference, tokens)).abs().max() < TOLERANCE


def test_token_by_token_logits_match_the_reference(ours, encoded, hf_reference) -> None:
    for tokens in encoded[:2]:
        runner = ModelRunner(ours, ours.new_cache(64))
        seq = Sequence("s", tokens[:1], max_tokens=1, block_table=[40, 2, 17, 9])
        rows = []
        for i in range(len(tokens)):
            seq.token_ids = tokens[: i + 1]
            logits, _ = runner.run([ScheduledSeq(seq, 1)])
            seq.num_computed_tokens += 1
            rows.append(logits[0])
        got = torch.stack(rows)
        assert (got - reference_logits(hf_reference, tokens)).abs().max() < TOLERANCE


def test_greedy_continuations_match_the_reference(loaded_model, encoded, hf_reference) -> None:
    """64 greedy tokens, prompts batched together in our engine, each alone in the reference."""
    hf_model = hf_reference[0]
    engine = LLMEngine(
        loaded_model.config,
        loaded_model.weights,
        loaded_model.tokenizer,
        device="cpu",
        dtype=torch.float32,
    )
    params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
    prompts = encoded[1:]
    ids = [engine.add_request(p, params) for p in prompts]
    got: dict[str, list[int]] = {i: [] for i in ids}
    while engine.has_unfinished():
        for delta in engine.step():
            got[delta.request_id].extend(delta.token_ids)
    for rid, prompt in zip(ids, prompts, strict=True):
        want = reference_greedy(hf_model, prompt, 64)
        mine = got[rid]
        assert len(mine) == 64
        if mine != want:
            at = next(i for i, (a, b) in enumerate(zip(mine, want, strict=True)) if a != b)
            logits = reference_logits(hf_reference, prompt + want[:at])[-1]
            gap = (logits[want[at]] - logits[mine[at]]).abs().item()
            assert gap < TOLERANCE, f"diverged at token {at} with a logit gap of {gap}"
