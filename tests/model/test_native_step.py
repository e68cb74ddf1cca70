"""The native step (model/native_step.py) against the PyTorch path on the same weights.

Tiny random models get their layer matrices quantised to Q4_1 in the test, and the float
weights replaced by the dequantised values, so both paths multiply the same weights; the
native step also quantises its activations to int8 per 32 inputs, hence the tolerances.
"""

from __future__ import annotations

import random

import pytest
import torch

from model.dequantize import Q4Groups
from model.engine import LLMEngine
from model.llama import LlamaModel
from model.native_step import MAX_ROWS, layer_matrix_names, native_step_supported
from model.params import SamplingParams
from model.runner import ModelRunner
from model.sequence import ScheduledSeq, Sequence
from tests.model.tiny_models import CPU, our_config, tiny_hf_model

pytestmark = pytest.mark.usefixtures("one_thread")


def quantise_q4_1(weight: torch.Tensor) -> tuple[Q4Groups, torch.Tensor]:
    """Q4_1 as llama.cpp stores it (fp16 scale and minimum per 32 inputs), and its values."""
    rows, cols = weight.shape
    blocks = weight.view(rows, cols // 32, 32)
    low = blocks.min(dim=2).values.half().float()
    scale = ((blocks.max(dim=2).values - low) / 15).half().float()
    codes = ((blocks - low[..., None]) / scale[..., None].clamp_min(1e-8)).round().clamp(0, 15)
    values = codes * scale[..., None] + low[..., None]
    return Q4Groups(codes.to(torch.uint8).view(rows, cols), scale, low), values.view(rows, cols)


def tiny_q4_weights(kind: str, dtype: torch.dtype, seed: int):
    """A tiny model's config, float weights and Q4 codes (skips where the step cannot run)."""
    hf = tiny_hf_model(kind, vocab=256, layers=2, seed=seed)
    config = our_config(hf)
    weights = {k: v.detach().float() for k, v in hf.state_dict().items()}
    q4 = {}
    for i in range(config.num_hidden_layers):
        for names in layer_matrix_names(config, i).values():
            for name in names:
                q4[name], weights[name] = quantise_q4_1(weights[name])
    if not native_step_supported(config, dtype, CPU, q4):
        pytest.skip("the native step needs a CPU with AVX2 and a C compiler")
    return config, weights, q4


def tiny_q4_model(kind: str, dtype: torch.dtype, seed: int = 0) -> LlamaModel:
    config, weights, q4 = tiny_q4_weights(kind, dtype, seed)
    return LlamaModel(config, weights, CPU, dtype, q4, native=True)


def prefilled(model: LlamaModel, lengths: list[int], seed: int):
    """A runner and sequences whose random prompts are in the cache (scattered blocks)."""
    rng = random.Random(seed)
    blocks = list(range(64))
    rng.shuffle(blocks)
    runner = ModelRunner(model, model.new_cache(64))
    seqs = []
    for i, n in enumerate(lengths):
        prompt = [rng.randrange(model.config.vocab_size) for _ in range(n)]
        seqs.append(Sequence(f"s{i}", prompt, max_tokens=64, block_table=blocks[8 * i : 8 * i + 8]))
    native, model.native_step = model.native_step, None
    runner.run([ScheduledSeq(s, len(s.token_ids)) for s in seqs])
    model.native_step = native
    for s in seqs:
        s.num_computed_tokens = len(s.token_ids)
    return runner, seqs


def decode(runner: ModelRunner, seqs: list[Sequence], native: bool) -> torch.Tensor:
    """Logits of one decode step for every sequence (which stays at the same position)."""
    model = runner.model
    kept, model.native_step = model.native_step, model.native_step if native else None
    try:
        logits, _ = runner.run([ScheduledSeq(s, 1) for s in seqs])
    finally:
        model.native_step = kept
    return logits


@pytest.mark.parametrize("kind", ["llama", "qwen2"])  # qwen2: q/k/v biases
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lengths", [[5], [3, 17, 40], [9, 1, 33, 16, 2, 70]])
def test_native_step_matches_the_torch_path(kind, dtype, lengths) -> None:
    model = tiny_q4_model(kind, dtype)
    runner, seqs = prefilled(model, lengths, seed=len(lengths))
    for step in range(4):
        for s in seqs:
            s.token_ids.append((7 * step + len(s.token_ids)) % model.config.vocab_size)
        got = decode(runner, seqs, native=True)
        # The torch path last: the cache keeps its K/V, so every step starts from the same
        # history and only that step's difference is measured.
        want = decode(runner, seqs, native=False)
        scale = want.abs().max()
        assert (got - want).abs().max() <= 0.03 * scale, (step, (got - want).abs().max(), scale)
        for s in seqs:
            s.num_computed_tokens += 1


def test_native_step_is_batch_invariant() -> None:
    """Each sequence's numbers depend on it alone: batched or alone, the same logits."""
    model = tiny_q4_model("llama", torch.float32, seed=1)
    lengths = [4, 20, 37, 8, 51]
    runner, seqs = prefilled(model, lengths, seed=3)
    for s in seqs:
        s.token_ids.append(11)
    together = decode(runner, seqs, native=True)
    for i, s in enumerate(seqs):
        assert torch.equal(decode(runner, [s], native=True)[0], together[i])


def prefill_logits(model: LlamaModel, prompts: list[list[int]], chunk: int, native: bool):
    """Each prompt's last-position logits when all are prefilled together, `chunk` tokens of
    each a step (a chunk of one token is a decode), and the cache they leave."""
    runner = ModelRunner(model, model.new_cache(64))
    seqs = [
        Sequence(f"s{i}", p, max_tokens=8, block_table=list(range(8 * i + 7, 8 * i - 1, -1)))
        for i, p in enumerate(prompts)
    ]
    kept, model.native_step = model.native_step, model.native_step if native else None
    out = {}
    try:
        while todo := [s for s in seqs if s.num_computed_tokens < s.num_tokens]:
            entries = [
                ScheduledSeq(s, min(chunk, s.num_tokens - s.num_computed_tokens)) for s in todo
            ]
            logits, sampled = runner.run(entries)
            out.update((e.seq.request_id, row) for e, row in zip(sampled, logits, strict=True))
            for e in entries:
                e.seq.num_computed_tokens += e.num_new_tokens
    finally:
        model.native_step = kept
    return torch.stack([out[s.request_id] for s in seqs]), runner.cache


def random_prompts(lengths: list[int], vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_prefill_matches_the_torch_path(kind, dtype) -> None:
    model = tiny_q4_model(kind, dtype, seed=4)
    prompts = random_prompts([2, 19, 70, 33], model.config.vocab_size, seed=5)
    want, _ = prefill_logits(model, prompts, chunk=1000, native=False)
    scale = want.abs().max()
    for chunk in (1000, 16, 5):
        got, _ = prefill_logits(model, prompts, chunk=chunk, native=True)
        assert (got - want).abs().max() <= 0.03 * scale, (chunk, (got - want).abs().max(), scale)


def test_native_prefill_does_not_depend_on_chunks_or_batch() -> None:
    """A token's numbers depend on its own sequence alone: one chunk, many, token by token
    (decodes), alone or beside other prompts, the same logits and the same cache."""
    model = tiny_q4_model("llama", torch.float32, seed=6)
    prompts = random_prompts([45, 3, 28], model.config.vocab_size, seed=7)
    whole, whole_cache = prefill_logits(model, prompts, chunk=1000, native=True)
    for chunk in (13, 1):
        logits, cache = prefill_logits(model, prompts, chunk=chunk, native=True)
        assert torch.equal(logits, whole), chunk
        assert all(torch.equal(a, b) for a, b in zip(cache.keys, whole_cache.keys, strict=True))
    for i, prompt in enumerate(prompts):
        alone, _ = prefill_logits(model, [prompt], chunk=10, native=True)
        assert torch.equal(alone[0], whole[i])


def test_native_step_refuses_bad_input() -> None:
    model = tiny_q4_model("llama", torch.float32)
    step = model.native_step
    cache = model.new_cache(4)
    one = torch.tensor([1])
    tables = torch.tensor([[0]])
    args = (cache.keys, cache.values)
    with pytest.raises(RuntimeError, match="out of range"):
        step(*args, torch.tensor([10_000]), one, one, tables, torch.tensor([2]))
    with pytest.raises(RuntimeError, match="out of range"):  # a length beyond its table
        step(*args, one, one, one, tables, torch.tensor([17]))
    with pytest.raises(RuntimeError, match="out of range"):  # a slot beyond the cache
        step(*args, one, one, torch.tensor([4 * 16]), tables, torch.tensor([2]))
    with pytest.raises(RuntimeError, match="out of range"):  # a block beyond the cache
        step(*args, one, one, one, torch.tensor([[4]]), torch.tensor([2]))
    with pytest.raises(RuntimeError, match="out of range"):  # logits of a row not there
        step(*args, one, one, one, tables, torch.tensor([2]), torch.tensor([1]))
    with pytest.raises(ValueError, match="1 to"):
        n = MAX_ROWS + 1
        step(*args, *(torch.ones(n, dtype=torch.long),) * 3, tables.repeat(n, 1), one.repeat(n))
    with pytest.raises(ValueError, match="int64"):
        step(*args, one.int(), one, one, tables, torch.tensor([2]))


def test_engine_output_does_not_depend_on_the_batch() -> None:
    """Through the engine, requests joining while others decode (steps that mix prefill
    chunks with native decodes) get the tokens each gets alone."""
    config, weights, q4 = tiny_q4_weights("llama", torch.float32, seed=2)
    engine = LLMEngine(config, weights, device="cpu", dtype=torch.float32, q4=q4, num_blocks=64)
    assert engine.weight_format == "native" and engine.model.native_step is not None
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    prompts = [[1, 2, 3], list(range(5, 40)), [9] * 20, [4]]

    def generate(batch: list[list[int]], stagger: int) -> list[list[int]]:
        out: dict[str, list[int]] = {}
        ids = []
        for prompt in batch:  # each joins `stagger` steps after the one before
            ids.append(engine.add_request(prompt, params))
            out[ids[-1]] = []
            for _ in range(stagger):
                for d in engine.step():
                    out[d.request_id] += d.token_ids
        while engine.has_unfinished():
            for d in engine.step():
                out[d.request_id] += d.token_ids
        return [out[i] for i in ids]

    alone = [generate([p], 0)[0] for p in prompts]
    assert all(len(t) == 12 for t in alone)
    assert generate(prompts, 0) == alone
    assert generate(prompts, 3) == alone
