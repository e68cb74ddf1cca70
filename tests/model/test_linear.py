"""Packed projection weights: the file's 4-bit codes used as they are, int8 rows elsewhere;
and the packed (bfloat16) and native-step engines choosing what the float32 network would."""

from __future__ import annotations

import pytest
import torch

from model.engine import LLMEngine, default_dtype
from model.linear import INT4_MAX_ROWS, cpu_has_bf16, projection, projection_cat
from model.llama import AttentionBatch, LlamaModel, PrefillSpan
from model.native_step import native_step_supported
from model.params import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")
LAYER = "model.layers.5."


def test_int4_packing_computes_with_the_files_own_weights(loaded_model) -> None:
    names = [LAYER + "mlp.gate_proj.weight", LAYER + "mlp.up_proj.weight"]
    weights = [loaded_model.weights[n] for n in names]
    q4s = [loaded_model.q4[n] for n in names]
    # float32 activations: the kernel then works from exact scales, so only summation
    # order separates it from the dense product of the dequantised weights.
    proj = projection_cat(weights, q4s, torch.float32, CPU, packed=True)
    assert proj.int4 is not None and proj.int8 is None
    x = torch.randn(3, weights[0].shape[1], generator=torch.Generator().manual_seed(0))
    want = x @ torch.cat(weights).t()
    assert torch.allclose(proj(x), want, atol=1e-3, rtol=1e-4)
    assert proj.bytes_per_row() < proj.dense.numel()  # under a byte per weight


def test_q4_codes_reproduce_the_dequantised_values(loaded_model) -> None:
    name = LAYER + "self_attn.k_proj.weight"  # rows permuted back from llama.cpp's order
    q4 = loaded_model.q4[name]
    assert int(q4.codes.max()) <= 15
    values = q4.scale.repeat_interleave(32, 1) * q4.codes.float()
    values += q4.offset.repeat_interleave(32, 1)
    assert torch.equal(values, loaded_model.weights[name])


def test_int8_rows_use_scales_the_compute_dtype_holds() -> None:
    weight = torch.randn(64, 96, generator=torch.Generator().manual_seed(1)) * 0.05
    proj = projection(weight, torch.bfloat16, CPU, packed=True)
    assert proj.int8 is not None and proj.int4 is None
    scale = proj.int8_scales.float()
    assert (scale * 127 >= weight.abs().amax(dim=1)).all()  # rounded up, nothing clipped
    dequantised = proj.int8.float() * scale.unsqueeze(1)
    assert ((dequantised - weight).abs() <= scale.unsqueeze(1) / 2 + 1e-7).all()


def test_few_and_many_rows_agree() -> None:
    """Packed kernel (few rows) and dense matmul (many rows) give the same products."""
    weight = torch.randn(128, 64, generator=torch.Generator().manual_seed(2))
    proj = projection(weight, torch.float32, CPU, packed=True)
    x = torch.randn(INT4_MAX_ROWS + 8, 64, generator=torch.Generator().manual_seed(3))
    many = proj(x)
    few = torch.cat([proj(x[i : i + 1]) for i in range(x.shape[0])])
    # int8 rows against the float32 matrix: apart by the quantisation error only.
    assert (many - few).abs().max() <= 0.02 * many.abs().max()
    assert not torch.equal(many, few)  # the few-row products did go through the int8 kernel


def test_weight_format_is_checked(loaded_model) -> None:
    c = loaded_model
    with pytest.raises(ValueError, match="weight_format must be"):
        LLMEngine(c.config, c.weights, device="cpu", weight_format="int3", num_blocks=8)
    with pytest.raises(ValueError, match="needs bfloat16"):
        LLMEngine(c.config, c.weights, device="cpu", dtype=torch.float32, weight_format="packed")
    with pytest.raises(ValueError, match="Q4_0/Q4_1"):  # no 4-bit codes given
        LLMEngine(c.config, c.weights, device="cpu", weight_format="native", num_blocks=8)


def float32_logits(loaded_model, ids: list[int]) -> torch.Tensor:
    model = LlamaModel(loaded_model.config, loaded_model.weights, CPU, torch.float32)
    n = len(ids)
    batch = AttentionBatch(slot_mapping=torch.arange(n), prefills=(PrefillSpan(0, n, 0, None),))
    cache = model.new_cache(-(-n // 16))
    return model.forward(torch.tensor(ids), torch.arange(n), batch, cache, torch.arange(n))


@pytest.mark.parametrize("weight_format", ["packed", "native"])
def test_few_row_decode_chooses_what_float32_would(loaded_model, weight_format) -> None:
    """The fast decode paths (bfloat16 weight-only kernels; the native step's int8
    activations) against the float32 network, teacher-forced on what they generated."""
    c = loaded_model
    dtype = torch.bfloat16 if weight_format == "packed" else None
    if weight_format == "packed" and not cpu_has_bf16():
        pytest.skip("packed weights need a CPU with AVX512-BF16")
    if weight_format == "native" and not native_step_supported(
        c.config, dtype or default_dtype(CPU), CPU, c.q4
    ):
        pytest.skip("the native step needs a CPU with AVX2 and a C compiler")
    engine = LLMEngine(
        c.config,
        c.weights,
        c.tokenizer,
        device="cpu",
        dtype=dtype,
        q4=c.q4,
        num_blocks=64,
        weight_format=weight_format,
    )
    tok = c.tokenizer
    prompts = ["Why is the sky blue?", "List three uses of a spreadsheet.", "写一首关于春天的诗。"]
    params = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)
    agreed = []
    for text in prompts:
        prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))
        engine.add_request(prompt, params)
        generated = []
        while engine.has_unfinished():
            generated += [t for d in engine.step() for t in d.token_ids]
        # Teacher-forced float32 logits over what the fast engine produced.
        logits = float32_logits(c, prompt + generated)[len(prompt) - 1 : -1]
        chosen = logits.gather(1, torch.tensor(generated).unsqueeze(1)).squeeze(1)
        best = logits.max(dim=1).values
        agreed += (chosen == best).tolist()
        assert (best - chosen).max().item() < 1.0, text  # only near-ties ever differ
    # Pooled over the prompts: one token is 3% of a single prompt's 32.
    assert sum(agreed) / len(agreed) >= 0.9, sum(agreed) / len(agreed)
