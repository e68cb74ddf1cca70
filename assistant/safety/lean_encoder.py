"""The first layers of the bundled MiniLM (BERT) encoder as one plain forward pass.

The classifier reads token states from a few encoder layers, once per text, and its latency
budget is a few milliseconds on one CPU thread. The Hugging Face module spends much of that
on dispatch and on oneDNN re-planning every new sequence length; this forward fuses Q/K/V
into one matrix, pads lengths to a multiple of `LENGTH_STEP` (a handful of shapes, planned
once at load), and runs in bfloat16 on CUDA and on CPUs with AMX. The bfloat16 states
match float32 to a cosine of about 0.9999, so a head trained with either reads the other.

On a bfloat16 CPU the weights are also packed once into oneDNN's blocked layout (plain
`F.linear` repacks them on every call) and GELU is fused into the up-projection: together
about 15% of the forward. On CPUs without AMX the linear layers run as dynamic int8
products (fbgemm: int8 weights per output channel, activations quantised per call,
`int8_pays`): the 3-layer forward of a 500-character text took 14 ms instead of 22 ms in
float32 on an AVX2-only AMD EPYC, and beat bfloat16 by ~3 ms where AVX512-BF16 is native
but AMX is not. Token states stay within a cosine of ~0.98 of float32, their means within
~0.996, and the classifier's decisions on the validation split agree
(test_lean_encoder.py, test_int8.py).

The layer weights come from the MiniLM model, or from a fine-tuned copy of them
(`tuned`, saved by `assistant.safety.finetune`) while the model still provides the
tokenizer and the (frozen) embeddings. `forward` is differentiable and takes a dropout
rate, so fine-tuning trains exactly the network that is served.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from model.linear import cpu_has_amx, cpu_has_bf16

# Token counts are rounded up to this step: fewer distinct shapes to plan and cache.
LENGTH_STEP = 16
# Rows per matrix product the packed weights are laid out for (about one 500-character text).
_PACK_ROWS = 128
_LINEARS = ("qkv", "out", "up", "down")
_NORMS = ("ln1", "ln2")


def compute_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 where the hardware multiplies it natively, else float32."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if cpu_has_bf16() else torch.float32


def int8_pays(device: torch.device) -> bool:
    """Dynamic int8 products on a CPU without AMX, where fbgemm is built in.

    AMX multiplies bfloat16 tiles faster than fbgemm's int8 (the bfloat16 encoder met the
    latency budget there). Without AMX, int8 wins even where bfloat16 is native: on an AMD
    EPYC with AVX512-BF16 and AVX512-VNNI each int8 product of a 144-token text took ~0.6
    of oneDNN's packed bfloat16 one, and a 500-character check 9.6 / 11.1 ms instead of
    12.5 / 14.3 ms (p50 / p95, one thread; `python -m assistant.safety.bench --compare
    bfloat16`).
    """
    return (
        device.type == "cpu"
        and not cpu_has_amx()
        and "fbgemm" in torch.backends.quantized.supported_engines
    )


# How the encoder's products run: "int8" (dynamic, float32 around them), or in a dtype.
PRECISIONS = {"int8": torch.float32, "bfloat16": torch.bfloat16, "float32": torch.float32}


def served_precision(device: torch.device) -> str:
    """What serving runs on `device`: int8 where it pays (`int8_pays`), else bfloat16 where
    native, else float32."""
    if int8_pays(device):
        return "int8"
    return "bfloat16" if compute_dtype(device) == torch.bfloat16 else "float32"


def _int8_pack(weight: torch.Tensor, bias: torch.Tensor):
    """fbgemm's packed form of a float32 [out, in] weight: symmetric int8 per output row."""
    scales = (weight.abs().amax(dim=1).clamp(min=1e-8) / 127).double()
    zeros = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():
        # torch announces the quantised tensor API's retirement; fbgemm's kernels need it today.
        warnings.simplefilter("ignore", UserWarning)
        codes = torch.quantize_per_channel(weight, scales, zeros, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(codes, bias)


class _Linear:
    """y = x W^T + b, optionally followed by exact GELU; packed for oneDNN where that pays."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor, gelu: bool = False, int8: bool = False
    ) -> None:
        self.bias, self.gelu = bias, gelu
        # oneDNN packs bfloat16 only on CPUs that multiply it (elsewhere it raises); a forced
        # bfloat16 encoder on another CPU runs plain products.
        self.packed = (
            weight.device.type == "cpu"
            and weight.dtype == torch.bfloat16
            and torch.backends.mkldnn.is_available()
            and cpu_has_bf16()
        )
        self.int8 = int8 and weight.device.type == "cpu" and weight.dtype == torch.float32
        if self.packed:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, _PACK_ROWS)
        elif self.int8:
            self.weight = _int8_pack(weight, bias)
        else:
            self.weight = weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            attr, algorithm = ("gelu", "none") if self.gelu else ("none", "")
            return torch.ops.mkldnn._linear_pointwise(
                x, self.weight, self.bias, attr, [], algorithm
            )
        if self.int8:
            # Full 8-bit activations (reduce_range=False): AVX2 sums u8*s8 pairs in 16 bits,
            # which can saturate on rare extreme pairs, but measured on these layers 7-bit
            # activations lose far more (token cosine to float32 0.93 vs 0.98 at worst).
            y = torch.ops.quantized.linear_dynamic(x, self.weight, False)
        else:
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


def bert_layer_tensors(bert, layers: int) -> dict[str, torch.Tensor]:
    """The first `layers` layers' weights under the names `LeanEncoder.tensors` uses."""
    out: dict[str, torch.Tensor] = {}
    blocks = bert.encoder.layer[:layers] if layers else bert.encoder.layer
    for i, block in enumerate(blocks):
        att = block.attention
        q, k, v = att.self.query, att.self.key, att.self.value
        parts = {
            "qkv": (torch.cat([q.weight, k.weight, v.weight]), torch.cat([q.bias, k.bias, v.bias])),
            "out": (att.output.dense.weight, att.output.dense.bias),
            "ln1": (att.output.LayerNorm.weight, att.output.LayerNorm.bias),
            "up": (block.intermediate.dense.weight, block.intermediate.dense.bias),
            "down": (block.output.dense.weight, block.output.dense.bias),
            "ln2": (block.output.LayerNorm.weight, block.output.LayerNorm.bias),
        }
        for name, (weight, bias) in parts.items():
            out[f"{i}.{name}.weight"], out[f"{i}.{name}.bias"] = weight, bias
    return out


class LeanEncoder:
    """Token states of the first `layers` layers of a BertModel; weights copied, not shared.

    `tuned` replaces some or all layer weights (names as `tensors()` gives them); `int8`
    runs the linear layers as dynamic int8 products (float32 on the CPU only).
    """

    def __init__(
        self,
        bert,
        tokenizer,
        layers: int,
        device: torch.device,
        dtype: torch.dtype,
        tuned: dict[str, torch.Tensor] | None = None,
        int8: bool = False,
    ) -> None:
        config = bert.config
        self.tokenizer = tokenizer
        assert config.hidden_act == "gelu" and config.position_embedding_type == "absolute"
        self.device, self.dtype = device, dtype
        self.int8 = int8 and device.type == "cpu" and dtype == torch.float32
        self.heads = config.num_attention_heads
        self.eps = config.layer_norm_eps
        self.max_positions = config.max_position_embeddings

        def take(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(device=device, dtype=dtype, copy=True).contiguous()

        emb = bert.embeddings
        self.word = take(emb.word_embeddings.weight)
        # Token type is always 0 for a single segment: fold it into the positions.
        self.position = take(emb.position_embeddings.weight + emb.token_type_embeddings.weight[0])
        self.ln0 = (take(emb.LayerNorm.weight), take(emb.LayerNorm.bias))
        tensors = bert_layer_tensors(bert, layers)
        for name, value in (tuned or {}).items():
            assert tensors[name].shape == value.shape, f"tuned {name}: {tuple(value.shape)}"
            tensors[name] = value
        t = {name: take(value) for name, value in tensors.items()}
        count = len(tensors) // (2 * (len(_LINEARS) + len(_NORMS)))
        self.layers = [
            _Layer(
                qkv=_Linear(t[f"{i}.qkv.weight"], t[f"{i}.qkv.bias"], int8=int8),
                out=_Linear(t[f"{i}.out.weight"], t[f"{i}.out.bias"], int8=int8),
                ln1=(t[f"{i}.ln1.weight"], t[f"{i}.ln1.bias"]),
                up=_Linear(t[f"{i}.up.weight"], t[f"{i}.up.bias"], gelu=True, int8=int8),
                down=_Linear(t[f"{i}.down.weight"], t[f"{i}.down.bias"], int8=int8),
                ln2=(t[f"{i}.ln2.weight"], t[f"{i}.ln2.bias"]),
            )
            for i in range(count)
        ]

    @property
    def precision(self) -> str:
        """The `PRECISIONS` name of how this encoder's products run."""
        if self.int8:
            return "int8"
        return "bfloat16" if self.dtype == torch.bfloat16 else "float32"

    def tensors(self) -> dict[str, torch.Tensor]:
        """The layer weights by name, live (plain, unpacked encoders only): what fine-tuning
        trains and saves."""
        out: dict[str, torch.Tensor] = {}
        for i, layer in enumerate(self.layers):
            for name in _LINEARS:
                linear = getattr(layer, name)
                assert not (linear.packed or linear.int8), "packed weights cannot be trained"
                out[f"{i}.{name}.weight"], out[f"{i}.{name}.bias"] = linear.weight, linear.bias
            for name in _NORMS:
                out[f"{i}.{name}.weight"], out[f"{i}.{name}.bias"] = getattr(layer, name)
        return out

    def warm_up(self, max_tokens: int) -> None:
        """Run each padded length once so the kernels for it are planned before a request."""
        for length in range(LENGTH_STEP, max_tokens + 1, LENGTH_STEP):
            ids = torch.zeros((1, length), dtype=torch.long)
            self(ids, torch.ones_like(ids))

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[batch, tokens] ids and mask -> [batch, tokens, hidden] float32 states on the CPU.

        With int8 products each text runs on its own: their activations are quantised with
        one scale per call, so in a batch a text's states (and its score) would depend on
        the other texts and on the padding. Alone, every text gets what serving gives it.
        Other CPU batches run row by row too when they are mostly padding (`_mostly_padding`).
        """
        if input_ids.shape[0] > 1 and (self.int8 or self._mostly_padding(attention_mask)):
            return self._one_by_one(input_ids, attention_mask)
        batch, tokens = input_ids.shape
        padded = min(math.ceil(tokens / LENGTH_STEP) * LENGTH_STEP, self.max_positions)
        ids = F.pad(input_ids, (0, padded - tokens)).to(self.device)
        mask = F.pad(attention_mask, (0, padded - tokens)).to(self.device)
        with torch.inference_mode():
            return self.forward(ids, mask)[:, :tokens].float().cpu()

    def _mostly_padding(self, attention_mask: torch.Tensor) -> bool:
        """On a CPU the forward's work grows with every row's padded length. A text longer
        than encoder.MAX_TOKENS comes as full segments plus a short last one padded to their
        length (a 360-token text ran 512 token rows). Rows run alone when padding would be
        over a quarter of the batch; a GPU runs the padded batch at once instead."""
        real = int(attention_mask.sum())
        return self.device.type == "cpu" and real < 0.75 * attention_mask.numel()

    def _one_by_one(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((*input_ids.shape, self.word.shape[1]))
        for row, (ids, mask) in enumerate(zip(input_ids, attention_mask, strict=True)):
            real = mask.bool()
            out[row, real] = self(ids[real][None], mask[real][None])[0]
        return out

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, dropout: float = 0.0) -> torch.Tensor:
        """Token states [batch, tokens, hidden] in the compute dtype, differentiable.

        `dropout` (training only) is applied where BERT applies it: attention
        probabilities and each sublayer's output before its residual sum.
        """
        x = self.word[ids] + self.position[: ids.shape[1]]
        x = F.layer_norm(x, x.shape[-1:], *self.ln0, self.eps)
        # Padding keys are never attended to; a sequence without padding needs no mask.
        mask = mask.bool()
        keys = None if bool(mask.all()) else mask[:, None, None, :]
        for layer in self.layers:
            x = self._block(x, layer, keys, dropout)
        return x

    def _block(
        self, x: torch.Tensor, p: _Layer, keys: torch.Tensor | None, dropout: float
    ) -> torch.Tensor:
        batch, tokens, hidden = x.shape
        q, k, v = p.qkv(x).view(batch, tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=dropout)
        att = att.transpose(1, 2).reshape(batch, tokens, hidden)
        x = F.layer_norm(_drop(p.out(att), dropout) + x, (hidden,), *p.ln1, self.eps)
        return F.layer_norm(_drop(p.down(p.up(x)), dropout) + x, (hidden,), *p.ln2, self.eps)


def _drop(x: torch.Tensor, rate: float) -> torch.Tensor:
    return F.dropout(x, rate) if rate else x
