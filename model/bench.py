"""Engine benchmark: ours against HF transformers `generate()` on the same weights, one run.

(a) single-stream greedy decode tokens/s; (b) aggregate tokens/s of many concurrent requests
against HF static batches and HF single-stream; (c) time to first token of a long prompt,
cold and with its prefix cached; (d) the machine's memory read bandwidth and how close
single-stream decode gets to the limit it sets (weight bytes read per token, in the form
ours reads them: the native step's 4-bit/8-bit tiles, packed copies, or dense floats).
Ours runs in its default dtype and weight format; HF runs in float32 (its default) and, where
the hardware multiplies bfloat16, in bfloat16, and the ratios use whichever is faster. Ours
and the baseline run interleaved in one process, so machine noise hits both alike.

    python -m model.bench [--quick] [--threads N] [--model PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tqdm import tqdm

from model.engine import LLMEngine
from model.linear import cpu_has_bf16
from model.loader import LoadedModel, load_model
from model.params import SamplingParams


@dataclass(slots=True)
class BenchOptions:
    quick: bool = False
    threads: int | None = None
    model_path: str | None = None
    device: str | None = None

    @property
    def single_tokens(self) -> int:
        return 32 if self.quick else 128

    @property
    def batch_requests(self) -> int:
        return 8 if self.quick else 32

    @property
    def batch_tokens(self) -> int:
        return 32 if self.quick else 128

    @property
    def repeats(self) -> int:
        return 1 if self.quick else 2


HF_BATCH_SIZE = 8
PROMPT_RANGE = (100, 600)
TTFT_PROMPT = 1500


@dataclass(slots=True)
class BenchResult:
    device: str
    dtype: str
    weights: str  # "native" (the native decode step), "packed" (4-/8-bit copies) or "dense"
    threads: int
    single_ours_tps: float
    # HF runs in float32 (and bfloat16 where fast); the ratios use its faster dtype.
    single_hf_by_dtype: dict[str, float]
    batch_requests: int
    batch_ours_tps: float
    batch_hf_static_by_dtype: dict[str, float]
    ttft_cold_s: float
    ttft_cached_s: float
    bandwidth_gbs: float
    weight_bytes_per_token: int

    @property
    def single_hf_tps(self) -> float:
        return max(self.single_hf_by_dtype.values())

    @property
    def batch_hf_static_tps(self) -> float:
        return max(self.batch_hf_static_by_dtype.values())

    @property
    def single_ratio(self) -> float:
        return self.single_ours_tps / self.single_hf_tps

    @property
    def batch_vs_hf_single(self) -> float:
        return self.batch_ours_tps / self.single_hf_tps

    @property
    def batch_vs_hf_static(self) -> float:
        return self.batch_ours_tps / self.batch_hf_static_tps

    @property
    def ttft_ratio(self) -> float:
        return self.ttft_cold_s / self.ttft_cached_s

    @property
    def bandwidth_limit_tps(self) -> float:
        return self.bandwidth_gbs * 1e9 / self.weight_bytes_per_token

    @property
    def bandwidth_fraction(self) -> float:
        return self.single_ours_tps / self.bandwidth_limit_tps

    def as_dict(self) -> dict[str, Any]:
        derived = (
            "single_hf_tps", "batch_hf_static_tps", "single_ratio", "batch_vs_hf_single",
            "batch_vs_hf_static", "ttft_ratio", "bandwidth_limit_tps", "bandwidth_fraction",
        )  # fmt: skip
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}

    def report(self) -> str:
        mb = self.weight_bytes_per_token / 1e6
        return "\n".join(
            [
                f"engine benchmark on {self.device} (ours: {self.dtype}, {self.weights} weights; "
                f"{self.threads} threads; HF: the faster of its dtypes)",
                f"(a) single-stream greedy decode: ours {self.single_ours_tps:.1f} tok/s, "
                f"HF generate {_by_dtype(self.single_hf_by_dtype)}, ratio "
                f"{self.single_ratio:.2f}x (target >= 2x)",
                f"(b) {self.batch_requests} concurrent requests: ours "
                f"{self.batch_ours_tps:.1f} tok/s aggregate, HF static batches of "
                f"{HF_BATCH_SIZE} {_by_dtype(self.batch_hf_static_by_dtype)}; ours vs HF "
                "single-stream "
                f"{self.batch_vs_hf_single:.1f}x (target >= 8x), vs HF batched "
                f"{self.batch_vs_hf_static:.1f}x",
                f"(c) TTFT of a {TTFT_PROMPT}-token prompt: cold {self.ttft_cold_s * 1000:.0f} ms, "
                f"prefix cached {self.ttft_cached_s * 1000:.0f} ms, ratio {self.ttft_ratio:.1f}x "
                "(target >= 10x)",
                f"(d) memory read bandwidth {self.bandwidth_gbs:.1f} GB/s, weights {mb:.0f} MB "
                f"read per token -> limit {self.bandwidth_limit_tps:.1f} tok/s; single-stream "
                f"decode reaches {self.bandwidth_fraction:.0%} (target >= 70%)",
            ]
        )


def _by_dtype(rates: dict[str, float]) -> str:
    return ", ".join(f"{rate:.1f} tok/s ({dtype})" for dtype, rate in rates.items())


class _Clock:
    """A `generate()` streamer that only notes when each piece arrives."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def decode_rate(token_times: list[float]) -> float:
    """Tokens per second after the first token (the prefill is not decode)."""
    return (len(token_times) - 1) / (token_times[-1] - token_times[0])


def random_prompt(rng: random.Random, length: int, vocab: int) -> list[int]:
    # Ids above the special tokens: plain text-like tokens, no accidental control tokens.
    return [rng.randrange(100, vocab) for _ in range(length)]


def hf_model_from(loaded: LoadedModel, device: torch.device, dtype: torch.dtype):
    """HF's own Llama/Qwen2 module holding exactly our weights."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    c = loaded.config
    config_cls, model_cls = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }[c.architecture]
    hf_config = config_cls(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta,
        rope_scaling=c.rope_scaling,
        max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=c.tie_word_embeddings,
        attention_bias=c.attention_bias,
    )
    model = model_cls(hf_config)
    missing, unexpected = model.load_state_dict(loaded.weights, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if c.tie_word_embeddings:
        model.tie_weights()
    return model.to(device=device, dtype=dtype).eval()


class EngineBench:
    def __init__(self, loaded: LoadedModel, options: BenchOptions) -> None:
        self.loaded = loaded
        self.options = options
        self.engine = self.new_engine()
        self.device = self.engine.device
        self.dtype = self.engine.options.dtype
        # HF's default float32, and bfloat16 where the hardware multiplies it (elsewhere it is
        # emulated, many times slower than float32: no baseline anyone would run).
        dtypes = [torch.float32]
        if self.device.type == "cuda" or cpu_has_bf16():
            dtypes.append(torch.bfloat16)
        self.hf_models = {
            str(dtype).removeprefix("torch."): hf_model_from(loaded, self.device, dtype)
            for dtype in dtypes
        }
        self.vocab = loaded.config.vocab_size

    def new_engine(self) -> LLMEngine:
        c = self.loaded
        return LLMEngine(c.config, c.weights, c.tokenizer, device=self.options.device, q4=c.q4)

    def single_ours(self, prompt: list[int]) -> float:
        params = SamplingParams(
            max_tokens=self.options.single_tokens, temperature=0.0, ignore_eos=True
        )
        self.engine.add_request(prompt, params)
        times = []
        while self.engine.has_unfinished():
            if self.engine.step():
                times.append(time.perf_counter())
        return decode_rate(times)

    @torch.inference_mode()
    def single_hf(self, prompt: list[int], dtype: str) -> float:
        clock = _Clock()
        n = self.options.single_tokens
        self.hf_models[dtype].generate(
            torch.tensor([prompt], device=self.device),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            streamer=clock,
            pad_token_id=0,
        )
        return decode_rate(clock.times[1:])  # the first put() is the prompt itself

    def batch_ours(self, prompts: list[list[int]]) -> float:
        engine = self.new_engine()
        params = SamplingParams(
            max_tokens=self.options.batch_tokens, temperature=0.0, ignore_eos=True
        )
        start = time.perf_counter()
        for p in prompts:
            engine.add_request(p, params)
        generated = 0
        while engine.has_unfinished():
            generated += sum(len(d.token_ids) for d in engine.step())
        return generated / (time.perf_counter() - start)

    @torch.inference_mode()
    def batch_hf(self, prompts: list[list[int]], dtype: str) -> float:
        n = self.options.batch_tokens
        start = time.perf_counter()
        generated = 0
        for i in range(0, len(prompts), HF_BATCH_SIZE):
            group = prompts[i : i + HF_BATCH_SIZE]
            width = max(len(p) for p in group)
            ids = torch.tensor([[0] * (width - len(p)) + p for p in group], device=self.device)
            mask = torch.tensor(
                [[0] * (width - len(p)) + [1] * len(p) for p in group], device=self.device
            )
            out = self.hf_models[dtype].generate(
                ids,
                attention_mask=mask,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                pad_token_id=0,
            )
            generated += (out.shape[1] - width) * len(group)
        return generated / (time.perf_counter() - start)

    def ttft(self, prompt: list[int], salt: str) -> float:
        params = SamplingParams(max_tokens=1, temperature=0.0)
        start = time.perf_counter()
        self.engine.add_request(prompt, params, salt=salt)
        while not self.engine.step():
            pass
        return time.perf_counter() - start

    def weight_bytes_per_token(self) -> int:
        """Bytes of every weight a single-sequence decode step reads, in the form it reads
        them (native tiles, packed copies or dense; the embedding: one row only)."""
        model = self.engine.model
        if model.native_step is not None:
            return model.native_step.bytes_per_step + _nbytes(model.embed[0])
        total = model.lm_head.bytes_per_row() + _nbytes(model.final_norm)
        for layer in model.layers:
            total += _nbytes(layer.input_norm) + _nbytes(layer.post_norm)
            total += sum(
                p.bytes_per_row() for p in (layer.qkv, layer.out, layer.gate_up, layer.down)
            )
        return total


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def memory_bandwidth_gbs(device: torch.device, megabytes: int = 512) -> float:
    """Read bandwidth: the best of a few full passes summing a large float32 tensor."""
    data = torch.ones(megabytes * (1 << 20) // 4, dtype=torch.float32, device=device)
    best = float("inf")
    for _ in range(5):
        _sync(device)
        start = time.perf_counter()
        data.sum()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return data.numel() * 4 / best / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(options: BenchOptions) -> BenchResult:
    if options.threads:
        torch.set_num_threads(options.threads)
    loaded = load_model(options.model_path, progress=True)
    bench = EngineBench(loaded, options)
    rng = random.Random(0)
    short = random_prompt(rng, 32, bench.vocab)
    batch = [
        random_prompt(rng, rng.randrange(*PROMPT_RANGE), bench.vocab)
        for _ in range(options.batch_requests)
    ]
    long_prompt = random_prompt(rng, TTFT_PROMPT, bench.vocab)
    dtypes = list(bench.hf_models)
    ours, cold, cached, bandwidth = [], [], [], []
    hf: dict[str, list[float]] = {d: [] for d in dtypes}
    stages = tqdm(
        total=(4 + len(dtypes)) * options.repeats + 3, desc="bench engine", file=sys.stderr
    )
    bench.single_ours(short[:8])  # warm-up: first calls pay for lazy initialisation
    for dtype in dtypes:
        bench.single_hf(short[:8], dtype)
    for r in range(options.repeats):
        ours.append(bench.single_ours(short))
        # Measured right beside the decode it is compared with: the machine's load varies.
        bandwidth.append(memory_bandwidth_gbs(bench.device))
        for dtype in dtypes:
            hf[dtype].append(bench.single_hf(short, dtype))
        cold.append(bench.ttft(long_prompt, salt=f"cold-{r}"))
        cached.append(bench.ttft(long_prompt, salt=f"cold-{r}"))
        stages.update(4 + len(dtypes))
    batch_ours = bench.batch_ours(batch)
    stages.update(1)
    batch_hf = {}
    for dtype in dtypes:
        batch_hf[dtype] = bench.batch_hf(batch, dtype)
        stages.update(1)
    stages.close()
    return BenchResult(
        device=str(bench.device),
        dtype=str(bench.dtype).removeprefix("torch."),
        weights=bench.engine.weight_format,
        threads=torch.get_num_threads(),
        single_ours_tps=max(ours),
        single_hf_by_dtype={d: max(rates) for d, rates in hf.items()},
        batch_requests=len(batch),
        batch_ours_tps=batch_ours,
        batch_hf_static_by_dtype=batch_hf,
        ttft_cold_s=statistics.median(cold),
        ttft_cached_s=statistics.median(cached),
        bandwidth_gbs=max(bandwidth),
        weight_bytes_per_token=bench.weight_bytes_per_token(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer tokens and requests")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--model", default=None, help="GGUF file or HF folder")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    result = run(BenchOptions(args.quick, args.threads, args.model, args.device))
    print(json.dumps(result.as_dict()) if args.json else result.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
