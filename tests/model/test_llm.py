"""LLM on the bundled model: batched generate, chat, stream, Completion fields."""

from __future__ import annotations

import pytest
import torch

from model import LLM, Completion, SamplingParams

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)
PROMPTS = ["Once upon a time", "The three primary colours are red, yellow and", "Hi"]


@pytest.fixture(scope="module")
def llm(loaded_model) -> LLM:
    # float32: batched and alone are compared token for token (near-ties at 1e-3).
    return LLM.from_loaded(loaded_model, device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def batched(llm) -> list[Completion]:
    return llm.generate(PROMPTS, GREEDY)


def test_generate_batches_prompts_and_fills_completions(llm, batched) -> None:
    assert len(batched) == len(PROMPTS)
    for prompt, done in zip(PROMPTS, batched, strict=True):
        assert done.prompt_tokens == len(llm.tokenizer.encode(prompt, add_special_tokens=True))
        assert done.completion_tokens == len(done.token_ids)
        assert done.finish_reason in ("stop", "length")
        if done.finish_reason == "length":
            assert done.completion_tokens == GREEDY.max_tokens
        else:
            assert done.token_ids[-1] in llm.tokenizer.eos_token_ids
        assert done.text == llm.tokenizer.decode(done.token_ids)
        assert done.metrics.time_to_first_token_seconds is not None
    assert any(d.text.strip() for d in batched)


def test_each_prompt_alone_gives_the_batched_output(llm, batched) -> None:
    for prompt, done in zip(PROMPTS, batched, strict=True):
        (alone,) = llm.generate(prompt, GREEDY)
        assert alone.token_ids == done.token_ids


def test_stream_concatenates_to_the_generated_text(llm, batched) -> None:
    deltas = list(llm.stream(PROMPTS[0], GREEDY))
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert deltas[-1].finish_reason == batched[0].finish_reason
    assert "".join(d.text for d in deltas) == batched[0].text
    assert [t for d in deltas for t in d.token_ids] == batched[0].token_ids


def test_closing_a_stream_early_aborts_and_frees_blocks(llm) -> None:
    stream = llm.stream(PROMPTS[1], SamplingParams(max_tokens=200, temperature=0.0))
    next(stream)
    stream.close()
    assert not llm.engine.has_unfinished()
    assert llm.engine.pool.num_free_blocks == llm.engine.pool.num_blocks


def test_chat_applies_the_template_and_answers(llm) -> None:
    # France's capital is a near-tie for this small model's first token under the chat
    # template ("The" or "L'", by the path and the machine, torch float32 included); Japan's
    # is answered alike on every path.
    messages = [{"role": "user", "content": "What is the capital of Japan?"}]
    done = llm.chat(messages, SamplingParams(max_tokens=24, temperature=0.0))
    template = llm.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert done.prompt_tokens == len(llm.tokenizer.encode(template))
    assert "Tokyo" in done.text


def test_logprobs_and_stop_strings(llm) -> None:
    params = SamplingParams(max_tokens=30, temperature=0.0, logprobs=True, stop=["\n"])
    done = llm.generate("List three fruits:\n1.", params)[0]
    assert done.logprobs is not None and len(done.logprobs) == done.completion_tokens
    assert all(lp <= 0.0 for lp in done.logprobs)
    assert done.finish_reason == "stop" and "\n" not in done.text and done.text.strip()


def test_a_bad_prompt_in_a_batch_leaves_nothing_behind(llm) -> None:
    with pytest.raises(ValueError, match="empty"):
        llm.generate([PROMPTS[0], []], GREEDY)
    assert not llm.engine.has_unfinished()
    assert llm.engine.pool.num_free_blocks == llm.engine.pool.num_blocks
