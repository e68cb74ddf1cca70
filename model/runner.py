"""ModelRunner: turns the scheduled sequences of one step into a flat batch and runs it."""

from __future__ import annotations

import math

import torch

from model.llama import (
    BLOCK_SIZE,
    AttentionBatch,
    DecodeContext,
    KVCache,
    LlamaModel,
    PrefillSpan,
)
from model.sequence import ScheduledSeq, Sequence

# Positions of room left after the longest context when the decode copies are (re)allocated,
# so that they last that many steps before growing again.
DECODE_HEADROOM = 128


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: KVCache) -> None:
        self.model = model
        self.cache = cache
        self.device = model.device
        # The decode copies (see DecodeContext) and which sequences, at which lengths, they
        # hold; they may take at most as much memory again as the paged cache.
        self._context_keys: list[torch.Tensor] = []
        self._context_values: list[torch.Tensor] = []
        self._context_seqs: list[Sequence] = []
        self._context_lengths: list[int] = []
        self._context_limit = 2 * sum(t.numel() * t.element_size() for t in cache.keys)

    def run(self, scheduled: list[ScheduledSeq]) -> tuple[torch.Tensor, list[ScheduledSeq]]:
        """Logits [n, vocab] for the entries that reach their last token, and those entries.

        Decodes (one new token) go first in the flat batch so that attention can treat them
        as one padded batch; prefill chunks follow.
        """
        decodes = [s for s in scheduled if s.num_new_tokens == 1]
        prefills = [s for s in scheduled if s.num_new_tokens > 1]
        ordered = decodes + prefills
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        logits_rows: list[int] = []
        sampled: list[ScheduledSeq] = []
        spans: list[PrefillSpan] = []
        for entry in ordered:
            seq, start = entry.seq, entry.seq.num_computed_tokens
            end = start + entry.num_new_tokens
            offset = len(ids)
            ids.extend(seq.token_ids[start:end])
            positions.extend(range(start, end))
            table = seq.block_table
            slots.extend(
                table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(start, end)
            )
            if entry.num_new_tokens > 1:
                spans.append(self._span(offset, entry.num_new_tokens, start, table))
            if entry.needs_logits:
                logits_rows.append(len(ids) - 1)
                sampled.append(entry)
        batch = AttentionBatch(
            slot_mapping=self._tensor(slots), prefills=tuple(spans), num_decodes=len(decodes)
        )
        position_tensor = self._tensor(positions)
        if self.model.native_step is not None:
            self._add_row_tables(batch, ordered, position_tensor)
        elif decodes and self.model.native_decode:
            self._add_decode_tables(batch, decodes)
        elif decodes:
            self._add_decode_context(batch, decodes)
        else:
            self._context_seqs = []
        logits = self.model.forward(
            self._tensor(ids), position_tensor, batch, self.cache, self._tensor(logits_rows)
        )
        return logits, sampled

    def _tensor(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)

    def _span(self, offset: int, length: int, context: int, table: list[int]) -> PrefillSpan:
        if not context:
            return PrefillSpan(offset, length, 0, None)
        rows = torch.arange(length).unsqueeze(1) + context
        mask = torch.arange(context + length).unsqueeze(0) <= rows
        slots = self._slots(table, context + length)
        return PrefillSpan(offset, length, context, slots, mask.to(self.device))

    def _slots(self, table: list[int], length: int) -> torch.Tensor:
        blocks = torch.tensor(table[: -(-length // BLOCK_SIZE)], dtype=torch.long)
        slots = (blocks.unsqueeze(1) * BLOCK_SIZE + torch.arange(BLOCK_SIZE)).flatten()
        return slots[:length].to(self.device)

    def _add_decode_tables(self, batch: AttentionBatch, decodes: list[ScheduledSeq]) -> None:
        """Block tables and lengths for the native kernel, which reads the cache as it is."""
        seqs = [d.seq for d in decodes]
        lengths = [s.num_computed_tokens + 1 for s in seqs]
        batch.decode_tables = _block_tables(seqs, -(-max(lengths) // BLOCK_SIZE))
        batch.decode_lengths = torch.tensor(lengths, dtype=torch.long)

    def _add_row_tables(
        self, batch: AttentionBatch, entries: list[ScheduledSeq], positions: torch.Tensor
    ) -> None:
        """Each token's block table and attended length, for the native step; the decodes'
        rows double as the native decode-attention kernel's tables (torch path)."""
        ends = [e.seq.num_computed_tokens + e.num_new_tokens for e in entries]
        tables = _block_tables([e.seq for e in entries], -(-max(ends) // BLOCK_SIZE))
        counts = torch.tensor([e.num_new_tokens for e in entries])
        batch.row_tables = tables.repeat_interleave(counts, dim=0)
        batch.row_lengths = positions + 1
        if batch.num_decodes:
            batch.decode_tables = batch.row_tables[: batch.num_decodes]
            batch.decode_lengths = batch.row_lengths[: batch.num_decodes]

    def _add_decode_context(self, batch: AttentionBatch, decodes: list[ScheduledSeq]) -> None:
        seqs = [d.seq for d in decodes]
        lengths = [s.num_computed_tokens + 1 for s in seqs]
        width = -(-max(lengths) // BLOCK_SIZE)
        context = self._decode_context(seqs, lengths, width * BLOCK_SIZE)
        batch.decode_context = context
        fresh = 0 if context is None else context.fresh_from
        if fresh < len(seqs):
            batch.decode_blocks = _block_tables(seqs[fresh:], width).flatten().to(self.device)
        if context is not None or min(lengths) != width * BLOCK_SIZE:
            pos = torch.arange(width * BLOCK_SIZE)
            mask = pos.unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
            batch.decode_mask = mask[:, None, None, :].to(self.device)

    def _decode_context(
        self, seqs: list[Sequence], lengths: list[int], width: int
    ) -> DecodeContext | None:
        """The decode copies for this step, or None when they would not fit the memory limit."""
        keys = self._context_keys
        fits = bool(keys) and keys[0].shape[0] >= len(seqs) and keys[0].shape[2] >= width
        if not fits and not self._allocate_context(len(seqs), width + DECODE_HEADROOM):
            self._context_seqs = []
            return None
        fresh_from = 0
        if fits:
            for seq, length, old, old_length in zip(
                seqs, lengths, self._context_seqs, self._context_lengths, strict=False
            ):
                if seq is not old or length != old_length + 1:
                    break
                fresh_from += 1
        self._context_seqs, self._context_lengths = seqs, lengths
        return DecodeContext(
            keys=self._context_keys,
            values=self._context_values,
            fresh_from=fresh_from,
            positions=torch.tensor(lengths[:fresh_from], device=self.device) - 1,
        )

    def _allocate_context(self, rows: int, capacity: int) -> bool:
        # Rows to spare too, so that a batch still filling up does not reallocate every step.
        self._context_keys, self._context_values = [], []
        k = self.cache.keys[0]
        for count in (1 << (rows - 1).bit_length(), rows):
            shape = (count, k.shape[2], capacity, k.shape[3])
            size = 2 * len(self.cache.keys) * math.prod(shape) * k.element_size()
            if size <= self._context_limit:
                break
        else:
            return False
        for _ in self.cache.keys:
            self._context_keys.append(torch.zeros(shape, dtype=k.dtype, device=self.device))
            self._context_values.append(torch.zeros(shape, dtype=k.dtype, device=self.device))
        return True


def _block_tables(seqs: list[Sequence], width: int) -> torch.Tensor:
    """[len(seqs), width] block ids, each table cut or zero-padded to `width` (one tensor
    built from one list: a step does this for every decoding sequence)."""
    rows = [seq.block_table[:width] for seq in seqs]
    return torch.tensor([row + [0] * (width - len(row)) for row in rows], dtype=torch.long)
