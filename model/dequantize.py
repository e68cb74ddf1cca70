"""GGML tensor types -> float32 torch tensors.

The common block formats are unpacked here with vectorised torch ops (several times faster
than the `gguf` package's numpy code, and they run outside the GIL so tensors can be
dequantised in parallel); every other type the `gguf` package knows goes through
`gguf.quants.dequantize`. The arithmetic follows the `gguf` package step by step, in float32,
so both give bit-identical values (the tests check it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, QK_K, GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

T = GGMLQuantizationType


class UnsupportedTensorTypeError(ValueError):
    """A tensor is stored in a ggml type that cannot be turned into floats."""


def _half(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The float16 at byte `start` of every block, as a float32 column."""
    return blocks[:, start : start + 2].contiguous().view(torch.float16).float()


def _split_nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """Bytes in runs of `group` -> their low nibbles then their high nibbles, run by run."""
    n = qs.shape[0]
    runs = qs.reshape(n, -1, 1, group)
    shifts = torch.tensor([0, 4], dtype=torch.uint8).reshape(1, 1, 2, 1)
    return ((runs >> shifts) & 0x0F).reshape(n, -1)


def _bits(packed: torch.Tensor, width: int, group: int) -> torch.Tensor:
    """Bytes in runs of `group` -> their `width`-bit fields, lowest field first, run by run."""
    n = packed.shape[0]
    runs = packed.reshape(n, -1, 1, group)
    shifts = torch.arange(0, 8, width, dtype=torch.uint8).reshape(1, 1, -1, 1)
    return ((runs >> shifts) & ((1 << width) - 1)).reshape(n, -1)


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    q = _split_nibbles(b[:, 2:], 16).to(torch.int8) - 8
    return _half(b, 0) * q.float()


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    q = _split_nibbles(b[:, 4:], 16).float()
    return _half(b, 0) * q + _half(b, 2)


def _q5_high(qh: torch.Tensor) -> torch.Tensor:
    """The 32 fifth bits of a Q5_0/Q5_1 block, from its little-endian uint32."""
    word = qh.contiguous().view(torch.int32)
    return ((word >> torch.arange(32, dtype=torch.int32)) & 1).to(torch.uint8)


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    q = _split_nibbles(b[:, 6:], 16) | (_q5_high(b[:, 2:6]) << 4)
    return _half(b, 0) * (q.to(torch.int8) - 16).float()


def _q5_1(b: torch.Tensor) -> torch.Tensor:
    q = (_split_nibbles(b[:, 8:], 16) | (_q5_high(b[:, 4:8]) << 4)).float()
    return _half(b, 0) * q + _half(b, 2)


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return b[:, 2:].contiguous().view(torch.int8).float() * _half(b, 0)


def _k_scales(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K/Q5_K: twelve bytes -> eight 6-bit scales and eight 6-bit mins."""
    d, m, m_d = scales.reshape(-1, 3, 4).unbind(1)
    sc = torch.cat([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], dim=-1)
    mins = torch.cat([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], dim=-1)
    return sc.float(), mins.float()


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    sc, mins = _k_scales(b[:, 4:16])
    d = (_half(b, 0) * sc).reshape(n, -1, 1)
    dm = (_half(b, 2) * mins).reshape(n, -1, 1)
    q = _split_nibbles(b[:, 16:], 32).reshape(n, -1, 32).float()
    return (d * q - dm).reshape(n, QK_K)


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    sc, mins = _k_scales(b[:, 4:16])
    d = (_half(b, 0) * sc).reshape(n, -1, 1)
    dm = (_half(b, 2) * mins).reshape(n, -1, 1)
    low = _split_nibbles(b[:, 48:], 32)
    high = _bits(b[:, 16:48], 1, 32)
    q = (low | (high << 4)).reshape(n, -1, 32).float()
    return (d * q - dm).reshape(n, QK_K)


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    scales = b[:, 192:208].contiguous().view(torch.int8).float()
    d = (_half(b, 208) * scales).reshape(n, QK_K // 16, 1)
    low = _split_nibbles(b[:, :128], 64)
    high = _bits(b[:, 128:192], 2, 32)
    q = (low | (high << 4)).to(torch.int8) - 32
    return (d * q.reshape(n, QK_K // 16, -1).float()).reshape(n, QK_K)


_BLOCK_DEQUANTISERS: dict[GGMLQuantizationType, Callable[[torch.Tensor], torch.Tensor]] = {
    T.Q4_0: _q4_0,
    T.Q4_1: _q4_1,
    T.Q5_0: _q5_0,
    T.Q5_1: _q5_1,
    T.Q8_0: _q8_0,
    T.Q4_K: _q4_k,
    T.Q5_K: _q5_k,
    T.Q6_K: _q6_k,
}
_FLOAT_TYPES = {T.F32: torch.float32, T.F16: torch.float16, T.BF16: torch.bfloat16}


def dequantize(
    data: np.ndarray, tensor_type: GGMLQuantizationType, shape: tuple[int, ...]
) -> torch.Tensor:
    """Raw GGUF bytes of one tensor -> a float32 tensor of `shape` (torch order)."""
    # A copy: the source is a read-only memory map, and float32 tensors are returned as-is.
    raw = torch.from_numpy(np.array(data, dtype=np.uint8, copy=True))
    if tensor_type in _FLOAT_TYPES:
        return raw.view(_FLOAT_TYPES[tensor_type]).float().reshape(shape)
    if tensor_type in _BLOCK_DEQUANTISERS:
        _, type_size = GGML_QUANT_SIZES[tensor_type]
        return _BLOCK_DEQUANTISERS[tensor_type](raw.reshape(-1, type_size)).reshape(shape)
    try:
        values = gguf_dequantize(np.asarray(data, dtype=np.uint8), tensor_type)
    except NotImplementedError as exc:
        raise UnsupportedTensorTypeError(
            f"tensor type {tensor_type.name} cannot be dequantised by this engine"
        ) from exc
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(shape)


@cache
def can_dequantize(tensor_type: GGMLQuantizationType) -> bool:
    """Whether `dequantize` handles this type (tried on one all-zero block)."""
    if tensor_type in _FLOAT_TYPES or tensor_type in _BLOCK_DEQUANTISERS:
        return True
    _, type_size = GGML_QUANT_SIZES[tensor_type]
    try:
        gguf_dequantize(np.zeros(type_size, dtype=np.uint8), tensor_type)
    except (NotImplementedError, ValueError, TypeError):
        return False
    return True


@dataclass(slots=True)
class Q4Groups:
    """A Q4_0/Q4_1 matrix kept as 4-bit codes: w = scale * code + offset per group of 32
    inputs. The engine packs these for torch's int4 kernel, so decode reads the file's own
    4-bit weights instead of float copies (the values are exactly the dequantised ones)."""

    codes: torch.Tensor  # uint8 [rows, cols], 0..15
    scale: torch.Tensor  # float32 [rows, cols // 32]
    offset: torch.Tensor  # float32 [rows, cols // 32]


Q4_GROUP = 32


def concat_q4(parts: list[Q4Groups]) -> Q4Groups:
    """Matrices of the same input stacked by output rows (q|k|v, gate|up)."""
    return Q4Groups(*(torch.cat([getattr(q, f.name) for q in parts]) for f in fields(Q4Groups)))


def q4_groups(
    data: np.ndarray, tensor_type: GGMLQuantizationType, shape: tuple[int, ...]
) -> Q4Groups | None:
    """The codes, scales and offsets of a 2-D Q4_0/Q4_1 tensor; None for other types."""
    if tensor_type not in (T.Q4_0, T.Q4_1) or len(shape) != 2:
        return None
    _, type_size = GGML_QUANT_SIZES[tensor_type]
    blocks = torch.from_numpy(np.array(data, dtype=np.uint8, copy=True)).reshape(-1, type_size)
    rows, cols = shape
    scale = _half(blocks, 0).reshape(rows, cols // Q4_GROUP)
    if tensor_type == T.Q4_0:  # w = d * (q - 8)
        codes = _split_nibbles(blocks[:, 2:], 16)
        offset = -8 * scale
    else:  # w = d * q + m
        codes = _split_nibbles(blocks[:, 4:], 16)
        offset = _half(blocks, 2).reshape(rows, cols // Q4_GROUP)
    return Q4Groups(codes.reshape(rows, cols), scale, offset)
