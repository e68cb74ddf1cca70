"""`assistant safety check|eval`: run the safety classifiers from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from assistant.cli.errors import fail

app = typer.Typer(help="Input/output safety classifiers.", no_args_is_help=True)
BATCH = 64  # texts per encoder call for --file


def _classifier(threads: int | None = None):
    import torch

    from assistant.safety.classifier import shared_classifier
    from assistant.settings import Settings

    settings = Settings()
    print("loading safety classifier...", file=sys.stderr)
    classifier = shared_classifier(settings.embedding_model_path(), settings.device)
    if threads:
        torch.set_num_threads(threads)
    return classifier


@app.command()
def check(
    text: str = typer.Argument(None, help="Text to check (or use --file)."),
    file: Path = typer.Option(None, "--file", help='JSONL file with a "text" field per line.'),
    output: bool = typer.Option(False, "--output", help="Check as model output (redacts PII)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (one line per result)."),
) -> None:
    """Classify TEXT, or every line of --file, and print the decision."""
    from tqdm import tqdm

    from assistant.safety.dataset import read_texts

    if (text is None) == (file is None):
        raise fail("give either TEXT or --file FILE.jsonl, not both and not neither")
    texts = read_texts(file) if file is not None else [text]
    if file is not None and not as_json:
        raise fail("--file prints one JSON result per line: add --json")
    classifier = _classifier()
    batches = range(0, len(texts), BATCH)
    if file is not None:
        batches = tqdm(batches, desc="check", unit="batch", file=sys.stderr)
    for start in batches:
        batch = texts[start : start + BATCH]
        if output:
            results = [classifier.check_output(item) for item in batch]
        else:
            results = classifier.check_inputs(batch)
        for result in results:
            if as_json:
                typer.echo(json.dumps(result.to_dict(), ensure_ascii=False))
            else:
                typer.echo(_human(result.to_dict()))


@app.command("eval")
def eval_(
    file: Path = typer.Argument(..., help='JSONL of {"text", "label": benign|unsafe, "category"}.'),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    threads: int = typer.Option(
        0, "--threads", help="torch threads (0: the classifier's default, 1)."
    ),
) -> None:
    """Precision/recall/F1 per category, benign false positive rate, recall and false
    positives per writing system and length, latency p50/p95."""
    from assistant.safety.dataset import load_examples
    from assistant.safety.metrics import evaluate

    if threads < 0:
        raise fail("--threads must be 0 or more")
    examples = load_examples(file)
    if not examples:
        raise fail(f"{file} has no examples")
    classifier = _classifier(threads or None)
    classifier.check_input("warm up")
    report = evaluate(examples, classifier.check_input, progress=True)
    typer.echo(json.dumps(report.to_dict()) if as_json else report.format())


def _human(result: dict) -> str:
    top = sorted(result["categories"].items(), key=lambda kv: -kv[1])[:3]
    lines = [
        f"decision: {result['decision']}",
        f"label: {result['label']}",
        "top categories: " + ", ".join(f"{k} {v:.2f}" for k, v in top),
    ]
    lines += [f"reason: {r}" for r in result["reasons"]]
    if "redacted" in result:
        lines.append(f"redacted: {result['redacted']}")
    if "response" in result:
        lines.append(f"response: {result['response']}")
    return "\n".join(lines)
