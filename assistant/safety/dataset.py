"""Labelled examples: JSONL lines of {"text", "label": benign|unsafe, "category"}."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from assistant.errors import AssistantError
from assistant.safety.result import CATEGORIES

DATA_DIR = Path(__file__).parent / "data"
LABELS = ("benign", "unsafe")


@dataclass(slots=True)
class Example:
    text: str
    label: str
    category: str


def read_texts(path: Path) -> list[str]:
    """The "text" field of every line of a JSONL file, in order."""
    return [row["text"] for row in _rows(path, required=("text",))]


def load_examples(path: Path) -> list[Example]:
    examples = []
    for n, row in enumerate(_rows(path, required=("text", "label", "category")), 1):
        if row["label"] not in LABELS:
            raise AssistantError(
                "bad_dataset", f"{path}:{n}: label must be benign or unsafe, not {row['label']!r}"
            )
        if row["label"] == "unsafe" and row["category"] not in CATEGORIES:
            raise AssistantError(
                "bad_dataset",
                f"{path}:{n}: unknown category {row['category']!r}; use one of "
                + ", ".join(CATEGORIES),
            )
        examples.append(Example(row["text"], row["label"], row["category"]))
    return examples


def _rows(path: Path, required: tuple[str, ...]) -> list[dict]:
    if not path.is_file():
        raise AssistantError("not_found", f"{path} does not exist; pass a JSONL file")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AssistantError("bad_dataset", f"{path}:{n}: not valid JSON ({exc.msg})") from exc
        missing = [
            k for k in required if not isinstance(row, dict) or not isinstance(row.get(k), str)
        ]
        if missing:
            raise AssistantError(
                "bad_dataset", f"{path}:{n}: needs string field(s) {', '.join(missing)}"
            )
        rows.append(row)
    return rows
