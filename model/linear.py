"""Projection weights in the forms a step needs: dense for many rows, packed for a few.

A decode step multiplies one row (or a handful) per sequence by every weight matrix, so it
is bound by the bytes of weights it reads; a prefill multiplies hundreds of rows and is
bound by arithmetic. On CPUs with bfloat16 matrix units (AMX) the best of both is to keep:

- a dense bfloat16 copy, [in, out], for batches of many rows (AMX matmul), and
- a packed copy for a few rows, read by torch's weight-only kernels: the file's own 4-bit
  codes (Q4_0/Q4_1, exact) for `_weight_int4pack_mm_for_cpu`, or, for matrices stored in
  another type, int8 codes with one scale per output row for `_weight_int8pack_mm`.

Elsewhere (float32, CUDA, CPUs without those kernels) only the dense copy exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.dequantize import Q4_GROUP, Q4Groups, concat_q4

# Up to how many rows the packed kernels beat the dense AMX matmul: they dequantise the
# weights again for every row block, the dense matmul reuses each weight across rows.
INT4_MAX_ROWS = 8
INT8_MAX_ROWS = 2


@dataclass(slots=True)
class Projection:
    # [in, out] in the compute dtype, for `x @ dense`: a single-row product then streams the
    # weights in memory order, which on the CPU reads them faster than F.linear's [out, in].
    dense: torch.Tensor
    bias: torch.Tensor | None = None
    int4: torch.Tensor | None = None  # packed codes, [out, in / 2] uint8
    int4_scales: torch.Tensor | None = None  # [in / 32, out, 2]: scale, zero
    int8: torch.Tensor | None = None  # [out, in] int8
    int8_scales: torch.Tensor | None = None  # [out]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        if self.int4 is not None and rows <= INT4_MAX_ROWS:
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(
                x, self.int4, Q4_GROUP, self.int4_scales
            )
        elif self.int8 is not None and rows <= INT8_MAX_ROWS:
            out = torch.ops.aten._weight_int8pack_mm(x, self.int8, self.int8_scales)
        elif self.bias is not None:
            return torch.addmm(self.bias, x, self.dense)
        else:
            return x @ self.dense
        return out if self.bias is None else out + self.bias

    def bytes_per_row(self) -> int:
        """Weight bytes one single-row product reads (the decode of one sequence)."""
        if self.int4 is not None:
            parts = (self.int4, self.int4_scales)
        elif self.int8 is not None:
            parts = (self.int8, self.int8_scales)
        else:
            parts = (self.dense,)
        parts += () if self.bias is None else (self.bias,)
        return sum(t.numel() * t.element_size() for t in parts)


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16, AMX)."""
    check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    return bool(check and check())


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles (Intel Sapphire Rapids and later)."""
    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(check and check())


def packed_kernels_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the weight-only CPU kernels run fast here: bfloat16 on a CPU with AVX512-BF16
    (they exist elsewhere too, but with float32 activations they are slower than dense)."""
    return (
        device.type == "cpu"
        and dtype == torch.bfloat16
        and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")
        and cpu_has_bf16()
    )


def projection(
    weight: torch.Tensor,
    dtype: torch.dtype,
    device: torch.device,
    q4: Q4Groups | None = None,
    bias: torch.Tensor | None = None,
    packed: bool = False,
) -> Projection:
    """A projection from an HF weight [out, in] (float32), its Q4 codes when the file has
    them, and whether to add the packed copy."""
    dense = weight.t().to(device=device, dtype=dtype).contiguous()
    bias = None if bias is None else bias.to(device=device, dtype=dtype)
    proj = Projection(dense, bias)
    if not packed:
        return proj
    if q4 is not None and _int4_shape_ok(weight):
        proj.int4, proj.int4_scales = _pack_int4(q4, dtype)
    else:
        proj.int8, proj.int8_scales = _pack_int8(weight, dtype)
    return proj


def _int4_shape_ok(weight: torch.Tensor) -> bool:
    out_features, in_features = weight.shape
    return in_features % Q4_GROUP == 0 and out_features % 16 == 0


def _pack_int4(q4: Q4Groups, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    # The kernel computes (code - 8) * scale + zero; the file's w = scale * code + offset.
    codes = q4.codes.to(torch.int32).contiguous()
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    zero = q4.offset + 8 * q4.scale
    scales = torch.stack([q4.scale.t(), zero.t()], dim=-1).to(dtype).contiguous()
    return packed, scales


def _pack_int8(weight: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    # One scale per output row, rounded up to a value the compute dtype holds exactly (the
    # kernel takes scales in that dtype), so the codes are quantised against the scale used.
    scale = weight.abs().amax(dim=1).clamp_min(1e-12) / 127
    scale = _round_up(scale, dtype)
    codes = torch.round(weight / scale.unsqueeze(1)).clamp(-127, 127).to(torch.int8)
    return codes.contiguous(), scale.to(dtype)


def _round_up(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    rounded = values.to(dtype).float()
    too_small = rounded < values
    bumped = torch.nextafter(values.to(dtype), torch.tensor(float("inf"), dtype=dtype)).float()
    return torch.where(too_small, bumped, rounded)


def projection_cat(
    weights: list[torch.Tensor],
    q4s: list[Q4Groups | None],
    dtype: torch.dtype,
    device: torch.device,
    bias: torch.Tensor | None = None,
    packed: bool = False,
) -> Projection:
    """Several projections of the same input side by side (q|k|v, gate|up): one matmul."""
    weight = torch.cat(weights)
    q4 = concat_q4(q4s) if all(q is not None for q in q4s) else None
    return projection(weight, dtype, device, q4, bias, packed)
