"""The Llama-family network (Llama 2/3, SmolLM2, Qwen2) over a paged KV cache.

One forward pass takes a flat batch of tokens from many sequences (prefill chunks and
decodes mixed): every linear layer sees all of them at once; only attention needs to know
which token belongs to which sequence, and that comes from `AttentionBatch`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from model.config import ModelConfig, UnsupportedModelError
from model.dequantize import Q4Groups, concat_q4
from model.linear import Projection, packed_kernels_available, projection_cat
from model.native import decode_attention, decode_attention_available
from model.native_step import LayerSource, NativeStep, layer_matrix_names

BLOCK_SIZE = 16
# Beside AMX (bfloat16 matrix units) prompt chunks go through torch, whose bfloat16
# matmuls beat the native step's integer products on many rows, and decodes go native
# however many there are: 32 requests of `assistant bench engine` (b) took 136-151 tok/s
# with only up to 4 decodes native, 165-188 with all of them. Elsewhere every token of every
# step goes native, prompt chunks included.


def rope_inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """Per-pair rotation frequencies, with HF-style `rope_scaling` (default, linear, llama3)."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = config.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        return _llama3_frequencies(inv_freq, scaling)
    raise UnsupportedModelError(
        f"RoPE scaling '{kind}' is not supported; use a model with default, linear or llama3 RoPE."
    )


def _llama3_frequencies(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    # Long wavelengths are slowed down by `factor`, short ones kept, the band between blended.
    factor = scaling["factor"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_len = scaling.get("original_max_position_embeddings", 8192)
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, blended, scaled)


@dataclass(slots=True)
class PrefillSpan:
    """One sequence's run of new tokens (a prompt chunk) inside the flat batch."""

    start: int  # offset of its first new token in the flat batch
    length: int  # number of new tokens
    context: int  # tokens already in the cache before this chunk
    # Cache slots of all context + length positions, and the causal mask [length, context +
    # length] over them; both None when the chunk starts the sequence (context == 0).
    slots: torch.Tensor | None
    mask: torch.Tensor | None = None


@dataclass(slots=True)
class AttentionBatch:
    """Where each token's K/V goes, and what each query may attend to.

    Decode tokens (one new token per sequence) come first in the flat batch and are handled
    together as one padded batch; prefill spans follow, one attention call each.
    """

    slot_mapping: torch.Tensor  # [T] cache slot (block * BLOCK_SIZE + offset) for each new token
    num_decodes: int = 0
    # Each decode's context is read whole blocks at a time: [D * W] block ids (W = blocks of
    # the longest context, shorter tables padded) and [D, 1, 1, W * BLOCK_SIZE], True where
    # the position is part of that sequence's context (None when every position is).
    decode_blocks: torch.Tensor | None = None
    decode_mask: torch.Tensor | None = None
    prefills: tuple[PrefillSpan, ...] = ()
    decode_context: DecodeContext | None = None
    # For the native decode kernel instead of all the above: [D, max_blocks] block tables
    # and [D] context lengths (the new token's included), read straight from the cache.
    decode_tables: torch.Tensor | None = None
    decode_lengths: torch.Tensor | None = None
    # For the native step: every token's sequence's block table [T, max_blocks] and the
    # positions it attends to [T] (its own included: position + 1).
    row_tables: torch.Tensor | None = None
    row_lengths: torch.Tensor | None = None


@dataclass(slots=True)
class DecodeContext:
    """Per layer padded copies of the decoding sequences' K/V, [>= D, n_kv, capacity, hd],
    kept across steps: while the same sequences keep decoding, a step only appends its new
    token instead of gathering every context from the paged cache again in every layer
    (that gather moved more bytes than the weights themselves)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    # Rows before `fresh_from` continue from the last step and only get their new token (at
    # `positions`); the others (new to the batch, or moved) copy their whole context from
    # the paged cache, whose block ids are then `AttentionBatch.decode_blocks`.
    fresh_from: int
    positions: torch.Tensor  # [fresh_from]


class KVCache:
    """Per layer K and V tensors of shape [num_blocks, BLOCK_SIZE, n_kv_heads, head_dim]."""

    def __init__(
        self, config: ModelConfig, num_blocks: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        shape = (num_blocks, BLOCK_SIZE, config.num_key_value_heads, config.head_dim)
        self.num_blocks = num_blocks
        self.keys = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)
        ]
        self.values = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)
        ]

    @staticmethod
    def bytes_per_block(config: ModelConfig, dtype: torch.dtype) -> int:
        per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim
        return per_token * BLOCK_SIZE * torch.tensor([], dtype=dtype).element_size()


@dataclass(slots=True)
class LayerWeights:
    input_norm: torch.Tensor
    qkv: Projection  # q, k and v projections side by side: one matmul instead of three
    out: Projection
    post_norm: torch.Tensor
    gate_up: Projection  # gate and up projections side by side
    down: Projection


@dataclass(slots=True)
class _WeightSource:
    """The HF-named float32 weights (and the file's Q4 codes) the model is built from."""

    weights: dict[str, torch.Tensor]
    q4: dict[str, Q4Groups]
    dtype: torch.dtype
    device: torch.device
    packed: bool

    def raw(self, name: str) -> torch.Tensor:
        if name not in self.weights:
            raise UnsupportedModelError(f"The weights have no tensor '{name}'.")
        return self.weights[name]

    def take(self, name: str) -> torch.Tensor:
        return self.raw(name).to(device=self.device, dtype=self.dtype).contiguous()

    def projection(self, names: list[str], bias: list[str] | None = None) -> Projection:
        return projection_cat(
            [self.raw(n) for n in names],
            [self.q4.get(n) for n in names],
            self.dtype,
            self.device,
            bias=torch.cat([self.raw(b) for b in bias]) if bias else None,
            packed=self.packed,
        )


def _lm_head_name(config: ModelConfig, weights: dict[str, torch.Tensor]) -> str:
    untied = "lm_head.weight" in weights and not config.tie_word_embeddings
    return "lm_head.weight" if untied else "model.embed_tokens.weight"


def _layer(src: _WeightSource, i: int, attention_bias: bool) -> LayerWeights:
    p = f"model.layers.{i}."
    attn = p + "self_attn."
    bias = [attn + f"{n}_proj.bias" for n in "qkv"] if attention_bias else None
    return LayerWeights(
        input_norm=src.take(p + "input_layernorm.weight"),
        qkv=src.projection([attn + f"{n}_proj.weight" for n in "qkv"], bias),
        out=src.projection([attn + "o_proj.weight"]),
        post_norm=src.take(p + "post_attention_layernorm.weight"),
        gate_up=src.projection([p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]),
        down=src.projection([p + "mlp.down_proj.weight"]),
    )


class LlamaModel:
    """The network as plain tensors; `forward` is the whole computation of one step."""

    def __init__(
        self,
        config: ModelConfig,
        weights: dict[str, torch.Tensor],
        device: torch.device,
        dtype: torch.dtype,
        q4: dict[str, Q4Groups] | None = None,
        packed: bool = False,
        native: bool = False,
    ) -> None:
        """`q4`: the file's 4-bit codes by HF name; `packed`: also keep packed copies of the
        projections for few-row products (see model/linear.py; bfloat16 on the CPU only);
        `native`: run steps as one native call (model/native_step.py; the caller
        checked `native_step_supported`)."""
        self.config = config
        self.device = device
        self.dtype = dtype
        self.packed = packed
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.eps = config.rms_norm_eps
        # The C decode-attention kernel (model/native.py) where it runs; SDPA otherwise.
        group = self.n_heads // self.n_kv
        self.native_decode = decode_attention_available(device, dtype, self.head_dim, group)
        src = _WeightSource(weights, q4 or {}, dtype, device, packed)
        self.embed = src.take("model.embed_tokens.weight")
        self.final_norm = src.take("model.norm.weight")
        self.lm_head = src.projection([_lm_head_name(config, weights)])
        self.layers = [
            _layer(src, i, config.attention_bias) for i in range(config.num_hidden_layers)
        ]
        self._init_rope()
        self.native_step = self._native_step(src) if native else None
        # Prompt chunks go native too, except beside AMX (see the top of this file).
        self.native_prefill = not packed_kernels_available(device, dtype)

    def _init_rope(self) -> None:
        # Tables computed once in float64 then cast: cos/sin for every position, both halves.
        inv_freq = rope_inverse_frequencies(self.config)
        positions = torch.arange(self.config.max_position_embeddings, dtype=torch.float64)
        angles = torch.outer(positions, inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.rope_cos = angles.cos().to(device=self.device, dtype=self.dtype)
        self.rope_sin = angles.sin().to(device=self.device, dtype=self.dtype)

    def _native_step(self, src: _WeightSource) -> NativeStep:
        layers = []
        for i in range(self.config.num_hidden_layers):
            q4 = {
                k: concat_q4([src.q4[n] for n in v])
                for k, v in layer_matrix_names(self.config, i).items()
            }
            p = f"model.layers.{i}."
            bias = None
            if self.config.attention_bias:
                bias = torch.cat([src.raw(p + f"self_attn.{n}_proj.bias") for n in "qkv"])
            layers.append(
                LayerSource(
                    src.raw(p + "input_layernorm.weight"),
                    src.raw(p + "post_attention_layernorm.weight"),
                    q4["qkv"],
                    bias,
                    q4["o"],
                    q4["gate_up"],
                    q4["down"],
                )
            )
        return NativeStep(
            self.config,
            layers,
            self.embed,
            src.raw("model.norm.weight"),
            src.raw(_lm_head_name(self.config, src.weights)),
            rope_inverse_frequencies(self.config),
        )

    def new_cache(self, num_blocks: int) -> KVCache:
        return KVCache(self.config, num_blocks, self.dtype, self.device)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        batch: AttentionBatch,
        cache: KVCache,
        logits_indices: torch.Tensor,
    ) -> torch.Tensor:
        """Logits [len(logits_indices), vocab] (float32) for the chosen positions of the batch."""
        if int(positions.max()) >= self.config.max_position_embeddings:
            raise ValueError(
                f"Position {int(positions.max())} is beyond the model's context window "
                f"of {self.config.max_position_embeddings} tokens."
            )
        if self._native_serves(batch):
            return self._native_forward(input_ids, positions, batch, cache, logits_indices)
        return self._torch_forward(input_ids, positions, batch, cache, logits_indices)

    def _native_forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        batch: AttentionBatch,
        cache: KVCache,
        logits_indices: torch.Tensor,
    ) -> torch.Tensor:
        def native(rows: slice, wanted: torch.Tensor) -> torch.Tensor:
            return self.native_step(
                cache.keys,
                cache.values,
                input_ids[rows],
                positions[rows],
                batch.slot_mapping[rows],
                batch.row_tables[rows],
                batch.row_lengths[rows],
                wanted,
            )

        if self.native_prefill or not batch.prefills:
            return native(slice(None), logits_indices)
        # Decodes go native even beside prefill chunks: each token then takes the same path
        # whatever else is in the step, and a request's output does not depend on its batch.
        d = batch.num_decodes
        spans = tuple(replace(span, start=span.start - d) for span in batch.prefills)
        rest = AttentionBatch(slot_mapping=batch.slot_mapping[d:], prefills=spans)
        of_prefills = logits_indices >= d
        out = torch.empty(len(logits_indices), self.config.vocab_size, dtype=torch.float32)
        out[~of_prefills] = native(slice(0, d), logits_indices[~of_prefills])
        out[of_prefills] = self._torch_forward(
            input_ids[d:], positions[d:], rest, cache, logits_indices[of_prefills] - d
        )
        return out

    def _torch_forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        batch: AttentionBatch,
        cache: KVCache,
        logits_indices: torch.Tensor,
    ) -> torch.Tensor:
        cos = self.rope_cos[positions].unsqueeze(1)
        sin = self.rope_sin[positions].unsqueeze(1)
        # The residual stream stays in float32 whatever the compute dtype: summed over every
        # layer in bfloat16 it drifts by whole logits; only the projections' inputs are cast.
        x = self.embed[input_ids].float()
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.input_norm, self.eps)
            h = self._attention(h, layer, cos, sin, batch, cache, i)
            x = x + h
            h = rms_norm(x, layer.post_norm, self.eps)
            gate, up = layer.gate_up(h).chunk(2, dim=-1)
            x = x + layer.down(F.silu(gate) * up)
        x = rms_norm(x[logits_indices], self.final_norm, self.eps)
        return self.lm_head(x).float()

    def _native_serves(self, batch: AttentionBatch) -> bool:
        """Whether the step runs native (beside AMX: its decodes, the rest through torch)."""
        if self.native_step is None or batch.row_tables is None:
            return False
        return self.native_prefill or batch.num_decodes > 0

    def _attention(
        self,
        x: torch.Tensor,
        layer: LayerWeights,
        cos: torch.Tensor,
        sin: torch.Tensor,
        batch: AttentionBatch,
        cache: KVCache,
        i: int,
    ) -> torch.Tensor:
        n = x.shape[0]
        k_cache, v_cache = cache.keys[i], cache.values[i]
        hd, nh, nkv = self.head_dim, self.n_heads, self.n_kv
        qkv = layer.qkv(x).view(n, nh + 2 * nkv, hd)
        qk = apply_rope(qkv[:, : nh + nkv], cos, sin)  # q and k heads rotated in one go
        q, k, v = qk[:, :nh], qk[:, nh:], qkv[:, nh + nkv :]
        flat_k = k_cache.view(-1, nkv, hd)
        flat_v = v_cache.view(-1, nkv, hd)
        flat_k.index_copy_(0, batch.slot_mapping, k)
        flat_v.index_copy_(0, batch.slot_mapping, v)
        out = q.new_empty(q.shape)  # contiguous, whatever q's strides
        if batch.num_decodes:
            d = batch.num_decodes
            if batch.decode_lengths is not None:
                out[:d] = self._native_decode(q[:d], k_cache, v_cache, batch)
            elif batch.decode_context is None:
                out[:d] = self._decode_attention(q[:d], k_cache, v_cache, batch)
            else:
                out[:d] = self._decode_in_context(q[:d], k[:d], v[:d], k_cache, v_cache, batch, i)
        for span in batch.prefills:
            rows = slice(span.start, span.start + span.length)
            out[rows] = self._prefill_attention(q[rows], k[rows], v[rows], flat_k, flat_v, span)
        return layer.out(out.view(n, nh * hd))

    def _native_decode(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: AttentionBatch
    ) -> torch.Tensor:
        tables, lengths = batch.decode_tables, batch.decode_lengths
        out = decode_attention(q.contiguous(), k_cache, v_cache, tables, lengths)
        if out is None:  # sizes were checked when the model was built; lengths by the runner
            raise RuntimeError("the native decode-attention kernel refused its inputs")
        return out

    def _decode_attention(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: AttentionBatch
    ) -> torch.Tensor:
        d = batch.num_decodes
        keys = k_cache.index_select(0, batch.decode_blocks).view(d, -1, self.n_kv, self.head_dim)
        values = v_cache.index_select(0, batch.decode_blocks).view(d, -1, self.n_kv, self.head_dim)
        # One query per sequence: fold each KV head's group of query heads into the query
        # axis ([D, n_kv, group, hd]) so keys and values are used as stored, never repeated.
        group = self.n_heads // self.n_kv
        out = F.scaled_dot_product_attention(
            q.view(d, self.n_kv, group, -1),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=batch.decode_mask,
        )
        return out.reshape(d, self.n_heads, -1)

    def _decode_in_context(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        batch: AttentionBatch,
        i: int,
    ) -> torch.Tensor:
        d, ctx = batch.num_decodes, batch.decode_context
        keys, values = ctx.keys[i][:d], ctx.values[i][:d]
        width = batch.decode_mask.shape[-1]
        f = ctx.fresh_from
        if f < d:
            shape = (d - f, width, self.n_kv, self.head_dim)
            blocks = batch.decode_blocks
            keys[f:, :, :width] = k_cache.index_select(0, blocks).view(shape).transpose(1, 2)
            values[f:, :, :width] = v_cache.index_select(0, blocks).view(shape).transpose(1, 2)
        if f:
            rows = torch.arange(f, device=k.device)
            keys[rows, :, ctx.positions] = k[:f]
            values[rows, :, ctx.positions] = v[:f]
        group = self.n_heads // self.n_kv
        out = F.scaled_dot_product_attention(
            q.view(d, self.n_kv, group, -1),
            keys[:, :, :width],
            values[:, :, :width],
            attn_mask=batch.decode_mask,
        )
        return out.reshape(d, self.n_heads, -1)

    def _prefill_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        flat_k: torch.Tensor,
        flat_v: torch.Tensor,
        span: PrefillSpan,
    ) -> torch.Tensor:
        mask = None
        if span.context:
            # Earlier chunks are in the cache: attend to them plus this chunk, causally.
            k = flat_k.index_select(0, span.slots)
            v = flat_v.index_select(0, span.slots)
            mask = span.mask
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0),
            k.transpose(0, 1).unsqueeze(0),
            v.transpose(0, 1).unsqueeze(0),
            attn_mask=mask,
            is_causal=mask is None,
            enable_gqa=True,
        )
        return out.squeeze(0).transpose(0, 1)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalised in float32, as the reference does, then scaled in the weight's dtype (the
    compute dtype), so a float32 residual stream feeds bfloat16 projections."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(weight.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each head's two halves (HF's rotate_half layout) by the position's angles."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
