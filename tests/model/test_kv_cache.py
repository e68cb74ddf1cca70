"""The block pool: reference counts, prefix hashes with salts, LRU reuse, the usage gauge."""

from __future__ import annotations

import pytest
import torch

from model.kv_cache import BlockPool, num_blocks_for_budget
from model.llama import BLOCK_SIZE, KVCache
from model.sequence import Sequence
from tests.model.tiny_models import our_config, tiny_hf_model


def computed_seq(pool: BlockPool, tokens: list[int], salt: str | None = None) -> Sequence:
    """A sequence admitted like the scheduler does it, all its tokens then computed."""
    seq = Sequence("s", tokens, max_tokens=1, salt=salt)
    cached = pool.find_cached(seq)
    pool.take(cached)
    missing = -(-len(tokens) // BLOCK_SIZE) - len(cached)
    seq.block_table = cached + pool.allocate(missing)
    seq.num_computed_tokens = len(cached) * BLOCK_SIZE
    seq.num_cached_tokens = seq.num_computed_tokens
    old = seq.num_computed_tokens
    seq.num_computed_tokens = len(tokens)
    pool.register_full_blocks(seq, old)
    return seq


def test_shared_prefix_reuses_blocks_and_counts_references() -> None:
    pool = BlockPool(16)
    prefix = list(range(40))  # two full blocks and a half one
    a = computed_seq(pool, prefix + [100, 101])
    b = computed_seq(pool, prefix + [200])
    assert b.num_cached_tokens == 32
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert [pool.ref_counts[x] for x in a.block_table] == [2, 2, 1]
    pool.release(a)
    assert [pool.ref_counts[x] for x in b.block_table] == [1, 1, 1]
    pool.release(b)
    assert pool.num_free_blocks == 16 and not any(pool.ref_counts)


def test_freed_blocks_stay_reusable_until_evicted() -> None:
    pool = BlockPool(4)
    tokens = list(range(48))
    first = computed_seq(pool, tokens + [1])
    first_table = list(first.block_table)
    pool.release(first)
    again = computed_seq(pool, tokens + [2])
    assert again.num_cached_tokens == 48 and again.block_table[:3] == first_table[:3]
    pool.release(again)
    # A different sequence that needs every block evicts the cached ones.
    other = computed_seq(pool, list(range(500, 564)))
    pool.release(other)
    assert computed_seq(pool, tokens + [3]).num_cached_tokens == 0


def test_eviction_is_least_recently_used_and_uncached_blocks_go_first() -> None:
    pool = BlockPool(6)
    old = computed_seq(pool, list(range(16)) + [9])  # one hashed block + one partial
    old_table = list(old.block_table)
    pool.release(old)
    new = computed_seq(pool, list(range(100, 116)) + [9])
    new_table = list(new.block_table)
    pool.release(new)
    # The two partial (unnamed) blocks and the two never-used blocks are taken before either
    # named block; then the older named block before the newer one.
    old_named, new_named = old_table[0], new_table[0]
    taken = pool.allocate(5)
    assert taken[-1] == old_named and new_named not in taken
    assert old.block_hashes[0] not in pool.cached
    assert pool.cached[new.block_hashes[0]] == new_named


def test_different_salts_never_share_blocks() -> None:
    pool = BlockPool(32)
    tokens = list(range(64)) + [7]
    a = computed_seq(pool, tokens, salt="tenant-a")
    b = computed_seq(pool, tokens, salt="tenant-b")
    none = computed_seq(pool, tokens)
    assert b.num_cached_tokens == 0 and none.num_cached_tokens == 0
    assert not set(a.block_table) & set(b.block_table)
    assert not set(none.block_table) & (set(a.block_table) | set(b.block_table))
    assert computed_seq(pool, tokens, salt="tenant-a").num_cached_tokens == 64


def test_the_last_token_is_never_served_from_the_cache() -> None:
    pool = BlockPool(8)
    tokens = list(range(32))
    computed_seq(pool, tokens)
    again = computed_seq(pool, tokens)  # fully cached prompt: its last block is recomputed
    assert again.num_cached_tokens == 16


def test_usage_gauge() -> None:
    pool = BlockPool(10)
    assert pool.usage == 0.0
    seq = computed_seq(pool, list(range(40)))
    assert pool.usage == pytest.approx(0.3)
    pool.release(seq)
    assert pool.usage == 0.0


def test_pool_size_comes_from_the_memory_budget() -> None:
    config = our_config(tiny_hf_model())
    per_block = KVCache.bytes_per_block(config, torch.float32)
    # 2 layers * (K + V) * 2 kv heads * 16 dims * 4 bytes * 16 tokens
    assert per_block == 2 * 2 * 2 * 16 * 4 * BLOCK_SIZE
    assert num_blocks_for_budget(config, torch.float32, per_block * 10 + 5) == 10
    with pytest.raises(ValueError, match="at least"):
        num_blocks_for_budget(config, torch.float32, per_block - 1)
