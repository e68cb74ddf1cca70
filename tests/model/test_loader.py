"""The loader: bundled GGUF against the reference library, tiny written GGUF files in every
tensor type, HF folders, and the errors for bad files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from model.config import ModelConfig, llama3_scaling_from_freqs
from model.dequantize import dequantize
from model.loader import ModelLoadError, default_model_path, expected_shapes, load_model

# ---------------------------------------------------------------------------------------------
# The bundled model


def test_every_bundled_tensor_equals_the_reference(loaded_model, hf_reference) -> None:
    reference = hf_reference[0].state_dict()
    weights = loaded_model.weights
    assert loaded_model.config.tie_word_embeddings
    assert "lm_head.weight" not in weights
    assert set(weights) == set(reference) - {"lm_head.weight"}
    for name, expected in reference.items():
        ours = weights["model.embed_tokens.weight" if name == "lm_head.weight" else name]
        assert ours.dtype == torch.float32 and ours.device.type == "cpu"
        assert ours.shape == expected.shape, name
        assert torch.equal(ours, expected) or (ours - expected).abs().max().item() <= 1e-6, name


def test_bundled_config_matches_the_reference(loaded_model, hf_reference) -> None:
    ref = hf_reference[0].config
    cfg = loaded_model.config
    assert cfg.architecture == "llama"
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size) == (
        ref.vocab_size,
        ref.hidden_size,
        ref.intermediate_size,
    )
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        ref.num_hidden_layers,
        ref.num_attention_heads,
        ref.num_key_value_heads,
    )
    assert cfg.head_dim == ref.head_dim
    assert cfg.rms_norm_eps == pytest.approx(ref.rms_norm_eps)
    assert cfg.rope_theta == ref.rope_parameters["rope_theta"]
    assert cfg.max_position_embeddings == ref.max_position_embeddings
    assert cfg.bos_token_id == ref.bos_token_id
    assert ref.eos_token_id in cfg.eos_token_ids


def test_default_model_path_is_the_bundled_gguf(gguf_path: Path) -> None:
    assert default_model_path() == gguf_path


# ---------------------------------------------------------------------------------------------
# Dequantisation against the gguf package


def _random_blocks(kind: Q, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random bytes for `n_blocks` blocks, with every float16 scale set to a sane value."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[kind]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    half_offsets = {
        Q.Q4_0: [0],
        Q.Q4_1: [0, 2],
        Q.Q5_0: [0],
        Q.Q5_1: [0, 2],
        Q.Q8_0: [0],
        Q.Q4_K: [0, 2],
        Q.Q5_K: [0, 2],
        Q.Q6_K: [208],
        Q.Q2_K: [80, 82],
        Q.Q3_K: [108],
    }[kind]
    for offset in half_offsets:
        scale = rng.uniform(-0.05, 0.05, size=n_blocks).astype(np.float16)
        raw[:, offset : offset + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K])
def test_dequantize_is_bit_identical_to_the_gguf_package(kind: Q) -> None:
    rng = np.random.default_rng(int(kind))
    block_size, _ = gguf.GGML_QUANT_SIZES[kind]
    raw = _random_blocks(kind, 48, rng)
    shape = (6, 8 * block_size)
    ours = dequantize(raw, kind, shape)
    reference = torch.from_numpy(gguf_dequantize(raw, kind).reshape(shape))
    assert torch.equal(ours, reference)


@pytest.mark.parametrize("kind", [Q.F32, Q.F16, Q.BF16])
def test_float_tensors_load_exactly(kind: Q) -> None:
    values = torch.randn(4, 32)
    dtype = {Q.F32: torch.float32, Q.F16: torch.float16, Q.BF16: torch.bfloat16}[kind]
    stored = values.to(dtype)
    raw = stored.view(torch.uint8).numpy().reshape(-1)
    assert torch.equal(dequantize(raw, kind, (4, 32)), stored.float())


# ---------------------------------------------------------------------------------------------
# Tiny GGUF files written in the test

TINY = {"vocab": 272, "hidden": 64, "ffn": 96, "layers": 2, "heads": 4, "kv_heads": 2}
CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _tiny_state_dict(arch: str, tied: bool, seed: int) -> dict[str, torch.Tensor]:
    config = ModelConfig(
        architecture=arch,
        vocab_size=TINY["vocab"],
        hidden_size=TINY["hidden"],
        intermediate_size=TINY["ffn"],
        num_hidden_layers=TINY["layers"],
        num_attention_heads=TINY["heads"],
        num_key_value_heads=TINY["kv_heads"],
        head_dim=TINY["hidden"] // TINY["heads"],
        tie_word_embeddings=tied,
        attention_bias=arch == "qwen2",
    )
    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.randn(shape, generator=generator) * 0.1
        for name, shape in expected_shapes(config).items()
    }


def _llama_cpp_permute(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """What llama.cpp's converter does to Llama's Q/K rows (convert_hf_to_gguf.py)."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


_GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _gguf_name(hf_name: str) -> str:
    globals_ = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf_name in globals_:
        return globals_[hf_name]
    _, _, layer, *rest = hf_name.split(".")
    part, kind = ".".join(rest[:-1]), rest[-1]
    return f"blk.{layer}.{_GGUF_NAMES[part]}.{kind}"


def _byte_tokens() -> list[str]:
    from model.tokenizer import bytes_to_unicode

    return (
        CONTROL_TOKENS
        + [bytes_to_unicode()[b] for b in range(256)]
        + ["ab", "abc"]
        + [f"<pad{i}>" for i in range(TINY["vocab"] - 256 - 5)]
    )


def write_tiny_gguf(
    path: Path,
    arch: str = "llama",
    kind: Q = Q.F32,
    tied: bool = False,
    seed: int = 0,
    drop: str | None = None,
    extra_metadata: dict | None = None,
    extra_tensors: dict[str, np.ndarray] | None = None,
) -> dict[str, torch.Tensor]:
    """A tiny random model as llama.cpp would write it; returns its HF-layout weights as the
    file stores them (after quantisation), so the loader's output can be compared exactly."""
    weights = _tiny_state_dict(arch if arch in ("llama", "qwen2") else "llama", tied, seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(TINY["layers"])
    writer.add_context_length(256)
    writer.add_embedding_length(TINY["hidden"])
    writer.add_feed_forward_length(TINY["ffn"])
    writer.add_head_count(TINY["heads"])
    writer.add_head_count_kv(TINY["kv_heads"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10000.0)
    writer.add_tokenizer_model("gpt2")
    tokens = _byte_tokens()
    writer.add_token_list(tokens)
    writer.add_token_types([3] * 3 + [1] * (len(tokens) - 3))
    writer.add_token_merges(["a b", "ab c"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}")
    for key, value in (extra_metadata or {}).items():
        writer.add_key_value(key, value[0], value[1])
    stored: dict[str, torch.Tensor] = {}
    for name, value in weights.items():
        if name == drop:
            continue
        file_value = value
        if arch == "llama" and ".q_proj." in name:
            file_value = _llama_cpp_permute(value, TINY["heads"])
        elif arch == "llama" and ".k_proj." in name:
            file_value = _llama_cpp_permute(value, TINY["kv_heads"])
        tensor_kind = kind if value.ndim == 2 else Q.F32  # llama.cpp keeps norms/biases in F32
        data = gguf_quantize(file_value.numpy(), tensor_kind)
        writer.add_tensor(_gguf_name(name), data, raw_dtype=tensor_kind)
        back = torch.from_numpy(
            gguf_dequantize(data.view(np.uint8).reshape(-1), tensor_kind).reshape(value.shape)
        )
        if arch == "llama" and ".q_proj." in name:
            back = _unpermute_reference(back, TINY["heads"])
        elif arch == "llama" and ".k_proj." in name:
            back = _unpermute_reference(back, TINY["kv_heads"])
        stored[name] = back
    for name, value in (extra_tensors or {}).items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored


def _unpermute_reference(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Inverse of `_llama_cpp_permute` as a row gather: GGUF row 2i is HF row i, row 2i+1 is
    HF row head_dim/2 + i, within each head."""
    rows = weight.shape[0]
    head_dim = rows // heads
    order = []
    for head in range(heads):
        base = head * head_dim
        order += [base + 2 * i for i in range(head_dim // 2)]
        order += [base + 2 * i + 1 for i in range(head_dim // 2)]
    return weight[order]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("kind", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1])
def test_tiny_gguf_loads_in_hf_layout(tmp_path: Path, arch: str, kind: Q) -> None:
    path = tmp_path / "tiny.gguf"
    stored = write_tiny_gguf(path, arch=arch, kind=kind, tied=kind == Q.Q8_0, seed=int(kind))
    loaded = load_model(path, progress=False)
    assert loaded.config.architecture == arch
    assert loaded.config.attention_bias == (arch == "qwen2")
    assert loaded.config.tie_word_embeddings == (kind == Q.Q8_0)
    assert set(loaded.weights) == set(stored)
    for name, expected in stored.items():
        assert torch.equal(loaded.weights[name], expected), name


@pytest.mark.parametrize("kind", [Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q2_K, Q.Q3_K])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_k_quant_gguf_loads_in_hf_layout(tmp_path: Path, kind: Q, arch: str) -> None:
    """K-quants (256-value blocks; Q2_K/Q3_K through the gguf package's dequantiser) in a
    model wide enough for them, written as random blocks the way llama.cpp lays them out."""
    hidden, heads, kv_heads = 256, 4, 2
    config = ModelConfig(
        architecture=arch,
        vocab_size=len(_byte_tokens()),
        hidden_size=hidden,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        tie_word_embeddings=True,
        attention_bias=arch == "qwen2",
    )
    rng = np.random.default_rng(7)
    path = tmp_path / "k.gguf"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(256)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(_byte_tokens())
    expected: dict[str, torch.Tensor] = {}
    for name, shape in expected_shapes(config).items():
        if len(shape) == 1:
            value = rng.standard_normal(shape).astype(np.float32)
            writer.add_tensor(_gguf_name(name), value)
            expected[name] = torch.from_numpy(value)
            continue
        block_size, _ = gguf.GGML_QUANT_SIZES[kind]
        raw = _random_blocks(kind, shape[0] * shape[1] // block_size, rng)
        writer.add_tensor(_gguf_name(name), raw.reshape(shape[0], -1), raw_dtype=kind)
        value = torch.from_numpy(gguf_dequantize(raw, kind).reshape(shape))
        if arch == "llama" and ".q_proj." in name:
            value = _unpermute_reference(value, heads)
        elif arch == "llama" and ".k_proj." in name:
            value = _unpermute_reference(value, kv_heads)
        expected[name] = value
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    loaded = load_model(path, progress=False)
    assert set(loaded.weights) == set(expected)
    for name, value in expected.items():
        assert torch.equal(loaded.weights[name], value), name


def test_llama_q_k_rows_are_unpermuted_exactly(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, kind=Q.F32, seed=3)
    original = _tiny_state_dict("llama", False, 3)
    loaded = load_model(path, progress=False)
    for name in (
        "model.layers.1.self_attn.q_proj.weight",
        "model.layers.1.self_attn.k_proj.weight",
    ):
        assert torch.equal(loaded.weights[name], original[name])


def test_tiny_gguf_config_and_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    loaded = load_model(path, progress=False)
    cfg = loaded.config
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (4, 2, 16)
    assert cfg.rms_norm_eps == pytest.approx(1e-6)
    assert cfg.eos_token_ids == [0, 2]  # the GGUF's eos and the <|endoftext|> control token
    tok = loaded.tokenizer
    assert tok.encode("abc<|im_end|>") == [tokens_index("abc"), 2]
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "<|im_start|>x"


def tokens_index(token: str) -> int:
    return _byte_tokens().index(token)


def test_rope_scaling_from_metadata(tmp_path: Path) -> None:
    path = tmp_path / "linear.gguf"
    write_tiny_gguf(
        path,
        extra_metadata={
            "llama.rope.scaling.type": ("linear", gguf.GGUFValueType.STRING),
            "llama.rope.scaling.factor": (4.0, gguf.GGUFValueType.FLOAT32),
        },
    )
    assert load_model(path, progress=False).config.rope_scaling == {
        "rope_type": "linear",
        "factor": 4.0,
    }


def _llama3_divisors(
    theta: float, head_dim: int, factor: float, low: float, high: float, original: int
) -> list[float]:
    """What llama.cpp stores in rope_freqs.weight for HF's llama3 RoPE parameters."""
    divisors = []
    for i in range(head_dim // 2):
        wavelen = 2 * np.pi * theta ** (2 * i / head_dim)
        if wavelen < original / high:
            divisors.append(1.0)
        elif wavelen > original / low:
            divisors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    return divisors


@pytest.mark.parametrize(("theta", "head_dim"), [(500000.0, 128), (10000.0, 16)])
def test_llama3_scaling_is_recovered_from_rope_freqs(theta: float, head_dim: int) -> None:
    freqs = _llama3_divisors(theta, head_dim, 8.0, 1.0, 4.0, 256 if head_dim == 16 else 8192)
    scaling = llama3_scaling_from_freqs(freqs, theta, head_dim, None)
    assert scaling is not None
    assert scaling["rope_type"] == "llama3" and scaling["factor"] == 8.0
    again = _llama3_divisors(
        theta,
        head_dim,
        scaling["factor"],
        scaling["low_freq_factor"],
        scaling["high_freq_factor"],
        scaling["original_max_position_embeddings"],
    )
    assert again == pytest.approx(freqs, rel=1e-9)
    if head_dim == 128:  # Llama 3.1's own values: enough points to pin them down exactly
        assert scaling["low_freq_factor"] == pytest.approx(1.0, rel=1e-9)
        assert scaling["high_freq_factor"] == pytest.approx(4.0, rel=1e-9)


def test_llama3_rope_freqs_tensor_sets_the_scaling(tmp_path: Path) -> None:
    path = tmp_path / "llama3.gguf"
    freqs = _llama3_divisors(10000.0, 16, 8.0, 1.0, 4.0, 256)
    write_tiny_gguf(path, extra_tensors={"rope_freqs.weight": np.array(freqs, np.float32)})
    loaded = load_model(path, progress=False)
    assert loaded.config.rope_scaling["rope_type"] == "llama3"
    assert "rope_freqs.weight" not in loaded.weights


def test_hf_config_with_rope_parameters() -> None:
    from transformers import LlamaConfig

    hf = LlamaConfig(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=16384,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )
    config = ModelConfig.from_hf_dict(json.loads(hf.to_json_string()))
    assert config.rope_theta == 500000.0
    assert config.rope_scaling == {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    plain = ModelConfig.from_hf_dict(
        json.loads(LlamaConfig(num_attention_heads=4).to_json_string())
    )
    assert plain.rope_scaling is None


def test_progress_goes_to_stderr(tmp_path: Path, capsys) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    load_model(path, progress=True)
    assert "loading model" in capsys.readouterr().err
    load_model(path, progress=False)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------------
# HF folders


def test_hf_folder_loads(tmp_path: Path, loaded_model) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=loaded_model.tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    reference = Qwen2ForCausalLM(config).eval()
    reference.save_pretrained(tmp_path)
    loaded_model.tokenizer.backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "chat_template": "{{ messages[0].content }}"})
    )
    loaded = load_model(tmp_path, progress=False)
    assert loaded.config.architecture == "qwen2" and loaded.config.attention_bias
    state = reference.state_dict()
    assert set(loaded.weights) == set(state)
    for name, value in state.items():
        assert torch.equal(loaded.weights[name], value), name
    assert loaded.tokenizer.encode("Hello world") == loaded_model.tokenizer.encode("Hello world")
    assert 2 in loaded.tokenizer.eos_token_ids
    assert loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]) == "hi"


def test_hf_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path, progress=False)
    config = {
        "model_type": "llama",
        "vocab_size": 8,
        "hidden_size": 8,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        load_model(tmp_path, progress=False)
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(ModelLoadError, match="corrupt or truncated safetensors"):
        load_model(tmp_path, progress=False)
    (tmp_path / "config.json").write_text(json.dumps(config | {"model_type": "gpt2"}))
    with pytest.raises(ModelLoadError, match="'gpt2' is not supported"):
        load_model(tmp_path, progress=False)


# ---------------------------------------------------------------------------------------------
# Errors


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope.gguf")


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.7)])
    with pytest.raises(ModelLoadError, match="truncated"):
        load_model(path, progress=False)
    path.write_bytes(data[:200])
    with pytest.raises(ModelLoadError, match="ends inside its header"):
        load_model(path, progress=False)


def test_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"PK\x03\x04 this is a zip file, not a model" * 10)
    with pytest.raises(ModelLoadError, match="magic"):
        load_model(path, progress=False)
    path.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty"):
        load_model(path, progress=False)


def test_copied_bundled_header_with_cut_data_is_truncated(tmp_path: Path, gguf_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    with gguf_path.open("rb") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst, length=1 << 20)
        dst.truncate(gguf_path.stat().st_size // 2)
    with pytest.raises(ModelLoadError, match="truncated"):
        load_model(path, progress=False)


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = tmp_path / "gpt2.gguf"
    write_tiny_gguf(path, arch="gptneox")
    with pytest.raises(ModelLoadError, match="gptneox.*not supported"):
        load_model(path, progress=False)


def test_unsupported_tensor_type(tmp_path: Path) -> None:
    path = tmp_path / "q8k.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(256)
    writer.add_feed_forward_length(256)
    writer.add_head_count(2)
    _, q8k_size = gguf.GGML_QUANT_SIZES[Q.Q8_K]
    writer.add_tensor("token_embd.weight", np.zeros((4, q8k_size), np.uint8), raw_dtype=Q.Q8_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match="token_embd.weight.*Q8_K"):
        load_model(path, progress=False)


def test_missing_tensor(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, drop="model.layers.1.mlp.down_proj.weight")
    with pytest.raises(ModelLoadError, match="model.layers.1.mlp.down_proj.weight"):
        load_model(path, progress=False)
