"""Turn a step's logits into one token per request.

Order of processing for each row (HF transformers' order):
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

# top-p looks for its kept set among this many most likely tokens before sorting a whole row.
TOP_P_CANDIDATES = 1024


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
        # Penalties touch only the tokens seen so far, never the whole vocabulary.
        self._seen: set[int] | None = None  # prompt + output, for repetition_penalty
        self._counts: dict[int, int] | None = None  # output only, for presence/frequency
        self._penalty_tensors: tuple[torch.Tensor, ...] | None = None  # rebuilt on change
        if params.repetition_penalty != 1.0:
            self._seen = {t for t in prompt_token_ids if 0 <= t < vocab_size}
        if params.presence_penalty != 0.0 or params.frequency_penalty != 0.0:
            self._counts = {}

    def accept(self, token_id: int) -> None:
        """Record the token the engine appended to this request (sampled or forced)."""
        self.output_token_ids.append(token_id)
        if 0 <= token_id < self.vocab_size:
            if self._seen is not None and token_id not in self._seen:
                self._seen.add(token_id)
                self._penalty_tensors = None
            if self._counts is not None:
                self._counts[token_id] = self._counts.get(token_id, 0) + 1
                self._penalty_tensors = None
        if self.matcher is not None and not self.matcher.accept_token(token_id):
            raise ValueError(f"token {token_id} is not allowed by the request's grammar")

    @property
    def grammar_terminated(self) -> bool:
        return self.matcher is not None and self.matcher.is_terminated()

    def apply_penalties(self, row: torch.Tensor) -> None:
        """Penalise `row` (one request's logits, [V]) in place."""
        p = self.params
        seen_ids, count_ids, counts = self._tensors()
        if seen_ids.numel():
            # HF: shrink positive logits and grow negative ones of every seen token.
            values = row[seen_ids]
            row[seen_ids] = torch.where(
                values > 0, values / p.repetition_penalty, values * p.repetition_penalty
            )
        if count_ids.numel():
            # OpenAI: logit -= count * frequency + (count > 0) * presence.
            row[count_ids] -= counts * p.frequency_penalty + p.presence_penalty

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        if self._penalty_tensors is None:
            counts = self._counts or {}
            self._penalty_tensors = (
                torch.tensor(sorted(self._seen or ()), dtype=torch.long, device=self.device),
                torch.tensor(list(counts), dtype=torch.long, device=self.device),
                torch.tensor(list(counts.values()), dtype=torch.float32, device=self.device),
            )
        return self._penalty_tensors


def sample(logits: torch.Tensor, samplers: list[RequestSampler]) -> list[SampledToken]:
    """One token per row of `logits` ([B, V], row i belongs to samplers[i])."""
    if logits.dim() != 2 or logits.shape[0] != len(samplers):
        raise ValueError(
            f"logits must be [batch, vocab] with one row per sampler; got shape "
            f"{tuple(logits.shape)} for {len(samplers)} samplers"
        )
    logprob_rows = [i for i, s in enumerate(samplers) if s.params.logprobs]
    raw_logprobs = torch.log_softmax(logits[logprob_rows].float(), dim=-1) if logprob_rows else None
    work = _processed(logits, samplers)
    chosen = _choose(work, samplers).tolist()
    result = [SampledToken(token_id=token, logprob=None) for token in chosen]
    if raw_logprobs is not None:
        picked = raw_logprobs.gather(
            -1, torch.tensor(chosen, device=logits.device)[logprob_rows, None]
        )
        for i, value in zip(logprob_rows, picked.flatten().tolist(), strict=True):
            result[i].logprob = value
    return result


def _processed(logits: torch.Tensor, samplers: list[RequestSampler]) -> torch.Tensor:
    """float32 logits after penalties and grammar masks; a copy only when something changes."""
    penalised = [i for i, s in enumerate(samplers) if s.params.has_penalties]
    constrained = [i for i, s in enumerate(samplers) if s.matcher is not None]
    if not penalised and not constrained:
        return logits.float()
    work = logits.float().clone()
    for i in penalised:
        samplers[i].apply_penalties(work[i])
    if constrained:
        from model.grammar import apply_grammar_masks

        apply_grammar_masks(work, constrained, [samplers[i].matcher for i in constrained])
    return work


def _choose(work: torch.Tensor, samplers: list[RequestSampler]) -> torch.Tensor:
    """Token id per row: argmax for greedy rows, a seeded draw for the others."""
    chosen = work.argmax(dim=-1)
    random_rows = [i for i, s in enumerate(samplers) if not s.params.greedy]
    if not random_rows:
        return chosen
    rows = torch.tensor(random_rows, device=work.device)
    params = [samplers[i].params for i in random_rows]
    temperature = torch.tensor([p.temperature for p in params], device=work.device)
    weights = _truncated_weights(work[rows] / temperature[:, None], params)
    # One uniform per row from the row's own generator: the draw never depends on the batch.
    uniforms = torch.cat(
        [torch.rand(1, generator=samplers[i].generator, device=work.device) for i in random_rows]
    )
    chosen[rows] = draw(weights, uniforms)
    return chosen


def truncated_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Softmax of temperature-scaled `logits` [N, V] after top-k, top-p and min-p, renormalised."""
    weights = _truncated_weights(logits.clone(), params)
    return weights / weights.sum(dim=-1, keepdim=True)


def _truncated_weights(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Unnormalised probabilities after top-k, top-p and min-p; `logits` may be modified."""
    if any(p.top_k > 0 for p in params):
        _top_k(logits, [p.top_k for p in params])
    probs = torch.softmax(logits, dim=-1)
    nucleus = [i for i, p in enumerate(params) if p.top_p < 1.0]
    if nucleus:
        top_p = torch.tensor([params[i].top_p for i in nucleus], device=logits.device)
        rows = torch.tensor(nucleus, device=logits.device)
        probs[rows] = _top_p(probs[rows], top_p)
    if any(p.min_p > 0.0 for p in params):
        min_p = torch.tensor([p.min_p for p in params], device=logits.device)
        threshold = probs.max(dim=-1, keepdim=True).values * min_p[:, None]
        probs = probs.masked_fill(probs < threshold, 0.0)
    return probs


def _top_k(logits: torch.Tensor, ks: list[int]) -> None:
    """Keep exactly the k largest logits of each row (k = 0: the whole row), in place."""
    vocab = logits.shape[-1]
    ks = [k if 0 < k < vocab else vocab for k in ks]
    if min(ks) >= vocab:
        return
    max_k = max(ks)
    _, top_idx = logits.topk(max_k, dim=-1)
    k_col = torch.tensor(ks, device=logits.device)[:, None]
    keep_sorted = torch.arange(max_k, device=logits.device)[None, :] < k_col
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, top_idx, keep_sorted)
    logits.masked_fill_(~keep, float("-inf"))


def _top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, per row.

    The kept set almost always lies among the few hundred most likely tokens, so look there
    first (a partial sort) and sort the whole row only where it does not.
    """
    candidates = min(TOP_P_CANDIDATES, probs.shape[-1])
    sorted_probs, order = probs.topk(candidates, dim=-1)
    if candidates < probs.shape[-1] and bool((sorted_probs.sum(-1) < top_p).any()):
        sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep_sorted = mass_before < top_p[:, None]
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, keep_sorted)
    return probs.masked_fill(~keep, 0.0)


def draw(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw from unnormalised `weights` [N, V]: the first token whose cumulative
    weight exceeds u * total, per row."""
    cdf = weights.cumsum(dim=-1)
    index = torch.searchsorted(cdf, uniforms[:, None] * cdf[:, -1:], right=True).squeeze(-1)
    overflow = index >= weights.shape[-1]
    if bool(overflow.any()):
        # u * total rounded up onto the total: take the last token with any weight.
        last_kept = (weights > 0).cumsum(dim=-1).argmax(dim=-1)
        index = torch.where(overflow, last_kept, index)
    return index
