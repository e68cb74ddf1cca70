"""File -> parsed -> chunks -> injection flags -> vectors: everything before a commit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval import injection
from retrieval.chunker import ChunkerConfig, chunk_document, load_tokenizer
from retrieval.embedder import Embedder
from retrieval.parsers import DEFAULT_MAX_BYTES, parse_file
from retrieval.records import PreparedDocument
from retrieval.types import ChunkSpan, DocumentInfo, ParsedDocument


@dataclass(slots=True)
class Chunked:
    """A parsed and chunked document, not yet embedded."""

    info: DocumentInfo
    parsed: ParsedDocument
    chunks: list[ChunkSpan]


class Pipeline:
    def __init__(
        self,
        embedder: Embedder,
        chunker: ChunkerConfig | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.embedder = embedder
        self.chunker = chunker or ChunkerConfig()
        self.max_bytes = max_bytes
        self.tokenizer = load_tokenizer(embedder.tokenizer_path)

    def chunk_file(self, path: Path, info: DocumentInfo) -> Chunked:
        """Parse and chunk; raises ParseError for a file that cannot be ingested."""
        parsed = parse_file(path, self.max_bytes)
        if not info.title:
            info.title = parsed.title
        return Chunked(info, parsed, chunk_document(parsed, self.tokenizer, self.chunker))

    def embed(
        self, items: list[Chunked], progress: Callable[[int], None] | None = None
    ) -> list[PreparedDocument]:
        """Embed all chunks of all documents in shared batches, then split them back."""
        texts = [embedding_text(c) for item in items for c in item.chunks]
        vectors = self.embedder.encode(texts, progress)
        prepared, first = [], 0
        for item in items:
            n = len(item.chunks)
            flags = [injection.scan(c.text) for c in item.chunks]
            block = np.ascontiguousarray(vectors[first : first + n])
            prepared.append(
                PreparedDocument(item.info, item.parsed.text, item.chunks, flags, block)
            )
            first += n
        return prepared


def embedding_text(chunk: ChunkSpan) -> str:
    """The breadcrumb gives a short chunk (a table row) the context it lacks on its own."""
    return f"{chunk.section}\n{chunk.text}"
