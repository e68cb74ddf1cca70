"""`assistant generate PROMPT`: one completion from our own engine, streamed or as JSON."""

from __future__ import annotations

import json
import sys
import time

import typer

from assistant.cli.errors import fail
from assistant.settings import Settings


def generate(
    prompt: str = typer.Argument(..., help="The prompt text."),
    max_tokens: int = typer.Option(128, "--max-tokens", help="Most tokens to generate (>= 1)."),
    temperature: float = typer.Option(0.7, "--temperature", help="0 = greedy; higher = freer."),
    seed: int | None = typer.Option(None, "--seed", help="Same seed, same output."),
    chat: bool = typer.Option(False, "--chat", help="Send the prompt as a user chat turn."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object at the end."),
) -> None:
    """Generate text with the configured model (ASSISTANT_MODEL_PATH, default: bundled)."""
    if not prompt:
        raise fail("the prompt is empty; give some text to continue")
    from model.params import SamplingParams

    try:
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    settings = Settings()
    started = time.perf_counter()
    llm = _load(settings)
    load_s = time.perf_counter() - started
    if chat:
        prompt_ids = llm.tokenizer.encode_chat([{"role": "user", "content": prompt}])
    else:
        prompt_ids = llm.tokenizer.encode(prompt, add_special_tokens=True)
    try:
        result = _run(llm, prompt_ids, params, echo=not as_json)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    result["timings"]["load_s"] = round(load_s, 4)
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False))
    else:
        typer.echo("")


def _load(settings: Settings):
    from model.llm import LLM
    from model.loader import ModelLoadError

    try:
        return LLM(settings.model_path, device=settings.device, progress=True)
    except ModelLoadError as exc:
        raise fail(f"cannot load the model: {exc}") from exc


def _run(llm, prompt_ids: list[int], params, echo: bool) -> dict:
    """Stream the completion (echoing text as it comes) and collect what --json reports."""
    start = time.perf_counter()
    first = None
    text, token_ids, reason = [], [], None
    for delta in llm.stream(prompt_ids, params):
        if first is None:
            first = time.perf_counter()
        text.append(delta.text)
        token_ids.extend(delta.token_ids)
        reason = delta.finish_reason
        if echo and delta.text:
            sys.stdout.write(delta.text)
            sys.stdout.flush()
    end = time.perf_counter()
    decode_s = end - first
    # Tokens after the first one, over the time they took: the decode speed.
    tokens_per_s = (len(token_ids) - 1) / decode_s if len(token_ids) > 1 and decode_s else 0.0
    return {
        "text": "".join(text),
        "token_ids": token_ids,
        "finish_reason": reason,
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(token_ids)},
        "timings": {"ttft_s": round(first - start, 4), "tokens_per_s": round(tokens_per_s, 2)},
    }
