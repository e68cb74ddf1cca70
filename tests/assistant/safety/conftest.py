"""The real safety classifier (bundled MiniLM + committed head), loaded once per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def classifier():
    from assistant.safety.classifier import shared_classifier
    from assistant.settings import Settings

    settings = Settings()
    return shared_classifier(settings.embedding_model_path(), settings.device)


@pytest.fixture(scope="session")
def gate(classifier):
    from assistant.safety.injection import ToolCallGate
    from assistant.settings import Settings

    settings = Settings()
    return ToolCallGate(classifier, settings.embedding_model_path(), settings.device)
