"""ModelConfig: the shape of a Llama-family network, from an HF config.json or GGUF metadata."""

from __future__ import annotations

import math
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
        _check_architecture(self.architecture)
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
        _check_architecture(arch)
        heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        rope = cfg.get("rope_parameters") or {}  # transformers 5 folds rope_theta in here
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
            rope_theta=cfg.get("rope_theta", rope.get("rope_theta", 10000.0)),
            rope_scaling=_hf_rope_scaling(cfg.get("rope_scaling") or rope),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=cfg.get("attention_bias", arch == "qwen2"),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=[eos] if isinstance(eos, int) else list(eos or []),
        )

    @classmethod
    def from_gguf(
        cls,
        metadata: dict[str, Any],
        tensor_names: set[str],
        rope_freqs: list[float] | None = None,
    ) -> ModelConfig:
        """From GGUF metadata (llama.cpp key names) and the file's tensor names.

        `rope_freqs` is the `rope_freqs.weight` tensor that llama.cpp writes instead of
        metadata for Llama 3.1-style RoPE scaling.
        """
        arch = str(metadata.get("general.architecture", ""))
        _check_architecture(arch)

        def key(name: str, default: Any = None) -> Any:
            return metadata.get(f"{arch}.{name}", default)

        hidden = int(key("embedding_length"))
        heads = int(key("attention.head_count"))
        kv_heads = key("attention.head_count_kv") or heads
        head_dim = key("attention.key_length") or key("rope.dimension_count") or hidden // heads
        vocab = key("vocab_size") or len(metadata.get("tokenizer.ggml.tokens", []))
        context = int(key("context_length", 2048))
        return cls(
            architecture=arch,
            vocab_size=int(vocab),
            hidden_size=hidden,
            intermediate_size=int(key("feed_forward_length")),
            num_hidden_layers=int(key("block_count")),
            num_attention_heads=heads,
            num_key_value_heads=int(kv_heads),
            head_dim=int(head_dim),
            rms_norm_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_theta=float(key("rope.freq_base", 10000.0)),
            rope_scaling=_gguf_rope_scaling(metadata, arch, rope_freqs, int(head_dim)),
            max_position_embeddings=context,
            tie_word_embeddings="output.weight" not in tensor_names,
            attention_bias="blk.0.attn_q.bias" in tensor_names,
            bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=gguf_eos_token_ids(metadata),
        )


def _check_architecture(arch: str) -> None:
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedModelError(
            f"Architecture '{arch}' is not supported; "
            f"use one of {', '.join(SUPPORTED_ARCHITECTURES)} (Llama 2/3, SmolLM2, Qwen2)."
        )


def _hf_rope_scaling(scaling: dict[str, Any]) -> dict[str, Any] | None:
    """HF's rope_scaling / rope_parameters -> {"rope_type": ..., ...}, or None for plain RoPE."""
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return None
    rest = {k: v for k, v in scaling.items() if k not in ("rope_theta", "type")}
    return rest | {"rope_type": kind}


# Tokens that end a turn in the chat formats of the supported families; the GGUF names only
# one eos id, but a chat model stops at its end-of-turn token as well.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "</s>")


def gguf_eos_token_ids(metadata: dict[str, Any]) -> list[int]:
    ids = [
        metadata[name]
        for name in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")
        if name in metadata
    ]
    tokens = metadata.get("tokenizer.ggml.tokens", [])
    types = metadata.get("tokenizer.ggml.token_type", [])
    control = {t for t, kind in zip(tokens, types, strict=False) if kind == 3}
    ids += [tokens.index(t) for t in END_OF_TURN_TOKENS if t in control]
    return sorted(set(ids))


def _gguf_rope_scaling(
    metadata: dict[str, Any], arch: str, rope_freqs: list[float] | None, head_dim: int
) -> dict[str, Any] | None:
    kind = metadata.get(f"{arch}.rope.scaling.type", "none")
    factor = float(metadata.get(f"{arch}.rope.scaling.factor", 1.0))
    original = metadata.get(f"{arch}.rope.scaling.original_context_length")
    if kind == "linear" and factor != 1.0:
        return {"rope_type": "linear", "factor": factor}
    if kind == "yarn":
        scaling: dict[str, Any] = {"rope_type": "yarn", "factor": factor}
        if original:
            scaling["original_max_position_embeddings"] = int(original)
        return scaling
    if rope_freqs is not None:
        theta = float(metadata.get(f"{arch}.rope.freq_base", 10000.0))
        return llama3_scaling_from_freqs(rope_freqs, theta, head_dim, original)
    return None


def llama3_scaling_from_freqs(
    rope_freqs: list[float], theta: float, head_dim: int, original: int | None
) -> dict[str, Any] | None:
    """Recover HF's llama3 `rope_scaling` from llama.cpp's per-frequency divisors.

    llama.cpp divides frequency i by rope_freqs[i]: 1 for short wavelengths, `factor` for long
    ones, and a blend in between that is linear in 1/wavelength. Only the ratios
    original/low_freq_factor and original/high_freq_factor matter, so two points on the blend
    line pin down the whole curve.
    """
    factor = max(rope_freqs)
    if factor <= 1.0:
        return None
    original = int(original or 8192)
    inv_wavelengths = [theta ** (-2 * i / head_dim) / (2 * math.pi) for i in range(len(rope_freqs))]
    pairs = list(zip(inv_wavelengths, rope_freqs, strict=True))
    # smooth = (original * inv_wavelength - low) / (high - low): 1 where the frequency is kept,
    # 0 where it is divided by `factor`, a straight line in between.
    points = [(x, (1 / r - 1 / factor) / (1 - 1 / factor)) for x, r in pairs if 1.0 < r < factor]
    if len(points) < 2:  # too few in the blend: its ends are bounded by the untouched groups
        kept = [x for x, r in pairs if r <= 1.0]
        slowed = [x for x, r in pairs if r >= factor]
        if kept:
            points.append((min(kept), 1.0))
        if len(points) < 2 and slowed:
            points.insert(0, (max(slowed), 0.0))
    if len(points) < 2:
        return None
    points.sort()
    (x0, s0), (x1, s1) = points[0], points[-1]
    slope = (s1 - s0) / (x1 - x0)  # = original / (high - low)
    low = original * (x0 - s0 / slope)
    high = low + original / slope
    return {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": original,
    }
