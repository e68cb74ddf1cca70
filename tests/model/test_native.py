"""The C decode-attention kernel against SDPA over the same (gathered, padded) context."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from model.llama import BLOCK_SIZE
from model.native import decode_attention

pytestmark = [
    pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the kernel"),
    pytest.mark.usefixtures("one_thread"),
]


def paged_case(lengths: list[int], n_heads: int, n_kv: int, hd: int, dtype: torch.dtype):
    """Random queries and a cache whose blocks are scattered, and the block tables."""
    gen = torch.Generator().manual_seed(sum(lengths) + n_heads + hd)
    counts = [-(-n // BLOCK_SIZE) for n in lengths]
    total = sum(counts) + 3
    order = torch.randperm(total, generator=gen)
    tables = torch.zeros(len(lengths), max(counts), dtype=torch.long)
    start = 0
    for row, count in enumerate(counts):
        tables[row, :count] = order[start : start + count]
        start += count

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    cache_shape = (total, BLOCK_SIZE, n_kv, hd)
    return rand(len(lengths), n_heads, hd), rand(*cache_shape), rand(*cache_shape), tables


def reference(q, k_cache, v_cache, tables, lengths):
    d, n_heads, hd = q.shape
    n_kv = k_cache.shape[2]
    width = tables.shape[1] * BLOCK_SIZE
    keys = k_cache[tables.flatten()].view(d, width, n_kv, hd).transpose(1, 2).float()
    values = v_cache[tables.flatten()].view(d, width, n_kv, hd).transpose(1, 2).float()
    mask = (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1))[:, None, None]
    group = n_heads // n_kv
    out = F.scaled_dot_product_attention(
        q.float().view(d, n_kv, group, hd), keys, values, attn_mask=mask
    )
    return out.reshape(d, n_heads, hd)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("n_heads", "n_kv", "hd"),
    [(9, 3, 64), (4, 4, 32), (8, 2, 128), (6, 1, 64)],  # hd 64 bf16: the AVX512 path
)
def test_kernel_matches_sdpa(dtype, n_heads, n_kv, hd) -> None:
    # Whole blocks, a partial last block, a single position, a long context.
    lengths = [1, 15, 16, 17, 64, 100, 333, 700]
    q, k_cache, v_cache, tables = paged_case(lengths, n_heads, n_kv, hd, dtype)
    got = decode_attention(q, k_cache, v_cache, tables, torch.tensor(lengths))
    assert got is not None and got.dtype == dtype and got.shape == q.shape
    want = reference(q, k_cache, v_cache, tables, lengths)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: the output's own rounding
    assert (got.float() - want).abs().max().item() < tolerance


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("n_heads", "n_kv"), [(9, 3), (4, 4), (4, 2), (6, 1)])
def test_rows_of_one_prompt_get_what_each_gets_alone(dtype, n_heads, n_kv) -> None:
    """Consecutive rows of a prompt chunk (same table, one more position each) are scored
    together against each key; every row's output is still bit for bit its own."""
    first, count = 37, 23
    q, k_cache, v_cache, tables = paged_case([first + count, 50], n_heads, n_kv, 64, dtype)
    # The prompt's rows, a decode of another sequence between two runs of them.
    rows = [0] * 9 + [1] + [0] * (count - 9)
    lengths = [first + i for i in range(9)] + [50] + [first + i for i in range(9, count)]
    queries = torch.randn(len(rows), n_heads, 64, generator=torch.Generator().manual_seed(1))
    queries = queries.to(dtype)
    batch_tables = tables[rows].contiguous()
    together = decode_attention(queries, k_cache, v_cache, batch_tables, torch.tensor(lengths))
    assert together is not None
    for i, length in enumerate(lengths):
        alone = decode_attention(
            queries[i : i + 1].contiguous(), k_cache, v_cache, batch_tables[i : i + 1],
            torch.tensor([length]),
        )
        assert torch.equal(together[i], alone[0]), i
    want = reference(queries, k_cache, v_cache, batch_tables, lengths)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert (together.float() - want).abs().max().item() < tolerance


def test_kernel_declines_what_its_buffers_cannot_hold() -> None:
    q, k_cache, v_cache, tables = paged_case([20], 32, 1, 64, torch.float32)  # group of 32
    assert decode_attention(q, k_cache, v_cache, tables, torch.tensor([20])) is None


def test_without_a_compiler_the_engine_falls_back_to_sdpa(tmp_path) -> None:
    script = (
        "import torch\n"
        "from model.engine import LLMEngine\n"
        "from model.params import SamplingParams\n"
        "from tests.model.tiny_models import our_config, tiny_hf_model\n"
        "hf = tiny_hf_model(vocab=64, layers=1)\n"
        "from tests.model.test_native_step import quantise_q4_1\n"
        "weights = {k: v.detach().float() for k, v in hf.state_dict().items()}\n"
        "q4 = {n: quantise_q4_1(w)[0] for n, w in weights.items() if 'proj' in n}\n"
        "engine = LLMEngine(our_config(hf), weights, device='cpu', dtype=torch.float32, q4=q4)\n"
        "assert not engine.model.native_decode and engine.model.native_step is None\n"
        "engine.add_request([1, 2, 3], SamplingParams(max_tokens=5, temperature=0.0))\n"
        "out = []\n"
        "while engine.has_unfinished():\n"
        "    out += [t for d in engine.step() for t in d.token_ids]\n"
        "assert len(out) == 5, out\n"
    )
    env = {
        **os.environ,
        "CC": str(tmp_path / "no-such-cc"),
        "ASSISTANT_KERNEL_CACHE": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "no C compiler found" in result.stderr


def test_inputs_the_kernel_cannot_read_safely_are_refused() -> None:
    q, k_cache, v_cache, tables = paged_case([20, 40], 9, 3, 64, torch.float32)
    lengths = torch.tensor([20, 40])
    assert decode_attention(q, k_cache, v_cache, tables, torch.tensor([20, 999])) is None
    assert decode_attention(q, k_cache, v_cache, tables, torch.tensor([20, 0])) is None
    with pytest.raises(ValueError, match="contiguous"):
        decode_attention(
            q.transpose(0, 1).contiguous().transpose(0, 1), k_cache, v_cache, tables, lengths
        )
    with pytest.raises(ValueError, match="int64"):
        decode_attention(q, k_cache, v_cache, tables.int(), lengths)
