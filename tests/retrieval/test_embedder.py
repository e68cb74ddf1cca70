from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from retrieval import Embedder
from retrieval.embedder import fingerprint


def test_vectors_are_unit_length_and_semantic(embedder) -> None:
    vectors = embedder.encode(["annual leave days", "vacation allowance", "laptop encryption"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert embedder.identity.dimension == 384 and len(embedder.identity.fingerprint) == 64


def test_progress_is_reported_per_slice(embedder) -> None:
    seen: list[int] = []
    embedder.encode([f"text {i}" for i in range(130)], seen.append)
    assert seen == [128, 2]  # slices of 4 batches of 32


def test_fingerprint_changes_with_the_model_files(embedder, tmp_path: Path) -> None:
    source = Path(embedder.tokenizer_path)
    copy = tmp_path / "model"
    copy.mkdir()
    for name in ("config.json", "modules.json", "tokenizer.json"):
        shutil.copy(source / name, copy / name)
    before = fingerprint(copy)
    assert before == fingerprint(copy)
    (copy / "config.json").write_text((source / "config.json").read_text().replace("384", "385"))
    assert fingerprint(copy) != before


def test_a_folder_without_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a sentence-transformers model folder"):
        Embedder(tmp_path)
