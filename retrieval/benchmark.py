"""Retrieval benchmark: ingest throughput, and query latency on synthetic corpora,
exact against approximate (HNSW), with the recall of approximate against exact.

Every number comes with its baseline measured in the same run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.embedder import Embedder
from retrieval.index import DocumentIndex, IndexConfig
from retrieval.lexical import tokenize
from retrieval.pipeline import Pipeline, embedding_text
from retrieval.records import PreparedDocument
from retrieval.types import ChunkSpan, DocumentInfo

CHUNKS_PER_DOC = 100


@dataclass(slots=True)
class Latency:
    p50_ms: float
    p95_ms: float

    def __str__(self) -> str:
        return f"p50 {self.p50_ms:7.2f} ms   p95 {self.p95_ms:7.2f} ms"


def timed(calls: list[Callable[[], object]]) -> Latency:
    times = []
    for call in calls:
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return Latency(statistics.median(times), times[int(0.95 * (len(times) - 1))])


def ingest_throughput(embedder: Embedder, docs: Path, repeat: int, out: Callable) -> None:
    """Chunks/s of the batched pipeline against sentence-transformers' plain encode()."""
    pipeline = Pipeline(embedder)
    files = sorted(p for p in docs.iterdir() if p.is_file())
    items = [pipeline.chunk_file(p, DocumentInfo(n, p.name, "")) for n, p in enumerate(files)]
    texts = [embedding_text(c) for item in items for c in item.chunks] * repeat
    tokens = np.mean([len(pipeline.tokenizer.encode(t).ids) for t in texts])
    out(f"ingest: {len(texts)} chunks of {tokens:.0f} tokens on average, device {embedder.device}")
    start = time.perf_counter()
    embedder.model.encode(texts, show_progress_bar=False)
    raw = len(texts) / (time.perf_counter() - start)
    with tempfile.TemporaryDirectory() as tmp:
        index = DocumentIndex.open(Path(tmp), embedder)
        start = time.perf_counter()
        for _ in range(repeat):
            items = [
                pipeline.chunk_file(p, DocumentInfo(len(index.documents()) + n + 1, p.name, ""))
                for n, p in enumerate(files)
            ]
            index.commit(pipeline.embed(items))
        ours = len(texts) / (time.perf_counter() - start)
    out(f"  raw encode() baseline        {raw:8.1f} chunks/s")
    out(f"  parse+chunk+embed+commit     {ours:8.1f} chunks/s   ({ours / raw:.2f}x baseline)")


def synthetic_corpus(
    n: int, dim: int, real_words: list[str], seed: int = 0
) -> tuple[list[PreparedDocument], np.ndarray]:
    """Clustered unit vectors (like topics); texts mix real words (so queries hit BM25
    postings) with random ones (so the vocabulary grows as in a real corpus)."""
    rng = np.random.default_rng(seed)
    centers = _unit(rng.standard_normal((max(n // 100, 10), dim)).astype(np.float32))
    vectors = centers[rng.integers(0, len(centers), n)]
    vectors = _unit(vectors + 0.08 * rng.standard_normal((n, dim)).astype(np.float32))
    words = np.array(sorted(set(real_words)) * 10 + [f"w{i}" for i in range(20000)])
    docs = []
    for d, first in enumerate(range(0, n, CHUNKS_PER_DOC)):
        last = min(first + CHUNKS_PER_DOC, n)
        chunks, pos = [], 0
        for i in range(first, last):
            text = " ".join(words[rng.integers(0, len(words), 40)])
            chunks.append(ChunkSpan(i - first, f"Synthetic {d}", None, pos, pos + len(text), text))
            pos += len(text) + 1
        info = DocumentInfo(d + 1, f"synthetic{d}.txt", f"Synthetic {d}")
        text = " ".join(c.text for c in chunks)
        flags = [[] for _ in chunks]
        docs.append(PreparedDocument(info, text, chunks, flags, vectors[first:last]))
    return docs, vectors


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def query_latency(
    embedder: Embedder, size: int, queries: list[str], n_queries: int, out: Callable
) -> None:
    out(f"\nquery latency at {size} chunks (synthetic), {n_queries} queries")
    real_words = [w for q in queries for w in tokenize(q)]
    docs, vectors = synthetic_corpus(size, embedder.dimension, real_words)
    rng = np.random.default_rng(1)
    probes = _unit(vectors[rng.integers(0, size, n_queries)] + 0.05 * rng.standard_normal(
        (n_queries, embedder.dimension)
    ).astype(np.float32))  # fmt: skip
    texts = [queries[i % len(queries)] for i in range(n_queries)]
    with tempfile.TemporaryDirectory() as tmp:
        approx_cfg = IndexConfig(approximate_above=0, relevance_floor=-1.0)
        start = time.perf_counter()
        approx = DocumentIndex(Path(tmp), embedder.identity, embedder.encode_query, approx_cfg)
        approx.commit(docs)
        out(f"  build + commit (HNSW, BM25)  {time.perf_counter() - start:8.1f} s")
        exact_cfg = IndexConfig(approximate_above=10**12, relevance_floor=-1.0)
        exact = DocumentIndex(Path(tmp), embedder.identity, embedder.encode_query, exact_cfg)
        assert approx.approximate and not exact.approximate
        start = time.perf_counter()
        exact.search(texts[0], k=10, mode="bm25")
        out(f"  first BM25 search (cold)     {time.perf_counter() - start:8.1f} s")
        approx.search(texts[0], k=10)  # warm caches outside the timings
        embed = timed([lambda t=t: embedder.encode_query(t) for t in texts])
        text_vectors = embedder.encode(texts)
        out(f"  query embedding only         {embed}   (baseline)")
        for name, index in (("exact", exact), ("hnsw", approx)):
            vec = timed(
                [
                    lambda v=v, ix=index: ix.search("x", 10, mode="vector", query_vector=v)
                    for v in probes
                ]
            )
            hybrid = timed(
                [
                    lambda t=t, v=v, ix=index: ix.search(t, 10, query_vector=v)
                    for t, v in zip(texts, text_vectors, strict=True)
                ]
            )
            full = timed([lambda t=t, ix=index: ix.search(t, 10) for t in texts])
            out(f"  {name:<5} vector search         {vec}")
            out(f"  {name:<5} hybrid search         {hybrid}   (vector + BM25 + fusion)")
            out(
                f"  {name:<5} hybrid incl. embedding {full}   "
                f"({full.p50_ms / embed.p50_ms:.2f}x embedding p50)"
            )
        out(f"  hnsw recall@10 vs exact      {_recall(exact, approx, probes):8.3f}")


def _recall(exact: DocumentIndex, approx: DocumentIndex, probes: np.ndarray) -> float:
    found = total = 0
    for v in probes:
        truth = {h.chunk_id for h in exact.search("x", 10, mode="vector", query_vector=v)}
        got = {h.chunk_id for h in approx.search("x", 10, mode="vector", query_vector=v)}
        found += len(truth & got)
        total += len(truth)
    return found / max(total, 1)
