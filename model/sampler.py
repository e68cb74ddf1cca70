"""Turn a step's logits into one token per request.

Order of processing for each row (the same order as HF transformers and vLLM):
penalties -> grammar mask -> temperature -> top-k -> top-p -> min-p -> draw.
Greedy rows (temperature 0) take the argmax after penalties and the grammar mask.

The reported logprob is that of the chosen token under the model's raw distribution
(log-softmax of the logits before penalties, grammar, temperature and truncation), as vLLM
reports by default: it says how likely the model found the token, whatever the constraints.

Every row is drawn with its own `torch.Generator` on the logits' device, so a seeded request
produces the same tokens whatever else shares its batch.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from model.params import SamplingParams

if TYPE_CHECKING:
    from model.grammar import GrammarMatcher


@dataclass(slots=True)
class SampledToken:
    token_id: int
    logprob: float | None


class RequestSampler:
    """Per-request state: the RNG, the token counts the penalties need, the grammar matcher."""

    def __init__(
        self,
        params: SamplingParams,
        prompt_token_ids: list[int],
        vocab_size: int,
        device: torch.device,
        matcher: GrammarMatcher | None = None,
    ) -> None:
        self.params = params
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.matcher = matcher
        self.generator = torch.Generator(device=self.device)
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        self.generator.manual_seed(seed)
        self.output_token_ids: list[int] = []
        # Penalty state lives on the device; new tokens are batched into it lazily.
        self._seen: torch.Tensor | None = None  # prompt + output, for repetition_penalty
        self._counts: torch.Tensor | None = None  # output only, for presence/frequency
        self._pending: list[int] = []
        if params.repetition_penalty != 1.0:
            self._seen = torch.zeros(vocab_size, dtype=torch.bool, device=self.device)
            self._mark_seen(prompt_token_ids)
        if params.presence_penalty != 0.0 or params.frequency_penalty != 0.0:
            self._counts = torch.zeros(vocab_size, dtype=torch.float32, device=self.device)

    def accept(self, token_id: int) -> None:
        """Record the token the engine appended to this request (sampled or forced)."""
        self.output_token_ids.append(token_id)
        if self._seen is not None or self._counts is not None:
            self._pending.append(token_id)
        if self.matcher is not None and not self.matcher.accept_token(token_id):
            raise ValueError(f"token {token_id} is not allowed by the request's grammar")

    @property
    def grammar_terminated(self) -> bool:
        return self.matcher is not None and self.matcher.is_terminated()

    def apply_penalties(self, row: torch.Tensor) -> None:
        """Penalise `row` (one request's logits, [V]) in place."""
        self._flush_pending()
        p = self.params
        if self._seen is not None:
            # HF: shrink positive logits and grow negative ones of every seen token.
            penalised = torch.where(row > 0, row / p.repetition_penalty, row * p.repetition_penalty)
            row.copy_(torch.where(self._seen, penalised, row))
        if self._counts is not None:
            # OpenAI: logit -= count * frequency + (count > 0) * presence.
            row -= self._counts * p.frequency_penalty
            row -= (self._counts > 0).to(row.dtype) * p.presence_penalty

    def _mark_seen(self, token_ids: list[int]) -> None:
        ids = [t for t in token_ids if 0 <= t < self.vocab_size]
        if ids and self._seen is not None:
            self._seen[torch.tensor(ids, device=self.device)] = True

    def _flush_pending(self) -> None:
        if not self._pending:
            return
        self._mark_seen(self._pending)
        if self._counts is not None:
            ids = torch.tensor(
                [t for t in self._pending if 0 <= t < self.vocab_size],
                dtype=torch.long,
                device=self.device,
            )
            self._counts.index_add_(0, ids, torch.ones_like(ids, dtype=torch.float32))
        self._pending.clear()


def sample(logits: torch.Tensor, samplers: list[RequestSampler]) -> list[SampledToken]:
    """One token per row of `logits` ([B, V], row i belongs to samplers[i])."""
    if logits.dim() != 2 or logits.shape[0] != len(samplers):
        raise ValueError(
            f"logits must be [batch, vocab] with one row per sampler; got shape "
            f"{tuple(logits.shape)} for {len(samplers)} samplers"
        )
    raw = logits.float()
    logprob_rows = [i for i, s in enumerate(samplers) if s.params.logprobs]
    raw_logprobs = torch.log_softmax(raw[logprob_rows], dim=-1) if logprob_rows else None
    work = raw.clone()
    for i, s in enumerate(samplers):
        if s.params.has_penalties:
            s.apply_penalties(work[i])
    constrained = [i for i, s in enumerate(samplers) if s.matcher is not None]
    if constrained:
        from model.grammar import apply_grammar_masks

        apply_grammar_masks(work, constrained, [samplers[i].matcher for i in constrained])
    chosen = _choose(work, samplers)
    logprob_of = dict(zip(logprob_rows, range(len(logprob_rows)), strict=True))
    chosen_list = chosen.tolist()
    result = []
    for i, token in enumerate(chosen_list):
        logprob = None
        if raw_logprobs is not None and i in logprob_of:
            logprob = float(raw_logprobs[logprob_of[i], token])
        result.append(SampledToken(token_id=token, logprob=logprob))
    return result


def _choose(work: torch.Tensor, samplers: list[RequestSampler]) -> torch.Tensor:
    """Token id per row: argmax for greedy rows, a seeded draw for the others."""
    chosen = work.argmax(dim=-1)
    random_rows = [i for i, s in enumerate(samplers) if not s.params.greedy]
    if not random_rows:
        return chosen
    rows = torch.tensor(random_rows, device=work.device)
    params = [samplers[i].params for i in random_rows]
    temperature = torch.tensor([p.temperature for p in params], device=work.device)
    probs = truncated_probs(work[rows] / temperature[:, None], params)
    # One uniform per row from the row's own generator: the draw never depends on the batch.
    uniforms = torch.cat(
        [torch.rand(1, generator=samplers[i].generator, device=work.device) for i in random_rows]
    )
    chosen[rows] = draw(probs, uniforms)
    return chosen


def truncated_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Softmax of temperature-scaled `logits` [N, V] after top-k, top-p and min-p, renormalised."""
    logits = logits.clone()
    if any(p.top_k > 0 for p in params):
        _top_k(logits, [p.top_k for p in params])
    probs = torch.softmax(logits, dim=-1)
    if any(p.top_p < 1.0 for p in params):
        top_p = torch.tensor([p.top_p for p in params], device=logits.device)
        probs = _top_p(probs, top_p)
    if any(p.min_p > 0.0 for p in params):
        min_p = torch.tensor([p.min_p for p in params], device=logits.device)
        threshold = probs.max(dim=-1, keepdim=True).values * min_p[:, None]
        probs = torch.where(probs >= threshold, probs, torch.zeros_like(probs))
    return probs / probs.sum(dim=-1, keepdim=True)


def _top_k(logits: torch.Tensor, ks: list[int]) -> None:
    """Keep exactly the k largest logits of each row (k = 0: the whole row), in place."""
    vocab = logits.shape[-1]
    ks = [k if 0 < k < vocab else vocab for k in ks]
    max_k = max(ks)
    if max_k >= vocab and min(ks) >= vocab:
        return
    _, top_idx = logits.topk(max_k, dim=-1)
    k_col = torch.tensor(ks, device=logits.device)[:, None]
    keep_sorted = torch.arange(max_k, device=logits.device)[None, :] < k_col
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, top_idx, keep_sorted)
    logits.masked_fill_(~keep, float("-inf"))


def _top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, per row."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    drop_sorted = mass_before >= top_p[:, None]
    drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
    return probs.masked_fill(drop, 0.0)


def draw(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: the first token whose cumulative probability exceeds u, per row."""
    cdf = probs.cumsum(dim=-1)
    target = uniforms[:, None] * cdf[:, -1:]
    index = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    # u * total can round onto the last bucket edge; never step past the last kept token.
    last_kept = (probs > 0).long().cumsum(dim=-1).argmax(dim=-1)
    return torch.minimum(index, last_kept)
