"""The searchable index: FAISS (cosine) and BM25 over the same chunks, fused by reciprocal rank.

Permissions and collections become a row mask that both searches evaluate inside
(a FAISS IDSelector, a BM25 score mask), so a filtered search still returns k hits when
k visible chunks match. Every commit writes a new generation (see store.py).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from retrieval import store
from retrieval.embedder import Embedder, ModelIdentity
from retrieval.lexical import Bm25, chunk_tokens
from retrieval.records import (
    ChunkRecord,
    PreparedDocument,
    documents_from_json,
    documents_to_json,
)
from retrieval.types import DocumentInfo, Hit, Principal, ReindexRequired, RetrievalError

MODES = ("hybrid", "vector", "bm25")


@dataclass(slots=True)
class IndexConfig:
    approximate_above: int = 50_000  # live chunks above which HNSW replaces exact search
    hnsw_m: int = 32
    hnsw_ef_construction: int = 64
    hnsw_ef_search: int = 128
    relevance_floor: float = 0.28  # cosine below which a chunk is not an answer
    candidates: int = 40  # per side, before fusion
    rrf_k: int = 60
    compact_ratio: float = 0.25  # rewrite without deleted rows above this share


@dataclass(slots=True)
class _State:
    generation: int = 0
    stamp: tuple[int, int] | None = None
    docs: dict[int, DocumentInfo] = field(default_factory=dict)
    rows: list[ChunkRecord] = field(default_factory=list)
    vectors: np.ndarray | None = None
    live: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    row_doc: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    flat: object | None = None
    gpu_flat: object | None = None  # a GPU copy of `flat` for unfiltered searches
    ann: object | None = None
    bm25: Bm25 | None = None
    bm25_lock: threading.Lock = field(default_factory=threading.Lock)


class DocumentIndex:
    def __init__(
        self,
        root: str | Path,
        identity: ModelIdentity,
        embed_query: Callable[[str], np.ndarray] | None = None,
        config: IndexConfig | None = None,
    ) -> None:
        self.root = Path(root)
        self.identity = identity
        self.config = config or IndexConfig()
        self._embed_query = embed_query
        self._commit_lock = threading.Lock()
        self._state = _State()
        self.refresh()

    @classmethod
    def open(
        cls, root: str | Path, embedder: Embedder, config: IndexConfig | None = None
    ) -> DocumentIndex:
        return cls(root, embedder.identity, embedder.encode_query, config)

    # ---- reading -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Load the newest generation if another process (or thread) committed one."""
        stamp = store.manifest_stamp(self.root)
        if stamp is None or stamp != self._state.stamp:
            for attempt in range(3):
                try:
                    self._state = self._load(stamp)
                    return
                except FileNotFoundError:  # a writer replaced it under us: read again
                    stamp = store.manifest_stamp(self.root)
                    if attempt == 2:
                        raise

    def _load(self, stamp: tuple[int, int] | None) -> _State:
        manifest = store.read_manifest(self.root)
        if manifest is None:
            return _State()
        if manifest.get("format") != store.FORMAT:
            raise RetrievalError(f"{self.root}: unknown index format {manifest.get('format')}")
        self._check_model(ModelIdentity.from_dict(manifest["model"]))
        folder = store.generation_dir(self.root, manifest["generation"])
        docs = documents_from_json((folder / "documents.json").read_text())
        with (folder / "chunks.jsonl").open() as f:
            rows = [ChunkRecord.from_json(line) for line in f]
        vectors = np.load(folder / "vectors.npy")
        live = np.load(folder / "live.npy")
        ann_path = folder / "ann.faiss"
        ann = _read_faiss(ann_path) if ann_path.exists() else None
        state = self._build(docs, rows, vectors, live, ann, manifest["generation"])
        if (folder / "bm25").is_dir():
            state.bm25 = Bm25.load(folder / "bm25", len(rows))
        state.stamp = stamp
        return state

    def _check_model(self, stored: ModelIdentity) -> None:
        if (stored.dimension, stored.fingerprint) != (
            self.identity.dimension,
            self.identity.fingerprint,
        ):
            raise ReindexRequired(
                f"re-index required: the index in {self.root} was built with embedding model "
                f"{stored.name} ({stored.dimension} dims, fingerprint {stored.fingerprint[:12]}), "
                f"but the configured model is {self.identity.name} ({self.identity.dimension} "
                f"dims, fingerprint {self.identity.fingerprint[:12]}); delete {self.root} and "
                "ingest the documents again, or configure the original model"
            )

    def _build(
        self,
        docs: dict[int, DocumentInfo],
        rows: list[ChunkRecord],
        vectors: np.ndarray | None,
        live: np.ndarray,
        ann: object | None,
        generation: int,
    ) -> _State:
        import faiss

        dim = self.identity.dimension
        vectors = np.ascontiguousarray(
            vectors if vectors is not None else np.zeros((0, dim), np.float32), dtype=np.float32
        )
        flat = faiss.IndexFlatIP(dim)
        flat.add(vectors)
        approximate = int(live.sum()) > self.config.approximate_above
        if ann is not None and (ann.ntotal != len(rows) or not approximate):
            ann = None
        if ann is None and approximate:
            ann = self._build_ann(vectors)
        row_doc = np.fromiter((r.document_id for r in rows), dtype=np.int64, count=len(rows))
        gpu_flat = _to_gpu(flat) if ann is None else None
        return _State(generation, None, docs, rows, vectors, live, row_doc, flat, gpu_flat, ann)

    def _build_ann(self, vectors: np.ndarray):
        import faiss

        ann = faiss.IndexHNSWFlat(vectors.shape[1], self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        ann.hnsw.efConstruction = self.config.hnsw_ef_construction
        ann.add(vectors)
        return ann

    def __len__(self) -> int:
        return int(self._state.live.sum())

    @property
    def generation(self) -> int:
        return self._state.generation

    @property
    def approximate(self) -> bool:
        return self._state.ann is not None

    def documents(self) -> list[DocumentInfo]:
        self.refresh()
        return list(self._state.docs.values())

    def document(self, document_id: int) -> DocumentInfo | None:
        self.refresh()
        return self._state.docs.get(document_id)

    def chunk_count(self, document_id: int) -> int:
        state = self._state
        return int(np.count_nonzero((state.row_doc == document_id) & state.live))

    def extracted_text(self, document_id: int) -> str:
        info = self.document(document_id)
        if info is None:
            raise RetrievalError(f"document {document_id} is not in the index")
        return (self.root / "texts" / _text_name(info)).read_text(encoding="utf-8")

    # ---- searching -----------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = 5,
        principal: Principal | None = None,
        collection: str | None = None,
        mode: str = "hybrid",
        query_vector: np.ndarray | None = None,
    ) -> list[Hit]:
        """The k best chunks the principal may see; [] when nothing clears the floor."""
        if not query.strip():
            raise RetrievalError("the query is empty; type a question or keywords")
        if k < 1:
            raise RetrievalError(f"k must be at least 1, got {k}")
        if mode not in MODES:
            raise RetrievalError(f"unknown search mode '{mode}'; use one of {', '.join(MODES)}")
        self.refresh()
        state = self._state
        mask = self._mask(state, principal, collection)
        if not state.rows or (mask is not None and not mask.any()):
            return []
        q = None
        if mode != "bm25":
            q = query_vector if query_vector is not None else self._query_vector(query)
            q = np.ascontiguousarray(q, dtype=np.float32).reshape(-1)
        ranked = self._rank(state, query, q, k, mask, mode)
        return [self._hit(state, row, score) for row, score in ranked]

    def _query_vector(self, query: str) -> np.ndarray:
        if self._embed_query is None:
            raise RetrievalError("this index was opened without an embedder; pass query_vector")
        return self._embed_query(query)

    def _mask(
        self, state: _State, principal: Principal | None, collection: str | None
    ) -> np.ndarray | None:
        """Rows the caller may see, or None when that is every row."""
        wanted = [
            d.document_id
            for d in state.docs.values()
            if d.visible_to(principal) and (collection is None or d.collection == collection)
        ]
        if len(wanted) == len(state.docs) and state.live.all():
            return None
        return state.live & np.isin(state.row_doc, np.asarray(wanted, dtype=np.int64))

    def _rank(
        self,
        state: _State,
        query: str,
        q: np.ndarray | None,
        k: int,
        mask: np.ndarray | None,
        mode: str,
    ) -> list[tuple[int, float]]:
        cfg = self.config
        if mode == "bm25":
            return _bm25(state, query, k, mask)
        vec = _vector_top(state, q, max(k, cfg.candidates), mask, cfg.hnsw_ef_search)
        if mode == "vector":
            return [(row, s) for row, s in vec if s >= cfg.relevance_floor][:k]
        lex = _bm25(state, query, max(k, cfg.candidates), mask)
        fused: dict[int, float] = {}
        for ranking in (vec, lex):
            for rank, (row, _) in enumerate(ranking):
                fused[row] = fused.get(row, 0.0) + 1.0 / (cfg.rrf_k + rank + 1)
        rows = np.fromiter(fused, dtype=np.int64, count=len(fused))
        cosine = state.vectors[rows] @ q
        kept = [
            (int(r), fused[int(r)])
            for r, c in zip(rows, cosine, strict=True)
            if c >= cfg.relevance_floor
        ]
        kept.sort(key=lambda item: -item[1])
        return kept[:k]

    def _hit(self, state: _State, row: int, score: float) -> Hit:
        rec = state.rows[row]
        info = state.docs[rec.document_id]
        return Hit(
            chunk_id=f"{info.document_id}-v{info.version}-{rec.ordinal}",
            document=info.name,
            document_id=info.document_id,
            title=info.title,
            section=rec.section,
            page=rec.page,
            start=rec.start,
            end=rec.end,
            text=rec.text,
            score=float(score),
            flagged=bool(rec.flag_reasons),
            flag_reasons=list(rec.flag_reasons),
        )

    # ---- writing -------------------------------------------------------------------------

    def commit(self, add: Iterable[PreparedDocument] = (), delete: Iterable[int] = ()) -> int:
        """Add (or replace, by document_id) and delete documents in one new generation."""
        add, delete = list(add), set(delete)
        for doc in add:
            if doc.vectors.shape != (len(doc.chunks), self.identity.dimension):
                raise RetrievalError(
                    f"{doc.info.name}: vectors of shape {doc.vectors.shape} do not match "
                    f"{len(doc.chunks)} chunks of {self.identity.dimension} dims"
                )
        with self._commit_lock, store.writer_lock(self.root):
            self.refresh()
            old = self._state
            state = self._apply(old, add, delete)
            self._write(state, add)
            self._state = state
            store.remove_old_generations(self.root, {state.generation, old.generation})
            self._remove_unused_texts(old, state)
        return state.generation

    def _apply(self, old: _State, add: list[PreparedDocument], delete: set[int]) -> _State:
        gone = delete | {d.info.document_id for d in add}
        docs = {i: d for i, d in old.docs.items() if i not in gone}
        live = old.live & ~np.isin(old.row_doc, np.fromiter(gone, np.int64, len(gone)))
        rows = list(old.rows)
        parts = [old.vectors] if old.vectors is not None else []
        for doc in add:
            docs[doc.info.document_id] = doc.info
            rows.extend(doc.records())
            parts.append(doc.vectors.astype(np.float32))
        dim = self.identity.dimension
        vectors = np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)
        live = np.concatenate([live, np.ones(len(rows) - len(live), dtype=bool)])
        ann = None
        if old.ann is not None:  # deleted rows stay in the graph, masked out
            import faiss

            ann = faiss.clone_index(old.ann)
            ann.add(vectors[ann.ntotal :])
        known = old.bm25.tokens if old.bm25 is not None and old.bm25.tokens else None
        tokens = list(known) if known is not None else [
            chunk_tokens(r.section, r.text) for r in old.rows
        ]  # fmt: skip
        tokens += [chunk_tokens(r.section, r.text) for r in rows[len(tokens) :]]
        if len(rows) and (1 - live.mean()) > self.config.compact_ratio:
            keep = np.flatnonzero(live)
            rows, vectors, live, ann = [rows[i] for i in keep], vectors[keep], live[keep], None
            tokens = [tokens[i] for i in keep]
        state = self._build(docs, rows, vectors, live, ann, old.generation + 1)
        state.bm25 = Bm25.build(tokens)
        return state

    def _write(self, state: _State, add: list[PreparedDocument]) -> None:
        texts = self.root / "texts"
        texts.mkdir(parents=True, exist_ok=True)
        for doc in add:
            store.atomic_write(texts / _text_name(doc.info), doc.text.encode("utf-8"))
        staging = store.new_generation_dir(self.root, state.generation)
        store.write_synced(staging / "documents.json", documents_to_json(state.docs).encode())
        chunks = "".join(r.to_json() + "\n" for r in state.rows)
        store.write_synced(staging / "chunks.jsonl", chunks.encode("utf-8"))
        store.write_synced(staging / "vectors.npy", _npy(state.vectors))
        store.write_synced(staging / "live.npy", _npy(state.live))
        (staging / "bm25").mkdir()
        for path in state.bm25.save(staging / "bm25"):
            store.fsync_path(path)
        store.fsync_path(staging / "bm25")
        if state.ann is not None:
            import faiss

            store.write_synced(staging / "ann.faiss", faiss.serialize_index(state.ann).tobytes())
        manifest = {
            "format": store.FORMAT,
            "model": self.identity.as_dict(),
            "documents": len(state.docs),
            "chunks": int(state.live.sum()),
        }
        store.publish(self.root, staging, state.generation, manifest)
        state.stamp = store.manifest_stamp(self.root)

    def _remove_unused_texts(self, old: _State, new: _State) -> None:
        keep = {_text_name(d) for d in new.docs.values()}
        for info in old.docs.values():
            name = _text_name(info)
            if name not in keep:
                (self.root / "texts" / name).unlink(missing_ok=True)


def _text_name(info: DocumentInfo) -> str:
    return f"{info.document_id}-v{info.version}.txt"


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _to_gpu(flat):
    """FAISS GPU builds serve unfiltered exact searches from the GPU; filtered ones (an
    IDSelector) stay on the CPU index, which every build supports."""
    import faiss

    if not hasattr(faiss, "index_cpu_to_all_gpus") or faiss.get_num_gpus() == 0:
        return None
    return faiss.index_cpu_to_all_gpus(flat)


def _read_faiss(path: Path):
    import faiss

    return faiss.deserialize_index(np.frombuffer(path.read_bytes(), dtype=np.uint8))


def _bm25(state: _State, query: str, k: int, mask: np.ndarray | None) -> list[tuple[int, float]]:
    with state.bm25_lock:  # generations written before BM25 was saved: build once
        if state.bm25 is None:
            state.bm25 = Bm25.build([chunk_tokens(r.section, r.text) for r in state.rows])
    live = state.live if mask is None else mask
    return state.bm25.top(query, k, None if live.all() else live)


def _vector_top(
    state: _State, q: np.ndarray, n: int, mask: np.ndarray | None, ef_search: int
) -> list[tuple[int, float]]:
    import faiss

    allowed = len(state.rows) if mask is None else int(mask.sum())
    n = min(n, allowed)
    if n == 0:
        return []
    bits = None if mask is None else np.packbits(mask, bitorder="little")
    selector = None if bits is None else faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))
    found: tuple[np.ndarray, np.ndarray] | None = None
    # A graph walk through a sparse filter misses neighbours: small subsets go exact.
    if state.ann is not None and allowed >= 0.05 * len(state.rows):
        params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(ef_search, n))
        found = state.ann.search(q[None, :], n, params=params)
        if int((found[1][0] >= 0).sum()) < n:
            found = None
    if found is None and selector is None and state.gpu_flat is not None:
        found = state.gpu_flat.search(q[None, :], n)
    if found is None:
        params = faiss.SearchParameters(sel=selector) if selector is not None else None
        found = state.flat.search(q[None, :], n, params=params)
    scores, ids = found
    return [(int(i), float(s)) for s, i in zip(scores[0], ids[0], strict=True) if i >= 0]
