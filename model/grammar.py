"""Constrained decoding with xgrammar: JSON Schema, regex or a fixed list of choices.

Fail closed: a schema keyword that xgrammar would silently ignore (so the output could break
the schema) is rejected with UnsupportedGrammarError when the request is submitted.

JSON comes out compact, and objects and arrays hold only what the schema lists (xgrammar's
strict mode, vLLM's default): always valid, though `{"type": "object"}` alone yields `{}`.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any

import tokenizers
import torch
import xgrammar as xgr

from model.params import SamplingParams

# Keywords xgrammar enforces (checked against its converter), and pure annotations.
_ENFORCED_KEYWORDS = frozenset(
    {
        "type", "enum", "const", "anyOf", "$ref", "$defs", "definitions",
        "properties", "required", "additionalProperties", "patternProperties",
        "propertyNames", "unevaluatedProperties", "minProperties", "maxProperties",
        "items", "prefixItems", "unevaluatedItems", "minItems", "maxItems",
        "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    }
)  # fmt: skip
_ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "$schema", "$id", "$comment",
        "deprecated", "readOnly", "writeOnly",
    }
)  # fmt: skip
# Keywords whose value is a map of name -> subschema, or a list of subschemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "prefixItems")
_SCHEMA_VALUES = (
    "items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems",
    "propertyNames",
)  # fmt: skip
_CACHE_SIZE = 128


class UnsupportedGrammarError(ValueError):
    """The requested constraint cannot be enforced; the request must not run unconstrained."""


class GrammarMatcher:
    """One request's position in its grammar: what the sampler needs, nothing more."""

    def __init__(self, compiled: xgr.CompiledGrammar, vocab_size: int) -> None:
        self._matcher = xgr.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self._stop_ids = list(self._matcher.stop_token_ids)
        self._finished: bool | None = None  # cached until the next accepted token

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int) -> None:
        """Write the allowed next tokens into row `index` of an int32 CPU bitmask."""
        self._matcher.fill_next_token_bitmask(bitmask, index)

    def accept_token(self, token_id: int) -> bool:
        self._finished = None
        return self._matcher.accept_token(token_id)

    def accept_string(self, text: str) -> bool:
        self._finished = None
        return self._matcher.accept_string(text)

    def is_terminated(self) -> bool:
        """The grammar took a stop token, or its output is complete and nothing but a stop
        token may follow: either way there is nothing left to generate."""
        if self._finished is None:
            self._finished = self._matcher.is_terminated() or (
                self._matcher.is_completed() and self._only_stop_tokens_allowed()
            )
        return self._finished

    def _only_stop_tokens_allowed(self) -> bool:
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        self._matcher.fill_next_token_bitmask(bitmask, 0)
        for token_id in self._stop_ids:
            word, bit = divmod(token_id, 32)
            bitmask[0, word] &= ~_as_int32(1 << bit)
        return not bool(bitmask.any())


def _as_int32(value: int) -> int:
    """A 32-bit pattern as the signed int32 that xgrammar's bitmask stores."""
    return value - (1 << 32) if value >= 1 << 31 else value


class GrammarCompiler:
    """Compiles constraints for one tokenizer and caches the compiled grammars."""

    def __init__(
        self,
        tokenizer_backend: tokenizers.Tokenizer,
        vocab_size: int,
        eos_token_ids: list[int],
    ) -> None:
        from transformers import PreTrainedTokenizerFast

        wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer_backend)
        self.vocab_size = vocab_size
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            wrapped, vocab_size=vocab_size, stop_token_ids=list(eos_token_ids)
        )
        self._compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=2)
        self._cache: OrderedDict[tuple[str, str], xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()
        self.cache_hits = 0

    def matcher_for(self, params: SamplingParams) -> GrammarMatcher | None:
        """A fresh matcher for the request's constraint, or None when it has none."""
        key = constraint_key(params)
        if key is None:
            return None
        return GrammarMatcher(self.compile(*key), self.vocab_size)

    def compile(self, kind: str, source: str) -> xgr.CompiledGrammar:
        with self._lock:
            cached = self._cache.get((kind, source))
            if cached is not None:
                self._cache.move_to_end((kind, source))
                self.cache_hits += 1
                return cached
        compiled = self._compile_uncached(kind, source)
        with self._lock:
            self._cache[(kind, source)] = compiled
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled

    def _compile_uncached(self, kind: str, source: str) -> xgr.CompiledGrammar:
        try:
            if kind == "json_schema":
                # Compact JSON: unbounded whitespace lets a small model ramble forever.
                return self._compiler.compile_json_schema(source, any_whitespace=False)
            if kind == "regex":
                return self._compiler.compile_regex(source)
            return self._compiler.compile_grammar(source)
        except RuntimeError as exc:
            detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
            raise UnsupportedGrammarError(f"cannot compile the {kind}: {detail}") from exc


def constraint_key(params: SamplingParams) -> tuple[str, str] | None:
    """(kind, canonical source) for the request's constraint, checked; None if unconstrained."""
    if params.json_schema is not None:
        schema = _load_schema(params.json_schema)
        check_schema(schema)
        return "json_schema", json.dumps(schema)
    if params.regex is not None:
        try:
            re.compile(params.regex)
        except re.error as exc:
            raise UnsupportedGrammarError(f"invalid regex {params.regex!r}: {exc}") from exc
        return "regex", params.regex
    if params.choices is not None:
        return "choices", choices_ebnf(params.choices)
    return None


def choices_ebnf(choices: list[str]) -> str:
    """An EBNF grammar matching exactly one of `choices`."""
    return "root ::= " + " | ".join(_ebnf_literal(c) for c in dict.fromkeys(choices))


def _ebnf_literal(text: str) -> str:
    # JSON escapes for quotes, backslashes and control characters are what xgrammar's EBNF reads;
    # other characters stay literal (\uXXXX surrogate pairs would be read as two code points).
    return json.dumps(text, ensure_ascii=False)


def _load_schema(schema: dict | str) -> Any:
    if isinstance(schema, dict):
        return schema
    try:
        return json.loads(schema)
    except json.JSONDecodeError as exc:
        raise UnsupportedGrammarError(f"json_schema is not valid JSON: {exc}") from exc


def check_schema(schema: Any, path: str = "#") -> None:
    """Raise UnsupportedGrammarError for anything xgrammar would not enforce."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise UnsupportedGrammarError(f"{path}: a schema must be an object or a boolean")
    for keyword, value in schema.items():
        where = f"{path}/{keyword}"
        if keyword in _ANNOTATIONS:
            continue
        if keyword not in _ENFORCED_KEYWORDS:
            raise UnsupportedGrammarError(
                f"{where}: the JSON Schema keyword {keyword!r} cannot be enforced during "
                f"decoding; supported keywords: {', '.join(sorted(_ENFORCED_KEYWORDS))}"
            )
        if keyword == "$ref" and not (isinstance(value, str) and value.startswith("#")):
            raise UnsupportedGrammarError(
                f"{where}: only local references ('#/...') are supported, got {value!r}"
            )
        _check_subschemas(keyword, value, where)


def _check_subschemas(keyword: str, value: Any, where: str) -> None:
    if keyword in _SCHEMA_MAPS and isinstance(value, dict):
        for name, sub in value.items():
            check_schema(sub, f"{where}/{name}")
    elif keyword in _SCHEMA_LISTS and isinstance(value, list):
        for i, sub in enumerate(value):
            check_schema(sub, f"{where}/{i}")
    elif keyword in _SCHEMA_VALUES:
        check_schema(value, where)


def apply_grammar_masks(
    logits: torch.Tensor, rows: list[int], matchers: list[GrammarMatcher]
) -> None:
    """Set to -inf, in place, every logit a row's grammar forbids as the next token."""
    bitmask = xgr.allocate_token_bitmask(logits.shape[0], logits.shape[-1])
    for row, matcher in zip(rows, matchers, strict=True):
        matcher.fill_next_token_bitmask(bitmask, row)
    # xgrammar's C++ kernel on the CPU; its plain-torch one on any other device (no Triton).
    backend = "cpu" if logits.device.type == "cpu" else "torch_native"
    xgr.apply_token_bitmask_inplace(
        logits, bitmask.to(logits.device), indices=rows, backend=backend
    )
