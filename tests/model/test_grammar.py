"""Constrained decoding with the real tokenizer: random logits can only produce valid output."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import torch

from model.grammar import GrammarCompiler, UnsupportedGrammarError, choices_ebnf
from model.params import SamplingParams
from model.sampler import RequestSampler, sample

VOCAB = 49152  # SmolLM2's logits width
TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"enum": ["search_documents", "calculator", "file_leave_request"]},
        "arguments": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 24},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
        },
    },
    "required": ["name", "arguments"],
}
RICH_SCHEMA = {
    "$defs": {"flag": {"type": "boolean"}},
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "score": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5}, {"type": "null"}]},
        "ok": {"$ref": "#/$defs/flag"},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
    },
    "required": ["tags", "score", "ok", "code"],
}
REGEX = r"[A-Z]{2}-\d{3,5}( [a-z]{1,8})?"
CHOICES = ["yes", "no", "yes please", 'n/a "quoted"', "émoji 😀\n"]


@pytest.fixture(scope="module")
def tokenizer(loaded_model):
    return loaded_model.tokenizer


@pytest.fixture(scope="module")
def compiler(tokenizer) -> GrammarCompiler:
    return GrammarCompiler(tokenizer.backend, VOCAB, tokenizer.eos_token_ids)


def generate(compiler, tokenizer, params: SamplingParams, seed: int, max_steps: int = 120) -> str:
    """Sample from random logits under the grammar until it terminates."""
    sampler = RequestSampler(params, [], VOCAB, torch.device("cpu"), compiler.matcher_for(params))
    noise = torch.Generator().manual_seed(seed)
    ids: list[int] = []
    for _ in range(max_steps):
        # Sharp random logits, so the draws wander all over the vocabulary.
        token = sample(torch.randn(1, VOCAB, generator=noise) * 4, [sampler])[0].token_id
        sampler.accept(token)
        if token not in tokenizer.eos_token_ids:
            ids.append(token)
        if sampler.grammar_terminated:
            return tokenizer.decode(ids)
        assert token not in tokenizer.eos_token_ids, "a stop token was accepted mid-grammar"
    raise AssertionError(
        f"grammar did not terminate in {max_steps} steps: {tokenizer.decode(ids)!r}"
    )


@pytest.mark.parametrize("schema", [TOOL_SCHEMA, RICH_SCHEMA], ids=["tool_call", "rich"])
def test_random_logits_under_a_json_schema_always_validate(compiler, tokenizer, schema) -> None:
    for seed in range(6):
        text = generate(compiler, tokenizer, SamplingParams(json_schema=schema, seed=seed), seed)
        jsonschema.validate(json.loads(text), schema)


def test_schema_given_as_a_string_works_the_same(compiler, tokenizer) -> None:
    params = SamplingParams(json_schema=json.dumps(TOOL_SCHEMA), seed=1)
    jsonschema.validate(json.loads(generate(compiler, tokenizer, params, 1)), TOOL_SCHEMA)


def test_random_logits_under_a_regex_always_fullmatch(compiler, tokenizer) -> None:
    for seed in range(6):
        text = generate(compiler, tokenizer, SamplingParams(regex=REGEX, seed=seed), seed)
        assert re.fullmatch(REGEX, text), text


def test_random_logits_under_choices_give_exactly_one_choice(compiler, tokenizer) -> None:
    seen = set()
    for seed in range(10):
        text = generate(compiler, tokenizer, SamplingParams(choices=CHOICES, seed=seed), seed)
        assert text in CHOICES
        seen.add(text)
    assert len(seen) > 1


def test_greedy_follows_the_grammar_against_the_logits(compiler, tokenizer) -> None:
    params = SamplingParams(temperature=0.0, choices=["no"])
    sampler = RequestSampler(params, [], VOCAB, torch.device("cpu"), compiler.matcher_for(params))
    logits = torch.zeros(2, VOCAB)
    logits[:, tokenizer.encode("yes")[0]] = 100.0
    free = RequestSampler(SamplingParams(temperature=0.0), [], VOCAB, torch.device("cpu"))
    constrained, unconstrained = sample(logits, [sampler, free])
    assert tokenizer.decode([constrained.token_id]) in {"n", "no"}
    assert unconstrained.token_id == tokenizer.encode("yes")[0]


def test_unconstrained_params_get_no_matcher(compiler) -> None:
    assert compiler.matcher_for(SamplingParams()) is None


def test_compiled_grammars_are_cached(compiler) -> None:
    before = compiler.cache_hits
    first = compiler.compile("regex", r"\d+x")
    assert compiler.compile("regex", r"\d+x") is first
    compiler.matcher_for(SamplingParams(regex=r"\d+x"))
    assert compiler.cache_hits == before + 2


def test_choices_become_an_exact_alternation() -> None:
    assert choices_ebnf(["a", 'b"\\', "a"]) == 'root ::= "a" | "b\\"\\\\"'


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (SamplingParams(json_schema={"type": "string", "not": {"const": "a"}}), "'not'"),
        (SamplingParams(json_schema={"oneOf": [{"type": "integer"}]}), "'oneOf'"),
        (SamplingParams(json_schema={"properties": {"a": {"allOf": [{}]}}}), "#/properties/a"),
        (SamplingParams(json_schema={"$ref": "https://example.com/s.json"}), "local references"),
        (SamplingParams(json_schema={"type": "float"}), "cannot compile"),
        (SamplingParams(json_schema="{not json"), "not valid JSON"),
        (SamplingParams(regex="(a"), "invalid regex"),
    ],
)
def test_unsupported_constraints_fail_at_submission(compiler, params, message) -> None:
    with pytest.raises(UnsupportedGrammarError, match=re.escape(message)):
        compiler.matcher_for(params)


def test_terminated_as_soon_as_only_a_stop_token_may_follow(compiler, tokenizer) -> None:
    params = SamplingParams(choices=["yes", "yes please"])
    matcher = compiler.matcher_for(params)
    assert matcher.accept_string("yes")
    assert not matcher.is_terminated()  # " please" may still follow
    assert matcher.accept_string(" please")
    assert matcher.is_terminated()
    last_bit = compiler.matcher_for(SamplingParams(regex="a"))
    last_bit._stop_ids.append(31)  # a stop id in the sign bit of its bitmask word
    assert last_bit.accept_string("a") and last_bit.is_terminated()
