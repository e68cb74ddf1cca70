"""`assistant generate` end to end on the bundled model."""

from __future__ import annotations

import json

import pytest

from assistant.cli.main import main

pytestmark = pytest.mark.usefixtures("one_thread")


def run_json(capsys, *args: str) -> dict:
    assert main(["generate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_json_output_and_seeded_repeatability(capsys, loaded_model) -> None:
    args = ("Write a haiku about rain.", "--chat", "--max-tokens", "10", "--temperature", "0.9")
    first = run_json(capsys, *args, "--seed", "5")
    assert set(first) == {"text", "token_ids", "finish_reason", "usage", "timings"}
    assert set(first["usage"]) == {"prompt_tokens", "completion_tokens"}
    assert set(first["timings"]) == {"load_s", "ttft_s", "tokens_per_s"}
    assert first["usage"]["completion_tokens"] == len(first["token_ids"]) > 0
    assert first["finish_reason"] in ("stop", "length")
    assert first["text"] == loaded_model.tokenizer.decode(first["token_ids"])
    chat = loaded_model.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a haiku about rain."}]
    )
    assert first["usage"]["prompt_tokens"] == len(loaded_model.tokenizer.encode(chat))
    assert run_json(capsys, *args, "--seed", "5")["token_ids"] == first["token_ids"]


@pytest.mark.slow
def test_plain_output_streams_the_text(capsys, loaded_model) -> None:
    assert (
        main(["generate", "The capital of France is", "--max-tokens", "6", "--temperature", "0"])
        == 0
    )
    out = capsys.readouterr().out
    assert "Paris" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--temperature", "-1"], "temperature"),
        (["--max-tokens", "0"], "max_tokens"),
        (["--max-tokens", "many"], "max-tokens"),
    ],
)
def test_bad_options_are_one_line_errors(capsys, args: list[str], message: str) -> None:
    assert main(["generate", "hello", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_missing_model_file_is_a_clear_error(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ASSISTANT_MODEL_PATH", str(tmp_path / "absent.gguf"))
    assert main(["generate", "hello"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: cannot load the model") and "absent.gguf" in err[-1]
