from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval import DocumentIndex, IndexConfig, store
from tests.retrieval.synthetic import IDENTITY, make_doc, unit

ROOT = Path(__file__).resolve().parents[2]

KILLER = """
import os, signal, sys
from pathlib import Path
from retrieval import DocumentIndex, IndexConfig, store
from tests.retrieval.synthetic import IDENTITY, make_doc

root, target, function = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
original = getattr(store, function)

def dying(path, data):
    if Path(path).name == target:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(path, data)

setattr(store, function, dying)
DocumentIndex(root, IDENTITY).commit([make_doc(2, ["second document text"] * 3)])
"""


def first_generation(root: Path) -> DocumentIndex:
    index = DocumentIndex(root, IDENTITY)
    index.commit([make_doc(1, ["alpha chunk", "beta chunk"])])
    return index


@pytest.mark.parametrize(
    ("target", "function"),
    [
        ("documents.json", "write_synced"),
        ("vectors.npy", "write_synced"),
        ("live.npy", "write_synced"),
        ("MANIFEST.json", "atomic_write"),
    ],
)
def test_a_writer_killed_mid_commit_leaves_the_previous_index(tmp_path, target, function) -> None:
    root = tmp_path / "index"
    first_generation(root)
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, str(root), target, function],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    survivor = DocumentIndex(root, IDENTITY)
    assert survivor.generation == 1
    assert [d.document_id for d in survivor.documents()] == [1]
    hits = survivor.search("alpha", k=1, query_vector=unit(1000))
    assert hits[0].text == "alpha chunk"

    survivor.commit([make_doc(3, ["gamma chunk"])])
    again = DocumentIndex(root, IDENTITY)
    assert again.generation == 2 and {d.document_id for d in again.documents()} == {1, 3}
    assert not list(root.glob(".staging-*")) and not list(root.glob(".*.tmp"))


def test_an_error_between_files_changes_nothing(tmp_path, monkeypatch) -> None:
    root = tmp_path / "index"
    index = first_generation(root)
    original = store.write_synced

    def failing(path: Path, data: bytes) -> None:
        if path.name == "chunks.jsonl":
            raise OSError("disk full")
        original(path, data)

    monkeypatch.setattr(store, "write_synced", failing)
    with pytest.raises(OSError, match="disk full"):
        index.commit([make_doc(2, ["never stored"])], delete=[1])
    assert index.generation == 1 and len(index) == 2
    assert index.search("alpha", k=1, query_vector=unit(1000))[0].document_id == 1
    assert DocumentIndex(root, IDENTITY).search("x", k=5, query_vector=unit(1000))[0].text == (
        "alpha chunk"
    )


def test_generations_are_pruned_and_deleted_rows_compacted(tmp_path) -> None:
    root = tmp_path / "index"
    index = DocumentIndex(root, IDENTITY)
    for doc_id in range(1, 6):
        index.commit([make_doc(doc_id, [f"text {doc_id}"] * 4)])
    assert sorted(p.name for p in root.glob("gen-*")) == ["gen-00000004", "gen-00000005"]
    index.commit(delete=[1, 2])
    reopened = DocumentIndex(root, IDENTITY, config=IndexConfig(relevance_floor=-1.0))
    assert len(reopened._state.rows) == len(reopened) == 12
    assert reopened._state.bm25 is not None  # loaded with the generation, not rebuilt
    assert reopened.search("text 4", k=4, mode="bm25")[0].document_id == 4
    assert {h.document_id for h in reopened.search("t", k=20, query_vector=unit(1))} == {3, 4, 5}
