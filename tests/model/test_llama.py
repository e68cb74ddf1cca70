"""The network against tiny random HF Llama / Qwen2 models: same logits, through the paged cache."""

from __future__ import annotations

import pytest
import torch

from model.llama import BLOCK_SIZE, AttentionBatch, PrefillSpan, rope_inverse_frequencies
from model.runner import ModelRunner
from model.sequence import Sequence
from tests.model.tiny_models import our_config, our_model, run_steps, tiny_hf_model

VARIANTS = {
    "llama-gqa-untied": dict(kind="llama"),
    "llama-mha-tied": dict(kind="llama", tied=True, heads=4, kv_heads=4),
    "llama3-rope": dict(
        kind="llama",
        kv_heads=1,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    "linear-rope": dict(kind="llama", rope_scaling={"rope_type": "linear", "factor": 4.0}),
    "qwen2-bias-tied": dict(kind="qwen2", tied=True),
}

pytestmark = pytest.mark.usefixtures("one_thread")


def hf_logits(hf_model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([tokens])).logits[0].float()


def prefill_all_positions(model, tokens: list[int], table: list[int]) -> torch.Tensor:
    cache = model.new_cache(64)
    n = len(tokens)
    slots = [table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(n)]
    batch = AttentionBatch(slot_mapping=torch.tensor(slots), prefills=(PrefillSpan(0, n, 0, None),))
    return model.forward(torch.tensor(tokens), torch.arange(n), batch, cache, torch.arange(n))


def token_by_token(model, tokens: list[int], table: list[int]) -> torch.Tensor:
    runner = ModelRunner(model, model.new_cache(64))
    seq = Sequence("s", tokens[:1], max_tokens=1, block_table=table)
    rows = []
    for i in range(len(tokens)):
        seq.token_ids = tokens[: i + 1]
        rows.append(run_steps(runner, [seq], [[1]])[0][0])
    return torch.stack(rows)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def pair(request):
    hf = tiny_hf_model(**VARIANTS[request.param])
    return hf, our_model(hf)


def random_tokens(n: int, seed: int, vocab: int = 128) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def test_full_prefill_matches_reference(pair) -> None:
    hf, ours = pair
    tokens = random_tokens(70, 1)
    expected = hf_logits(hf, tokens)
    got = prefill_all_positions(ours, tokens, list(range(5)))
    assert (got - expected).abs().max() < 1e-4


def test_token_by_token_matches_reference(pair) -> None:
    hf, ours = pair
    tokens = random_tokens(40, 2)
    expected = hf_logits(hf, tokens)
    got = token_by_token(ours, tokens, [7, 3, 9])
    assert (got - expected).abs().max() < 1e-4


def test_chunked_prefill_matches_reference(pair) -> None:
    hf, ours = pair
    tokens = random_tokens(50, 3)
    expected = hf_logits(hf, tokens)[-1]
    runner = ModelRunner(ours, ours.new_cache(64))
    seq = Sequence("s", tokens, max_tokens=1, block_table=[11, 2, 30, 5])
    logits = run_steps(runner, [seq], [[17], [1], [20], [12]])
    assert logits[0].shape[0] == 0 and (logits[-1][0] - expected).abs().max() < 1e-4


def test_scattered_blocks_equal_contiguous() -> None:
    hf = tiny_hf_model()
    ours = our_model(hf)
    tokens = random_tokens(60, 4)
    contiguous = prefill_all_positions(ours, tokens, [0, 1, 2, 3])
    scattered = prefill_all_positions(ours, tokens, [41, 7, 60, 13])
    assert torch.equal(contiguous, scattered)
    by_token = token_by_token(ours, tokens, [50, 2, 33, 17])
    assert (by_token - contiguous).abs().max() < 1e-5


def test_mixed_batch_equals_each_alone() -> None:
    hf = tiny_hf_model(kind="qwen2")
    ours = our_model(hf)
    prompts = [random_tokens(n, 10 + n) for n in (5, 33, 18)]
    alone = [hf_logits(hf, p)[-1] for p in prompts]
    runner = ModelRunner(ours, ours.new_cache(64))
    seqs = [
        Sequence(str(i), p, max_tokens=1, block_table=[10 * i + b for b in range(3)])
        for i, p in enumerate(prompts)
    ]
    # Step 1: seq 0 whole, seq 1 a chunk; step 2: seq 1 rest, seq 2 whole, all in one batch.
    run_steps(runner, seqs, [[5, 16, 0]])
    seqs[0].token_ids.append(prompts[0][0])  # seq 0 now decodes while the others prefill
    last = run_steps(runner, seqs, [[1, 17, 18]])[0]
    assert last.shape[0] == 3
    assert (last[1] - alone[1]).abs().max() < 1e-4
    assert (last[2] - alone[2]).abs().max() < 1e-4
    assert (last[0] - hf_logits(hf, seqs[0].token_ids)[-1]).abs().max() < 1e-4


def test_decodes_of_different_lengths_in_one_batch() -> None:
    hf = tiny_hf_model()
    ours = our_model(hf)
    prompts = [random_tokens(n, 20 + n) for n in (3, 21, 40)]
    runner = ModelRunner(ours, ours.new_cache(64))
    seqs = [
        Sequence(str(i), p, max_tokens=1, block_table=[5 + 10 * i + b for b in range(4)])
        for i, p in enumerate(prompts)
    ]
    run_steps(runner, seqs, [[len(p) for p in prompts]])
    for s in seqs:
        s.token_ids.append(1)
    last = run_steps(runner, seqs, [[1, 1, 1]])[0]
    for row, s in zip(last, seqs, strict=True):
        assert (row - hf_logits(hf, s.token_ids)[-1]).abs().max() < 1e-4


def test_unknown_rope_scaling_is_rejected() -> None:
    config = our_config(tiny_hf_model())
    config.rope_scaling = {"rope_type": "yarn", "factor": 2.0}
    with pytest.raises(ValueError, match="yarn"):
        rope_inverse_frequencies(config)
