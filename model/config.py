"""ModelConfig: the shape of a Llama-family network, from an HF config.json or GGUF metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SUPPORTED_ARCHITECTURES = ("llama", "qwen2")


class UnsupportedModelError(ValueError):
    """The file describes a network this engine does not implement."""


@dataclass(slots=True)
class ModelConfig:
    architecture: str  # "llama" (Llama 2/3, SmolLM2, Mistral-style) or "qwen2"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # HF-style: {"rope_type": "llama3"|"linear"|"default", "factor": ..., ...} or None.
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2)
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"Architecture '{self.architecture}' is not supported; "
                f"use one of {', '.join(SUPPORTED_ARCHITECTURES)} (Llama 2/3, SmolLM2, Qwen2)."
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedModelError(
                f"{self.num_attention_heads} attention heads cannot be grouped over "
                f"{self.num_key_value_heads} key/value heads."
            )

    @classmethod
    def from_hf_dict(cls, cfg: dict[str, Any]) -> ModelConfig:
        """From a transformers `config.json` (LlamaConfig / Qwen2Config fields)."""
        model_type = cfg.get("model_type", "")
        arch = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}.get(model_type, model_type)
        heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        return cls(
            architecture=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-5),
            rope_theta=cfg.get("rope_theta", 10000.0),
            rope_scaling=cfg.get("rope_scaling"),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=cfg.get("attention_bias", arch == "qwen2"),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=[eos] if isinstance(eos, int) else list(eos or []),
        )
