"""Sentence embeddings (sentence-transformers, offline, batched, GPU when present)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_CONFIG_FILES = ("modules.json", "config.json", "1_Pooling/config.json", "tokenizer.json")


@dataclass(slots=True, frozen=True)
class ModelIdentity:
    """Stored with an index: vectors from different models must never be mixed."""

    name: str
    dimension: int
    fingerprint: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelIdentity:
        return cls(str(data["name"]), int(data["dimension"]), str(data["fingerprint"]))


def fingerprint(model_path: str | Path) -> str:
    """SHA-256 over the weights and the configuration that shape the vectors."""
    root = Path(model_path)
    digest = hashlib.sha256()
    for name in (*_CONFIG_FILES, *_WEIGHT_FILES):
        path = root / name
        if not path.is_file():
            continue
        digest.update(name.encode())
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    """Turns text into L2-normalised float32 vectors, so inner product is cosine."""

    def __init__(
        self, model_path: str | Path, device: str | None = None, batch_size: int = 32
    ) -> None:
        from sentence_transformers import SentenceTransformer

        root = Path(model_path)
        if not (root / "modules.json").is_file() and not (root / "config.json").is_file():
            raise FileNotFoundError(
                f"{root} is not a sentence-transformers model folder (no modules.json); "
                "set ASSISTANT_EMBEDDING_MODEL to a local model folder"
            )
        self.device = device or default_device()
        self.batch_size = batch_size
        self.model = SentenceTransformer(str(root), device=self.device, local_files_only=True)
        self.tokenizer_path = root
        model = self.model
        get_dimension = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        self.identity = ModelIdentity(str(root), int(get_dimension() or 0), fingerprint(root))

    @property
    def dimension(self) -> int:
        return self.identity.dimension

    def encode(self, texts: list[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Vectors for `texts`, in order; `progress(n)` is called as each slice finishes."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        step = self.batch_size * 4
        for first in range(0, len(texts), step):
            batch = texts[first : first + step]
            out[first : first + len(batch)] = self.model.encode(
                batch,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            if progress is not None:
                progress(len(batch))
        return out

    def encode_query(self, query: str) -> np.ndarray:
        return self.encode([query])[0]
