"""A whole forward step as one native call (model/kernels/forward_step.c).

A decode step of a small model on the CPU is bound by two things: the bytes of weights it
streams and the per-operator cost of eager PyTorch (~400 calls per token); a prompt chunk
by the arithmetic of its products. The kernel does the full step (every layer, attention
from the paged cache, the lm_head for the rows that need logits) in one call, with integer
dot products over the model file's own 4-bit codes (AVX-512 VNNI or AVX2). This module
lays the weights out in the kernel's tiles once, at load, and hands it pointers.

It serves models whose layer matrices the file stores as Q4_0/Q4_1, on CPUs with AVX2 and
a C compiler; elsewhere steps take the PyTorch path.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

import torch

from model.config import ModelConfig
from model.dequantize import Q4_GROUP, Q4Groups
from model.native import MAX_GROUP, MAX_HEAD_DIM, kernel_library
from model.thread_choice import ThreadChoice

# Token rows one call takes (the kernel's MAX_ROWS): more than any step's token budget.
MAX_ROWS = 8192

_P = ctypes.c_void_p
_I = ctypes.c_int64


class _Q4Matrix(ctypes.Structure):
    _fields_ = [("tiles", _P), ("bias", _P), ("in_features", _I), ("out_features", _I)]


class _Q8Matrix(ctypes.Structure):
    _fields_ = [("tiles", _P), ("in_features", _I), ("out_features", _I)]


class _Layer(ctypes.Structure):
    _fields_ = [("input_norm", _P), ("post_norm", _P)] + [
        (name, _Q4Matrix) for name in ("qkv", "o", "gate_up", "down")
    ]


class _Model(ctypes.Structure):
    _fields_ = [
        (name, _I)
        for name in (
            "hidden",
            "intermediate",
            "n_heads",
            "n_kv",
            "head_dim",
            "n_layers",
            "vocab",
            "max_position",
            "bf16",
        )
    ] + [
        ("eps", ctypes.c_float),
        ("embed", _P),
        ("final_norm", _P),
        ("inv_freq", _P),
        ("layers", _P),
        ("lm_head", _Q8Matrix),
    ]


def q4_tiles(q4: Q4Groups, tile: int) -> torch.Tensor:
    """[out/tile, in/32, tile * 20] uint8: per `tile` rows and 32 inputs, the codes as the
    kernel's registers hold them (register k, lane r, byte b: code[r][4k+b] |
    code[r][16+4k+b] << 4), then `tile` fp16 scales and `tile` fp16 offsets (w = scale *
    code + offset)."""
    rows, cols = q4.codes.shape
    t, g = rows // tile, cols // Q4_GROUP
    codes = q4.codes.view(t, tile, g, 2, 4, 4)  # [tile, row, group, half, k, b]
    nibbles = codes[:, :, :, 0] | (codes[:, :, :, 1] << 4)  # [tile, row, group, k, b]
    nibbles = nibbles.permute(0, 2, 3, 1, 4).reshape(t, g, 4 * tile * 4)  # [tile, group, k, row, b]

    def per_tile(values: torch.Tensor) -> torch.Tensor:
        halves = values.to(torch.float16).view(t, tile, g).transpose(1, 2).contiguous()
        return halves.view(torch.uint8)  # [tile, group, 2 * tile bytes]

    return torch.cat([nibbles, per_tile(q4.scale), per_tile(q4.offset)], dim=2).contiguous()


def q8_tiles(weight: torch.Tensor, tile: int, offset: int) -> torch.Tensor:
    """[out/tile, in/32, tile * 34] uint8 from a float matrix [out, in], Q8_0-style: one
    scale per 32 inputs (max |w| / 127, in fp16), so a matrix the file stores as Q8_0 gets
    its own codes and scales back exactly. Register k (0..7), lane r, byte b holds
    code[r][4k+b] + `offset` (as a byte); then the `tile` rows' fp16 scales."""
    rows, cols = weight.shape
    t, g = rows // tile, cols // Q4_GROUP
    blocks = weight.float().view(rows, g, Q4_GROUP)
    scale = (blocks.abs().amax(dim=2) / 127).to(torch.float16)  # [rows, g]
    safe = torch.where(scale == 0, torch.ones_like(scale), scale).float().unsqueeze(2)
    codes = torch.round(blocks / safe).clamp(-127, 127).to(torch.int16) + offset
    codes = codes.to(torch.uint8)  # two's complement bytes where offset is 0
    tiles = codes.view(t, tile, g, 8, 4).permute(0, 2, 3, 1, 4).reshape(t, g, 8 * tile * 4)
    scales = scale.view(t, tile, g).transpose(1, 2).contiguous().view(torch.uint8)
    return torch.cat([tiles, scales], dim=2).contiguous()


@dataclass(slots=True)
class LayerSource:
    """One layer's weights as the model file has them."""

    input_norm: torch.Tensor
    post_norm: torch.Tensor
    qkv: Q4Groups
    qkv_bias: torch.Tensor | None
    o: Q4Groups
    gate_up: Q4Groups
    down: Q4Groups


def layer_matrix_names(config: ModelConfig, i: int) -> dict[str, list[str]]:
    """The HF names of layer i's matrices, grouped as the kernel multiplies them."""
    p = f"model.layers.{i}."
    return {
        "qkv": [p + f"self_attn.{n}_proj.weight" for n in "qkv"],
        "o": [p + "self_attn.o_proj.weight"],
        "gate_up": [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"],
        "down": [p + "mlp.down_proj.weight"],
    }


def native_step_supported(
    config: ModelConfig, dtype: torch.dtype, device: torch.device, q4: dict[str, Q4Groups]
) -> bool:
    """Whether the kernel can serve this model here: float32/bfloat16 on a CPU with AVX2, a
    C compiler, every layer matrix stored as 4-bit codes, sizes in whole tiles and groups."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        return False
    heads = config.num_attention_heads * config.head_dim
    kv = config.num_key_value_heads * config.head_dim
    if any(s % Q4_GROUP for s in (config.hidden_size, config.intermediate_size, heads, kv)):
        return False
    if config.head_dim % 2 or config.head_dim > MAX_HEAD_DIM:
        return False
    if config.num_attention_heads // config.num_key_value_heads > MAX_GROUP:
        return False
    names = (
        n
        for i in range(config.num_hidden_layers)
        for group in layer_matrix_names(config, i).values()
        for n in group
    )
    if not all(n in q4 for n in names):
        return False
    library = kernel_library("forward_step")
    if library is None or not library.forward_step_supported():
        return False
    tile = library.step_tile_rows()
    outputs = (config.hidden_size, heads + 2 * kv, config.intermediate_size, config.vocab_size)
    return not any(s % tile for s in outputs)


class NativeStep:
    """The kernel's view of one model: tiles, norms and tables kept alive here."""

    def __init__(
        self,
        config: ModelConfig,
        layers: list[LayerSource],
        embed: torch.Tensor,
        final_norm: torch.Tensor,
        lm_head: torch.Tensor,
        inv_freq: torch.Tensor,
    ) -> None:
        """`embed` [vocab, hidden] in the model's dtype (float32 or bfloat16, the cache's);
        `lm_head` float32 [vocab, hidden]; `inv_freq` the RoPE frequencies [head_dim / 2]
        (scaling applied); norms float32."""
        self.library = kernel_library("forward_step")
        self.tile = self.library.step_tile_rows()
        self.vocab = config.vocab_size
        self._keep: list[torch.Tensor] = []  # everything the kernel points into
        # Weight bytes one step reads whatever its batch: all but the embedding (a row per
        # sequence) and the RoPE frequencies.
        self.bytes_per_step = 0
        layer_array = (_Layer * len(layers))(*(self._layer(src) for src in layers))
        self.model = _Model(
            hidden=config.hidden_size,
            intermediate=config.intermediate_size,
            n_heads=config.num_attention_heads,
            n_kv=config.num_key_value_heads,
            head_dim=config.head_dim,
            n_layers=len(layers),
            vocab=config.vocab_size,
            max_position=config.max_position_embeddings,
            bf16=embed.dtype == torch.bfloat16,
            eps=config.rms_norm_eps,
            embed=self._hold(embed, streamed=False),
            final_norm=self._hold(final_norm.float()),
            inv_freq=self._hold(inv_freq.to(torch.float64), streamed=False),
            layers=ctypes.cast(layer_array, _P),
            lm_head=_Q8Matrix(
                self._hold(q8_tiles(lm_head, self.tile, self.library.step_q8_offset())),
                *lm_head.shape[::-1],
            ),
        )
        self._layers = layer_array
        self._cache_pointers: tuple[object, ctypes.Array, ctypes.Array] | None = None
        self._threads = ThreadChoice()

    def _hold(self, tensor: torch.Tensor, streamed: bool = True) -> int:
        """Keep `tensor` alive for the kernel; `streamed`: read whole by every step."""
        tensor = tensor.contiguous()
        self._keep.append(tensor)
        if streamed:
            self.bytes_per_step += tensor.numel() * tensor.element_size()
        return tensor.data_ptr()

    def _q4(self, q4: Q4Groups, bias: torch.Tensor | None = None) -> _Q4Matrix:
        rows, cols = q4.codes.shape
        bias_ptr = None if bias is None else self._hold(bias.float())
        return _Q4Matrix(self._hold(q4_tiles(q4, self.tile)), bias_ptr, cols, rows)

    def _layer(self, src: LayerSource) -> _Layer:
        return _Layer(
            self._hold(src.input_norm.float()),
            self._hold(src.post_norm.float()),
            self._q4(src.qkv, src.qkv_bias),
            self._q4(src.o),
            self._q4(src.gate_up),
            self._q4(src.down),
        )

    def _caches(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        # Pointer arrays built once per cache: a step passes the same ones again.
        held = self._cache_pointers
        if held is None or held[0] is not keys:
            pointers = [(_P * len(keys))(*(t.data_ptr() for t in ts)) for ts in (keys, values)]
            held = self._cache_pointers = (keys, *pointers)
        return held[1], held[2]

    def __call__(
        self,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        tokens: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        tables: torch.Tensor,
        lengths: torch.Tensor,
        logit_rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Runs token rows through the model, their K/V into the cache, and returns the
        logits [len(logit_rows), vocab] float32 of the rows listed (default: all). int64 CPU
        tensors: tokens, positions, slots and lengths [rows] (lengths: the positions each
        row attends to, its own included), tables [rows, max_blocks] (each row's sequence's
        block table)."""
        rows = tokens.shape[0]
        if not 1 <= rows <= MAX_ROWS:
            raise ValueError(f"the native step takes 1 to {MAX_ROWS} token rows, not {rows}")
        if logit_rows is None:
            logit_rows = torch.arange(rows)
        ints = (tokens, positions, slots, tables, lengths, logit_rows)
        if any(t.dtype != torch.long or not t.is_contiguous() for t in ints):
            raise ValueError("the native step needs contiguous int64 tensors")
        logits = torch.empty(len(logit_rows), self.vocab, dtype=torch.float32)
        k_ptrs, v_ptrs = self._caches(keys, values)
        threads = self._threads.pick(rows, torch.get_num_threads())
        start = time.perf_counter()
        status = self.library.forward_step(
            ctypes.byref(self.model),
            k_ptrs,
            v_ptrs,
            ctypes.c_int64(keys[0].shape[0]),
            ctypes.c_int(rows),
            *(_P(t.data_ptr()) for t in ints[:5]),
            ctypes.c_int(tables.shape[1]),
            _P(logit_rows.data_ptr()),
            ctypes.c_int(len(logit_rows)),
            _P(logits.data_ptr()),
            ctypes.c_int(threads),
        )
        self._threads.record(rows, threads, time.perf_counter() - start)
        if status != 0:
            raise RuntimeError(
                "the native step refused its inputs (a token, position, cache slot, block, "
                "context length or logit row out of range)"
            )
        return logits
