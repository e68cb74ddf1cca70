"""The KV block pool: reference counts, prefix caching by chained block hashes, LRU reuse.

A block holds the K/V of BLOCK_SIZE consecutive tokens of one sequence. Once full, it is
named by a hash of its tokens chained with the hash of the block before it (and, at the
root, a salt), so two requests with the same prefix and salt can share it. A freed block
keeps its contents and its name until it is needed for something else, least recently
used first.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

import torch

from model.config import ModelConfig
from model.llama import BLOCK_SIZE, KVCache
from model.sequence import Sequence


def blocks_for(num_tokens: int) -> int:
    return -(-num_tokens // BLOCK_SIZE)


def num_blocks_for_budget(config: ModelConfig, dtype: torch.dtype, memory_bytes: int) -> int:
    """How many blocks fit in `memory_bytes` of K/V memory."""
    count = memory_bytes // KVCache.bytes_per_block(config, dtype)
    if count < 1:
        raise ValueError(
            f"A KV cache budget of {memory_bytes} bytes holds no block of {BLOCK_SIZE} tokens; "
            f"give it at least {KVCache.bytes_per_block(config, dtype)} bytes."
        )
    return int(count)


def root_hash(salt: str | None) -> bytes:
    return b"" if salt is None else hashlib.blake2b(b"salt:" + salt.encode()).digest()


def chain_hash(parent: bytes, tokens: list[int]) -> bytes:
    return hashlib.blake2b(parent + array("q", tokens).tobytes(), digest_size=16).digest()


class BlockPool:
    def __init__(self, num_blocks: int, enable_prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}  # full block's chained hash -> block id
        # Blocks nobody uses, in eviction order (front first). Those with a hash still hold
        # a reusable prefix; those without go to the front so they are reused first.
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.query_tokens = 0
        self.hit_tokens = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by running sequences (the KV usage gauge)."""
        return 1.0 - len(self.free) / self.num_blocks

    def find_cached(self, seq: Sequence) -> list[int]:
        """Blocks already holding a prefix of `seq` (never its last token: it needs logits)."""
        if not self.enable_prefix_caching:
            return []
        full = (seq.num_tokens - 1) // BLOCK_SIZE
        self._hash_blocks(seq, full)
        found = []
        for h in seq.block_hashes[:full]:
            block = self.cached.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def record_lookup(self, num_tokens: int, num_hit_tokens: int) -> None:
        self.query_tokens += num_tokens
        self.hit_tokens += num_hit_tokens

    def can_allocate(self, num_new: int, reused: list[int] = ()) -> bool:
        # Reusing a free cached block takes it out of the free list too.
        idle_reused = sum(1 for b in reused if self.ref_counts[b] == 0)
        return len(self.free) - idle_reused >= num_new

    def take(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref_counts[b] == 0:
                del self.free[b]
            self.ref_counts[b] += 1

    def allocate(self, count: int) -> list[int]:
        assert len(self.free) >= count, "allocate() without can_allocate()"
        out = []
        for _ in range(count):
            block, _ = self.free.popitem(last=False)
            self._forget(block)
            self.ref_counts[block] = 1
            out.append(block)
        return out

    def release(self, seq: Sequence) -> None:
        """Drop `seq`'s hold on its blocks; tail blocks become the first to be evicted."""
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            assert self.ref_counts[block] >= 0, f"block {block} released twice"
            if self.ref_counts[block] == 0:
                self.free[block] = None
                if self.block_hash[block] is None:
                    self.free.move_to_end(block, last=False)
        seq.block_table = []

    def register_full_blocks(self, seq: Sequence, old_computed: int) -> None:
        """Name the blocks that became full (all tokens computed) since `old_computed`."""
        if not self.enable_prefix_caching:
            return
        first, last = old_computed // BLOCK_SIZE, seq.num_computed_tokens // BLOCK_SIZE
        if first == last:
            return
        self._hash_blocks(seq, last)
        for i in range(first, last):
            h, block = seq.block_hashes[i], seq.block_table[i]
            if h not in self.cached and self.block_hash[block] is None:
                self.cached[h] = block
                self.block_hash[block] = h

    def _hash_blocks(self, seq: Sequence, count: int) -> None:
        hashes = seq.block_hashes
        parent = hashes[-1] if hashes else root_hash(seq.salt)
        for i in range(len(hashes), count):
            parent = chain_hash(parent, seq.token_ids[i * BLOCK_SIZE : (i + 1) * BLOCK_SIZE])
            hashes.append(parent)

    def _forget(self, block: int) -> None:
        h = self.block_hash[block]
        if h is not None:
            if self.cached.get(h) == block:
                del self.cached[h]
            self.block_hash[block] = None
