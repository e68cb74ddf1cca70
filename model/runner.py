"""ModelRunner: turns the scheduled sequences of one step into a flat batch and runs it."""

from __future__ import annotations

import torch

from model.llama import BLOCK_SIZE, AttentionBatch, KVCache, LlamaModel, PrefillSpan
from model.sequence import ScheduledSeq


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: KVCache) -> None:
        self.model = model
        self.cache = cache
        self.device = model.device

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
        if decodes:
            self._add_decode_context(batch, decodes)
        logits = self.model.forward(
            self._tensor(ids), self._tensor(positions), batch, self.cache, self._tensor(logits_rows)
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

    def _add_decode_context(self, batch: AttentionBatch, decodes: list[ScheduledSeq]) -> None:
        lengths = [d.seq.num_computed_tokens + 1 for d in decodes]
        width = -(-max(lengths) // BLOCK_SIZE)
        tables = torch.zeros(len(decodes), width, dtype=torch.long)
        for row, d in enumerate(decodes):
            used = d.seq.block_table[:width]
            tables[row, : len(used)] = torch.tensor(used, dtype=torch.long)
        batch.decode_blocks = tables.flatten().to(self.device)
        if min(lengths) != width * BLOCK_SIZE:
            pos = torch.arange(width * BLOCK_SIZE)
            mask = pos.unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
            batch.decode_mask = mask[:, None, None, :].to(self.device)
