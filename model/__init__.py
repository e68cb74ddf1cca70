"""Our inference engine: `LLM(...).generate(prompts, SamplingParams(...))`.

The names are resolved on first use so that `import model` stays cheap (no torch import).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from model.llm import LLM, Completion
    from model.params import SamplingParams

__all__ = ["LLM", "Completion", "SamplingParams"]

_HOMES = {"LLM": "model.llm", "Completion": "model.llm", "SamplingParams": "model.params"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'model' has no attribute '{name}'")
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)
