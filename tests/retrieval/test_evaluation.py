from __future__ import annotations

from retrieval.evaluate import format_table, load_questions, run
from tests.retrieval.shared import POLICIES, QUESTIONS, policy_documents


def test_the_evaluation_set_is_complete() -> None:
    questions = load_questions(QUESTIONS)
    names = {p.name for p in POLICIES.iterdir()}
    assert len(questions) >= 60
    assert {p.suffix for p in POLICIES.iterdir()} == {".txt", ".md", ".html", ".pdf", ".docx"}
    assert {q.kind for q in questions} == {"direct", "paraphrase", "unanswerable"}
    assert all(q.document in names for q in questions if q.answerable)


def test_retrieval_quality_does_not_regress(embedder) -> None:
    results = run(POLICIES, QUESTIONS, embedder, policy_documents())
    print("\n" + format_table(results))
    hybrid, vector, bm25 = results["hybrid"], results["vector"], results["bm25"]
    assert hybrid.recall_at_5 >= 0.95
    assert hybrid.recall_at_1 >= 0.85 and hybrid.mrr >= 0.9
    assert vector.recall_at_5 >= 0.9
    assert bm25.recall_at_5 >= 0.75
    assert results["hybrid/paraphrase"].recall_at_5 >= 0.85
    assert hybrid.unanswerable_empty >= 0.5
    held_out = [m for name, m in results.items() if "@" in name]
    assert len(held_out) == 2 and all(m.recall_at_5 >= 0.9 for m in held_out)
