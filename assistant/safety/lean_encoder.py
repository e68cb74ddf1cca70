"""The first layers of the bundled MiniLM (BERT) encoder as one plain forward pass.

The classifier reads token states from a few encoder layers, once per text, and its latency
budget is a few milliseconds on one CPU thread. The Hugging Face module spends much of that
on dispatch and on oneDNN re-planning every new sequence length; this forward fuses Q/K/V
into one matrix, pads lengths to a multiple of `LENGTH_STEP` (a handful of shapes, planned
once at load), and runs in bfloat16 where the CPU multiplies it natively (AMX or
AVX512-BF16) or on CUDA. Elsewhere it stays float32. The bfloat16 states match float32 to a
cosine of about 0.9999, so a head trained with either reads the other.

On a bfloat16 CPU the weights are also packed once into oneDNN's blocked layout (plain
`F.linear` repacks them on every call) and GELU is fused into the up-projection: together
about 15% of the forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from model.linear import cpu_has_bf16

# Token counts are rounded up to this step: fewer distinct shapes to plan and cache.
LENGTH_STEP = 16
# Rows per matrix product the packed weights are laid out for (about one 500-character text).
_PACK_ROWS = 128


def compute_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 where the hardware multiplies it natively, else float32."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if cpu_has_bf16() else torch.float32


class _Linear:
    """y = x W^T + b, optionally followed by exact GELU; packed for oneDNN where that pays."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, gelu: bool = False) -> None:
        self.bias, self.gelu = bias, gelu
        # oneDNN packs bfloat16 only on CPUs that multiply it (elsewhere it raises); a forced
        # bfloat16 encoder on another CPU runs plain products.
        self.packed = (
            weight.device.type == "cpu"
            and weight.dtype == torch.bfloat16
            and torch.backends.mkldnn.is_available()
            and cpu_has_bf16()
        )
        self.weight = (
            torch.ops.mkldnn._reorder_linear_weight(weight, _PACK_ROWS) if self.packed else weight
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            attr, algorithm = ("gelu", "none") if self.gelu else ("none", "")
            return torch.ops.mkldnn._linear_pointwise(
                x, self.weight, self.bias, attr, [], algorithm
            )
        y = F.linear(x, self.weight, self.bias)
        return F.gelu(y) if self.gelu else y


@dataclass(slots=True)
class _Layer:
    qkv: _Linear
    out: _Linear
    ln1: tuple[torch.Tensor, torch.Tensor]
    up: _Linear  # with GELU
    down: _Linear
    ln2: tuple[torch.Tensor, torch.Tensor]


class LeanEncoder:
    """Token states of the first `layers` layers of a BertModel; weights copied, not shared."""

    def __init__(
        self, bert, tokenizer, layers: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        config = bert.config
        self.tokenizer = tokenizer
        assert config.hidden_act == "gelu" and config.position_embedding_type == "absolute"
        self.device, self.dtype = device, dtype
        self.heads = config.num_attention_heads
        self.eps = config.layer_norm_eps
        self.max_positions = config.max_position_embeddings

        def take(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(device=device, dtype=dtype).contiguous()

        emb = bert.embeddings
        self.word = take(emb.word_embeddings.weight)
        # Token type is always 0 for a single segment: fold it into the positions.
        self.position = take(emb.position_embeddings.weight + emb.token_type_embeddings.weight[0])
        self.ln0 = (take(emb.LayerNorm.weight), take(emb.LayerNorm.bias))
        blocks = bert.encoder.layer[:layers] if layers else bert.encoder.layer
        self.layers = [self._layer(block, take) for block in blocks]

    @staticmethod
    def _layer(block, take) -> _Layer:
        att = block.attention
        q, k, v = att.self.query, att.self.key, att.self.value

        def linear(dense, gelu: bool = False) -> _Linear:
            return _Linear(take(dense.weight), take(dense.bias), gelu)

        return _Layer(
            qkv=_Linear(
                take(torch.cat([q.weight, k.weight, v.weight])),
                take(torch.cat([q.bias, k.bias, v.bias])),
            ),
            out=linear(att.output.dense),
            ln1=(take(att.output.LayerNorm.weight), take(att.output.LayerNorm.bias)),
            up=linear(block.intermediate.dense, gelu=True),
            down=linear(block.output.dense),
            ln2=(take(block.output.LayerNorm.weight), take(block.output.LayerNorm.bias)),
        )

    def warm_up(self, max_tokens: int) -> None:
        """Run each padded length once so the kernels for it are planned before a request."""
        for length in range(LENGTH_STEP, max_tokens + 1, LENGTH_STEP):
            ids = torch.zeros((1, length), dtype=torch.long)
            self(ids, torch.ones_like(ids))

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[batch, tokens] ids and mask -> [batch, tokens, hidden] float32 states on the CPU."""
        batch, tokens = input_ids.shape
        padded = min(math.ceil(tokens / LENGTH_STEP) * LENGTH_STEP, self.max_positions)
        ids = F.pad(input_ids, (0, padded - tokens)).to(self.device)
        mask = F.pad(attention_mask, (0, padded - tokens)).to(self.device).bool()
        with torch.inference_mode():
            x = self.word[ids] + self.position[:padded]
            x = F.layer_norm(x, x.shape[-1:], *self.ln0, self.eps)
            # Padding keys are never attended to; a sequence without padding needs no mask.
            keys = None if bool(mask.all()) else mask[:, None, None, :]
            for layer in self.layers:
                x = self._block(x, layer, keys)
            return x[:, :tokens].float().cpu()

    def _block(self, x: torch.Tensor, p: _Layer, keys: torch.Tensor | None) -> torch.Tensor:
        batch, tokens, hidden = x.shape
        q, k, v = p.qkv(x).view(batch, tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=keys)
        att = att.transpose(1, 2).reshape(batch, tokens, hidden)
        x = F.layer_norm(p.out(att) + x, (hidden,), *p.ln1, self.eps)
        return F.layer_norm(p.down(p.up(x)) + x, (hidden,), *p.ln2, self.eps)
