"""Tiny randomly initialised HF Llama / Qwen2 models and our network on the same weights."""

from __future__ import annotations

import torch

from model.config import ModelConfig
from model.llama import LlamaModel
from model.runner import ModelRunner
from model.sequence import ScheduledSeq, Sequence

CPU = torch.device("cpu")


def tiny_hf_model(
    kind: str = "llama",
    tied: bool = False,
    rope_scaling: dict | None = None,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 128,
    layers: int = 2,
    seed: int = 0,
):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config_cls, model_cls = (
        (Qwen2Config, Qwen2ForCausalLM) if kind == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    )
    rope = {"rope_type": "default", "rope_theta": 10000.0, **(rope_scaling or {})}
    hf_config = config_cls(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=tied,
        rope_parameters=rope,
        rms_norm_eps=1e-5,
    )
    model = model_cls(hf_config).eval()
    # Random init leaves norms at 1 and biases at 0: perturb them so those paths are tested.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def our_config(hf_model) -> ModelConfig:
    return ModelConfig.from_hf_dict(hf_model.config.to_dict())


def our_model(hf_model) -> LlamaModel:
    weights = {k: v.detach().float() for k, v in hf_model.state_dict().items()}
    if hf_model.config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    return LlamaModel(our_config(hf_model), weights, CPU, torch.float32)


def run_steps(
    runner: ModelRunner, seqs: list[Sequence], chunks: list[list[int]]
) -> list[torch.Tensor]:
    """Run step i with `chunks[i][j]` new tokens of seqs[j] (0 = skip); all logits per step."""
    out = []
    for sizes in chunks:
        step = [ScheduledSeq(s, n) for s, n in zip(seqs, sizes, strict=True) if n]
        logits, _ = runner.run(step)
        for entry in step:
            entry.seq.num_computed_tokens += entry.num_new_tokens
        out.append(logits)
    return out
