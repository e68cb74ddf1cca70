"""Streaming on the real engine and model: stop strings across tokens, whole characters."""

from __future__ import annotations

import pytest

from model.engine import Delta, LLMEngine
from model.llm import LLM
from model.params import SamplingParams
from tests.model.test_stops import reference_cut

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = {
    "english": "In two sentences, why is the sky blue?",
    "chinese": "请用中文介绍一下北京。",
    "emoji": "Write three emoji that describe happiness:",
}
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def llm(loaded_model) -> LLM:
    # Without the prefix cache a rerun of a prompt computes exactly what the first run did.
    return LLM.from_loaded(loaded_model, kv_cache_bytes=128 << 20, enable_prefix_caching=False)


@pytest.fixture(scope="module")
def engine(llm) -> LLMEngine:
    return llm.engine


def chat_ids(engine: LLMEngine, text: str) -> list[int]:
    tok = engine.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


def stream_one(llm: LLM, text: str, params: SamplingParams) -> list[Delta]:
    return list(llm.stream(chat_ids(llm.engine, text), params))


def stream(
    engine: LLMEngine, requests: list[tuple[list[int], SamplingParams]]
) -> list[list[Delta]]:
    """Run requests together; each one's deltas in order."""
    ids = [engine.add_request(p, params) for p, params in requests]
    deltas: dict[str, list[Delta]] = {i: [] for i in ids}
    while engine.has_unfinished():
        for delta in engine.step():
            deltas[delta.request_id].append(delta)
    return [deltas[i] for i in ids]


def text_of(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas)


def token_texts(engine: LLMEngine, deltas: list[Delta]) -> list[str]:
    decoder = engine.tokenizer.incremental_decoder()
    return [decoder.push(t) for d in deltas for t in d.token_ids]


@pytest.fixture(scope="module")
def references(llm) -> dict[str, list[Delta]]:
    """Greedy output of each prompt, run alone and without stop strings."""
    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    return {name: stream_one(llm, text, greedy) for name, text in PROMPTS.items()}


def spanning_stop(pieces: list[str], index: int) -> str:
    """A stop string that starts inside the first piece from `index` on that has two
    characters (else in the first non-empty one: Chinese text can be all one-character
    pieces and pieces of a split character) and ends inside a later piece."""

    def start(shortest: int) -> int | None:
        for i in range(index, len(pieces)):
            if len(pieces[i]) >= shortest and "".join(pieces[i + 1 : i + 3]):
                return i
        return None

    i = start(2)
    i = start(1) if i is None else i
    after = "".join(pieces[i + 1 : i + 3])
    return pieces[i][-2:] + after[:3]


def assert_streamed_prefixes(deltas: list[Delta], final: str) -> None:
    """Nothing streamed is ever taken back: every partial stream is a prefix of the result."""
    so_far = ""
    for delta in deltas:
        so_far += delta.text
        assert final.startswith(so_far), (so_far, final)
    assert so_far == final
    assert deltas[-1].finish_reason is not None
    assert all(d.finish_reason is None for d in deltas[:-1])


@pytest.mark.parametrize(("name", "at"), [("english", 3), ("english", 12), ("chinese", 5)])
def test_stop_string_split_across_tokens_is_caught(llm, engine, references, name, at) -> None:
    reference = text_of(references[name])
    stop = spanning_stop(token_texts(engine, references[name]), at)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, stop=[stop])
    deltas = stream_one(llm, PROMPTS[name], params)
    expected = reference[: reference.index(stop)]
    assert text_of(deltas) == expected
    assert deltas[-1].finish_reason == "stop"
    assert_streamed_prefixes(deltas, expected)
    # The engine stopped at the token that completed the stop string, not later.
    generated = [t for d in deltas for t in d.token_ids]
    assert stop in engine.tokenizer.decode(generated)
    assert stop not in engine.tokenizer.decode(generated[:-1])


def test_several_stops_overlapping_and_at_the_very_start(llm, references) -> None:
    english = text_of(references["english"])
    emoji = text_of(references["emoji"])
    cases = [
        ("english", [english[:2]]),  # at the very start: nothing is streamed
        ("english", [english[10:30], english[10:13] + "\x00"]),  # a shared prefix
        ("english", [english[10:30], english[12:15], "never appears"]),  # one inside another
        ("emoji", [emoji[1:3], emoji[1:2] + "x"]),  # multi-byte characters as stop strings
    ]
    for name, stops in cases:
        params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, stop=stops)
        deltas = stream_one(llm, PROMPTS[name], params)
        expected, hit = reference_cut(text_of(references[name]), stops)
        assert hit and deltas[-1].finish_reason == "stop"
        assert text_of(deltas) == expected
        assert_streamed_prefixes(deltas, expected)


def test_sampled_streams_never_split_a_character(engine) -> None:
    requests = [
        (chat_ids(engine, text), SamplingParams(temperature=0.8, seed=seed, max_tokens=30))
        for seed, text in enumerate([PROMPTS["chinese"], PROMPTS["emoji"], "日本の首都は？"] * 2)
    ]
    partial_tokens = 0
    for deltas in stream(engine, requests):
        generated = [t for d in deltas for t in d.token_ids]
        # A character split across deltas would show as replacement characters where the
        # one-shot decode has the character itself (a generation cut mid-character by
        # max_tokens ends in one replacement character in both).
        assert text_of(deltas) == engine.tokenizer.decode(generated)
        partial_tokens += sum("\ufffd" in engine.tokenizer.decode([t]) for t in generated)
    assert partial_tokens > 0, "no character was split across tokens: the test tested nothing"


def test_sampled_stream_with_stop_strings_cuts_at_the_first_completed_stop(engine) -> None:
    stops = ["\n", "。", "e t", "ing"]
    requests = [
        (
            chat_ids(engine, text),
            SamplingParams(temperature=1.0, seed=seed, stop=stops, max_tokens=40),
        )
        for seed, text in enumerate(list(PROMPTS.values()) * 2)
    ]
    hits = 0
    for deltas in stream(engine, requests):
        generated = [t for d in deltas for t in d.token_ids]
        full = engine.tokenizer.decode(generated)
        expected, hit = reference_cut(full, stops)
        assert text_of(deltas) == expected
        assert_streamed_prefixes(deltas, expected)
        if deltas[-1].finish_reason == "stop" and hit:
            hits += 1
    assert hits >= len(requests) // 2
