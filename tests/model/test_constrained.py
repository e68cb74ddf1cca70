"""200 constrained generations on the real model, submitted together: all parse and validate."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from model.engine import LLMEngine
from model.grammar import UnsupportedGrammarError
from model.params import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")

TOOLS = [
    "search_documents",
    "calculator",
    "get_current_date",
    "submit_leave_request",
    "create_it_ticket",
    "run_python",
]
TOOL_CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"enum": TOOLS},
        "arguments": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "pattern": "^[A-Za-z0-9 ]{0,12}$"},
                "days": {"type": "integer", "minimum": 0, "maximum": 30},
            },
            "required": ["query"],
        },
    },
    "required": ["name", "arguments"],
}
WORDS = (
    "leave policy printer broken laptop vacation expense report add multiply password reset "
    "holiday sick day VPN salary 2 plus 3 how many days search handbook ticket"
).split()


@pytest.fixture(scope="module")
def engine(loaded_model) -> LLMEngine:
    return LLMEngine(
        loaded_model.config,
        loaded_model.weights,
        loaded_model.tokenizer,
        q4=loaded_model.q4,
        kv_cache_bytes=256 << 20,
        max_num_seqs=200,
        max_num_batched_tokens=1024,
    )


def random_prompt(rng: random.Random, engine: LLMEngine) -> list[int]:
    """A one-shot example with a random tool, then a random request. The example keeps a
    135M model on short canonical tokens, and prompts sharing it share cached blocks."""
    tool = rng.choice(TOOLS)
    example = json.dumps({"name": tool, "arguments": {"query": rng.choice(WORDS)}})
    request = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(2, 8)))
    return engine.tokenizer.encode(f"Request: help\n{example}\nRequest: {request}\n")


def test_200_tool_calls_all_parse_and_validate(engine) -> None:
    rng = random.Random(0)
    ids = [
        engine.add_request(
            random_prompt(rng, engine),
            SamplingParams(temperature=0.8, seed=i, max_tokens=64, json_schema=TOOL_CALL_SCHEMA),
        )
        for i in range(200)
    ]
    texts: dict[str, str] = {i: "" for i in ids}
    reasons: dict[str, str] = {}
    while engine.has_unfinished():
        for delta in engine.step():
            texts[delta.request_id] += delta.text
            if delta.finish_reason is not None:
                reasons[delta.request_id] = delta.finish_reason
    names = set()
    for request_id in ids:
        assert reasons[request_id] == "stop", texts[request_id]
        call = json.loads(texts[request_id])
        jsonschema.validate(call, TOOL_CALL_SCHEMA)
        names.add(call["name"])
    assert len(names) > 1  # seeded sampling explores, and every branch stays valid


def test_regex_and_choices_on_the_real_model(engine) -> None:
    tok = engine.tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Is it raining?"}]))
    regex = r"(yes|no), [0-9]{1,2} percent"
    choices = ["Yes.", "No.", "Maybe, ask later."]
    ids = [
        engine.add_request(prompt, SamplingParams(temperature=0.9, seed=s, regex=regex))
        for s in range(4)
    ] + [
        engine.add_request(prompt, SamplingParams(temperature=0.9, seed=s, choices=choices))
        for s in range(4)
    ]
    texts = {i: "" for i in ids}
    while engine.has_unfinished():
        for delta in engine.step():
            texts[delta.request_id] += delta.text
    for request_id in ids[:4]:
        assert re.fullmatch(regex, texts[request_id]), texts[request_id]
    for request_id in ids[4:]:
        assert texts[request_id] in choices


def test_unsupported_schema_is_refused_at_submission(engine) -> None:
    with pytest.raises(UnsupportedGrammarError, match="'oneOf'"):
        engine.add_request([1, 2, 3], SamplingParams(json_schema={"oneOf": [{"type": "string"}]}))
    assert not engine.has_unfinished()
