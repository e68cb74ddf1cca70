"""Retrieval: documents -> sections -> chunks -> vectors -> hits.

Imports nothing from assistant/ or web/: callers pass settings values in.
"""

from retrieval.chunker import ChunkerConfig
from retrieval.embedder import Embedder, ModelIdentity
from retrieval.index import DocumentIndex, IndexConfig
from retrieval.parsers import DEFAULT_MAX_BYTES, parse_file, supported_suffixes
from retrieval.pipeline import Chunked, Pipeline
from retrieval.records import PreparedDocument
from retrieval.types import (
    DocumentInfo,
    Hit,
    ParsedDocument,
    ParseError,
    Principal,
    ReindexRequired,
    RetrievalError,
    Section,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ChunkerConfig",
    "Chunked",
    "DocumentIndex",
    "DocumentInfo",
    "Embedder",
    "Hit",
    "IndexConfig",
    "ModelIdentity",
    "ParseError",
    "ParsedDocument",
    "Pipeline",
    "PreparedDocument",
    "Principal",
    "ReindexRequired",
    "RetrievalError",
    "Section",
    "parse_file",
    "supported_suffixes",
]
