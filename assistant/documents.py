"""Documents: files -> `documents` rows + the retrieval index, and search over them.

The database row is the document's identity (its id is the index's document_id); the
index holds chunks, vectors and the extracted text. Duplicates (same content hash in the
same collection) are skipped; a file with a known name is a new version of that document.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from assistant.errors import AssistantError, NotFound
from assistant.services import Services
from assistant.storage.base import utcnow
from assistant.storage.database import transaction
from assistant.storage.models import VISIBILITIES, Document, User

DEFAULT_MAX_MB = 50


@dataclass(slots=True)
class IngestReport:
    documents: int = 0
    chunks: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    document_ids: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "documents": self.documents,
            "chunks": self.chunks,
            "skipped": self.skipped,
            "failed": self.failed,
        }


@dataclass(slots=True)
class _Pending:
    path: Path
    row_id: int
    replaces: bool


def principal_for(user: User):
    """The retrieval principal of a signed-in user."""
    from retrieval import Principal

    return Principal(user.id, user.group_names, user.role == "admin")


def expand_paths(paths: Iterable[Path]) -> tuple[list[Path], list[dict[str, str]]]:
    """Files named directly plus every non-hidden file under the named folders, sorted."""
    files, missing = [], []
    for path in paths:
        if path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        elif path.is_file():
            files.append(path)
        else:
            missing.append({"path": str(path), "reason": "no such file or folder"})
    return files, missing


class DocumentLibrary:
    def __init__(self, services: Services, max_mb: float = DEFAULT_MAX_MB) -> None:
        self.services = services
        self.settings = services.settings
        self.max_bytes = int(max_mb * 1024 * 1024)

    @cached_property
    def embedder(self):
        from retrieval import Embedder

        return Embedder(self.settings.embedding_model_path(), self.settings.device)

    @cached_property
    def index(self):
        from retrieval import DocumentIndex, ReindexRequired

        try:
            return DocumentIndex.open(self.settings.data_dir / "index", self.embedder)
        except ReindexRequired as exc:
            raise AssistantError("reindex_required", str(exc)) from exc

    @cached_property
    def pipeline(self):
        from retrieval import Pipeline

        return Pipeline(self.embedder, max_bytes=self.max_bytes)

    # ---- ingest --------------------------------------------------------------------------

    def ingest(
        self,
        paths: Iterable[Path],
        collection: str = "default",
        owner_id: int | None = None,
        visibility: str = "everyone",
        group_name: str | None = None,
        on_file: Callable[[Path], None] | None = None,
        on_chunks: Callable[[int, int], None] | None = None,
    ) -> IngestReport:
        """Parse, chunk, embed and index files; one bad file never stops the batch."""
        check_access(visibility, group_name)
        files, missing = expand_paths(Path(p) for p in paths)
        report = IngestReport(failed=missing)
        chunked, pending, seen = [], [], {}
        for path in files:
            item = self._prepare(path, collection, owner_id, visibility, group_name, seen, report)
            if item is not None:
                chunked.append(item[0])
                pending.append(item[1])
            if on_file is not None:
                on_file(path)
        if chunked:
            self._index(chunked, pending, report, on_chunks)
        return report

    def _prepare(self, path, collection, owner_id, visibility, group_name, seen, report):
        from retrieval import DocumentInfo, ParseError

        size = path.stat().st_size
        if size > self.max_bytes:
            limit = self.max_bytes / 1024 / 1024
            reason = f"{size / 1024 / 1024:.1f} MB is over the {limit:.0f} MB limit"
            report.failed.append({"path": str(path), "reason": reason})
            return None
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        duplicate = seen.get(digest) or self._duplicate(digest, collection)
        if duplicate:
            report.skipped.append({"path": str(path), "reason": f"duplicate of {duplicate}"})
            return None
        seen[digest] = path.name
        row_id, version, replaces = self._claim_row(path, collection, owner_id, digest, size)
        info = DocumentInfo(
            row_id, path.name, "", collection, owner_id, visibility, group_name, digest, version
        )
        try:
            item = self.pipeline.chunk_file(path, info)
        except ParseError as exc:
            self._set_status(row_id, "failed", str(exc), keep_ready=replaces)
            report.failed.append({"path": str(path), "reason": str(exc)})
            return None
        return item, _Pending(path, row_id, replaces)

    def _duplicate(self, digest: str, collection: str) -> str | None:
        with self._session() as session:
            row = session.scalar(
                select(Document).where(
                    Document.content_hash == digest,
                    Document.collection == collection,
                    Document.status == "ready",
                )
            )
            return f"{row.filename} (document {row.id})" if row else None

    def _claim_row(self, path, collection, owner_id, digest, size) -> tuple[int, int, bool]:
        """The row this file goes into: a new one, or the next version of a known name."""
        with self._session() as session:
            row = session.scalar(
                select(Document).where(
                    Document.filename == path.name,
                    Document.collection == collection,
                    Document.owner_id.is_(None)
                    if owner_id is None
                    else Document.owner_id == owner_id,
                )
            )
            if row is not None and row.status == "ready":
                return row.id, row.version + 1, True
            if row is None:
                row = Document(
                    owner_id=owner_id, filename=path.name, collection=collection, version=1
                )
                session.add(row)
            row.content_hash, row.size_bytes, row.status, row.error = digest, size, "indexing", None
            session.flush()
            return row.id, row.version, False

    def _index(self, chunked, pending, report, on_chunks) -> None:
        total = sum(len(item.chunks) for item in chunked)
        done = 0

        def progress(n: int) -> None:
            nonlocal done
            done += n
            if on_chunks is not None:
                on_chunks(n, total)

        try:
            prepared = self.pipeline.embed(chunked, progress)
            self.index.commit(add=prepared)
        except Exception as exc:
            for item in pending:
                self._set_status(item.row_id, "failed", f"indexing failed: {exc}", item.replaces)
            raise
        with self._session() as session:
            for doc, item in zip(prepared, pending, strict=True):
                row = session.get(Document, item.row_id)
                row.title = doc.info.title[:500]
                row.visibility, row.group_name = doc.info.visibility, doc.info.group_name
                row.content_hash, row.version = doc.info.content_hash, doc.info.version
                row.size_bytes = item.path.stat().st_size
                row.status, row.error, row.chunk_count = "ready", None, len(doc.chunks)
                row.updated_at = utcnow()
                report.document_ids.append(row.id)
        report.documents += len(prepared)
        report.chunks += total

    def _set_status(self, row_id: int, status: str, error: str, keep_ready: bool) -> None:
        if keep_ready:  # a bad new version leaves the previous one in service
            return
        with self._session() as session:
            row = session.get(Document, row_id)
            row.status, row.error, row.updated_at = status, error, utcnow()

    # ---- delete, search, text ------------------------------------------------------------

    def delete(self, document_id: int) -> None:
        with self._session() as session:
            row = session.get(Document, document_id)
            if row is None:
                raise NotFound("document_not_found", f"There is no document {document_id}.")
            session.delete(row)
        self.index.commit(delete=[document_id])

    def search(self, query: str, k: int = 5, principal=None, collection=None, mode="hybrid"):
        from retrieval import RetrievalError

        try:
            return self.index.search(query, k, principal, collection, mode)
        except RetrievalError as exc:
            raise AssistantError("bad_search", str(exc)) from exc

    def search_for(self, caller: Any) -> Callable[[str, int], list[dict[str, Any]]]:
        """A search bound to one caller's permissions, for the `search_documents` tool."""
        from retrieval import Principal

        principal = Principal(caller.id, list(caller.groups), caller.role == "admin")
        return lambda query, k: [hit.as_dict() for hit in self.search(query, k, principal)]

    def extracted_text(self, document_id: int) -> str:
        from retrieval import RetrievalError

        try:
            return self.index.extracted_text(document_id)
        except RetrievalError as exc:
            raise NotFound("document_not_found", str(exc)) from exc

    @contextmanager
    def _session(self) -> Iterator[Session]:
        """A transaction; a database without the documents table says how to fix it."""
        try:
            with transaction(self.services.sessions) as session:
                yield session
        except (OperationalError, ProgrammingError) as exc:
            if "documents" in str(exc):
                raise AssistantError(
                    "database_not_ready",
                    "the database has no documents table; run 'assistant db upgrade' first",
                ) from exc
            raise


def check_access(visibility: str, group_name: str | None) -> None:
    if visibility not in VISIBILITIES:
        raise AssistantError(
            "invalid_visibility", f"visibility must be one of {', '.join(VISIBILITIES)}"
        )
    if (visibility == "group") != bool(group_name):
        raise AssistantError(
            "invalid_group", "a group name is required with visibility 'group', and only then"
        )
