from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrieval import (
    DocumentIndex,
    DocumentInfo,
    IndexConfig,
    ModelIdentity,
    Pipeline,
    Principal,
    ReindexRequired,
    RetrievalError,
)
from tests.retrieval.shared import policy_documents


@pytest.fixture(scope="module")
def pipeline(embedder) -> Pipeline:
    return Pipeline(embedder)


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def prepare(pipeline: Pipeline, path: Path, doc_id: int, **access):
    item = pipeline.chunk_file(path, DocumentInfo(doc_id, path.name, "", **access))
    return pipeline.embed([item])[0]


@pytest.fixture(scope="module")
def policy_index(pipeline, tmp_path_factory) -> DocumentIndex:
    index = DocumentIndex.open(tmp_path_factory.mktemp("policies") / "index", pipeline.embedder)
    index.commit(policy_documents())
    return index


def test_hits_point_at_the_exact_passage_in_the_stored_text(policy_index) -> None:
    hits = policy_index.search("What is the daily meal allowance in the United States?", k=3)
    assert hits[0].document == "expenses.html"
    assert "USD 90" in hits[0].text
    assert hits[0].section == "Travel and Expenses Policy > Meal Allowance"
    for hit in hits:
        text = policy_index.extracted_text(hit.document_id)
        assert text[hit.start : hit.end] == hit.text


def test_pdf_hits_carry_the_page(policy_index) -> None:
    (hit,) = policy_index.search("anonymous reporting of fraud and corruption", k=1)
    assert (hit.document, hit.page) == ("code_of_conduct.pdf", 2)
    assert hit.section.endswith("4. Whistleblowing")


def test_unrelated_question_returns_nothing(policy_index) -> None:
    assert policy_index.search("Explain photosynthesis in plants.", k=5) == []


def test_injected_instructions_are_flagged(policy_index) -> None:
    hits = policy_index.search("vendor notes", k=5, mode="bm25")
    flagged = [h for h in hits if h.flagged]
    assert flagged and "ignore_instructions" in flagged[0].flag_reasons
    assert "exfiltration" in flagged[0].flag_reasons
    clean = policy_index.search("minimum password length", k=1)[0]
    assert not clean.flagged and clean.flag_reasons == []


def test_bad_queries_are_refused(policy_index) -> None:
    with pytest.raises(RetrievalError, match="empty"):
        policy_index.search("   ")
    with pytest.raises(RetrievalError, match="k must be"):
        policy_index.search("leave", k=0)
    with pytest.raises(RetrievalError, match="mode"):
        policy_index.search("leave", mode="fuzzy")


def test_replace_and_delete_leave_no_stale_hits(pipeline, tmp_path) -> None:
    index = DocumentIndex.open(tmp_path / "index", pipeline.embedder)
    v1 = write(tmp_path, "parking.md", "# Parking\n\n## Spaces\n\nVisitors park in zone Q7.\n")
    other = write(tmp_path, "canteen.md", "# Canteen\n\n## Hours\n\nLunch is served 11-13.\n")
    index.commit([prepare(pipeline, v1, 1), prepare(pipeline, other, 2)])
    assert "zone Q7" in index.search("where do visitors park", k=1)[0].text

    v2 = write(tmp_path, "parking.md", "# Parking\n\n## Spaces\n\nVisitors park in zone R2.\n")
    new = prepare(pipeline, v2, 1)
    new.info.version = 2
    index.commit([new])
    texts = [h.text for h in index.search("where do visitors park zone", k=5, mode="bm25")]
    assert any("R2" in t for t in texts) and not any("Q7" in t for t in texts)
    assert index.extracted_text(1).count("R2") == 1
    assert index.search("where do visitors park", k=1)[0].chunk_id.startswith("1-v2-")

    index.commit(delete=[1])
    hits = index.search("where do visitors park zone", k=5)
    assert all(h.document_id == 2 for h in hits)
    assert index.document(1) is None and len(index) == index.chunk_count(2)
    reopened = DocumentIndex.open(tmp_path / "index", pipeline.embedder)
    assert [d.name for d in reopened.documents()] == ["canteen.md"]
    assert not (tmp_path / "index" / "texts" / "1-v1.txt").exists()


@pytest.fixture(scope="module")
def access_corpus(pipeline, tmp_path_factory) -> list:
    """Many private travel documents of user 2; a few visible to user 1."""
    tmp_path = tmp_path_factory.mktemp("access")
    items = []
    for n in range(1, 13):
        path = write(
            tmp_path,
            f"trip{n}.md",
            f"# Trip {n}\n\n## Hotel\n\nThe hotel for business trip {n} costs EUR {100 + n}.\n",
        )
        info = DocumentInfo(n, path.name, "", owner_id=2, visibility="private")
        items.append(pipeline.chunk_file(path, info))
    shared = [
        (13, "everyone", None, None),
        (14, "group", "sales", None),
        (15, "private", None, 1),
    ]
    for doc_id, visibility, group, owner in shared:
        body = "\n\n".join(
            f"## Night {i}\n\nThe hotel for business trip {doc_id} night {i} costs EUR {i}."
            for i in range(1, 3)
        )
        path = write(tmp_path, f"visible{doc_id}.md", f"# Visible {doc_id}\n\n{body}\n")
        info = DocumentInfo(doc_id, path.name, "", "default", owner or 9, visibility, group)
        items.append(pipeline.chunk_file(path, info))
    return pipeline.embed(items)


@pytest.mark.parametrize("approximate", [False, True], ids=["exact", "hnsw"])
def test_filters_run_inside_the_search(pipeline, access_corpus, tmp_path, approximate) -> None:
    config = IndexConfig(approximate_above=0 if approximate else 10**9, candidates=5)
    index = DocumentIndex(tmp_path / "index", pipeline.embedder.identity, None, config)
    index._embed_query = pipeline.embedder.encode_query
    index.commit(access_corpus)
    assert index.approximate is approximate
    query = "how much does the hotel cost on a business trip"
    user1 = Principal(1, ["sales"])
    for mode in ("hybrid", "vector", "bm25"):
        hits = index.search(query, k=5, principal=user1, mode=mode)
        assert len(hits) == 5, mode  # 6 visible chunks: a post-filter would return fewer
        assert {h.document_id for h in hits} <= {13, 14, 15}
    outsider = Principal(3, [])
    assert {h.document_id for h in index.search(query, k=10, principal=outsider)} == {13}
    assert len(index.search(query, k=12, principal=Principal(2, []))) == 12
    assert len(index.search(query, k=20, principal=Principal(3, [], is_admin=True))) == 18
    assert len(index.search(query, k=20)) == 18
    assert index.search(query, k=5, principal=user1, collection="other") == []


def test_another_embedding_model_requires_a_reindex(policy_index) -> None:
    stored = policy_index.identity
    other = ModelIdentity("some/other-model", stored.dimension, "0" * 64)
    with pytest.raises(ReindexRequired, match="re-index required"):
        DocumentIndex(policy_index.root, other)
    with pytest.raises(ReindexRequired, match="768 dims"):
        DocumentIndex(policy_index.root, ModelIdentity("big", 768, stored.fingerprint))


def test_vectors_of_the_wrong_shape_are_refused(pipeline, tmp_path) -> None:
    doc = prepare(pipeline, write(tmp_path, "a.md", "# A\n\nSome text.\n"), 1)
    doc.vectors = np.zeros((len(doc.chunks), 8), dtype=np.float32)
    with pytest.raises(RetrievalError, match="do not match"):
        DocumentIndex.open(tmp_path / "index", pipeline.embedder).commit([doc])


def test_a_second_reader_sees_new_generations(pipeline, tmp_path) -> None:
    writer = DocumentIndex.open(tmp_path / "index", pipeline.embedder)
    reader = DocumentIndex.open(tmp_path / "index", pipeline.embedder)
    writer.commit([prepare(pipeline, write(tmp_path, "a.md", "# A\n\nBoats float.\n"), 1)])
    assert reader.search("boats", k=1, mode="bm25")[0].document == "a.md"
    assert reader.generation == writer.generation == 1
