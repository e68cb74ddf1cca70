from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from assistant.documents import DocumentLibrary, principal_for
from assistant.errors import AssistantError, NotFound
from assistant.services import Services
from assistant.settings import Settings
from assistant.storage.database import transaction
from assistant.storage.models import Document
from assistant.storage.users import create_user
from tests.cli_runner import run_cli
from tests.retrieval.shared import POLICIES, bundled_embedder


@pytest.fixture
def library(db_engine, tmp_path) -> DocumentLibrary:
    services = Services(Settings(data_dir=tmp_path / "data", database_url=str(db_engine.url)))
    services.__dict__["engine"] = db_engine  # the migrated test database (SQLite or a PG schema)
    library = DocumentLibrary(services)
    library.__dict__["embedder"] = bundled_embedder()
    return library


def rows(library: DocumentLibrary) -> list[Document]:
    with transaction(library.services.sessions) as session:
        return list(session.scalars(select(Document).order_by(Document.id)))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_ingest_records_rows_skips_duplicates_and_reports_failures(library, tmp_path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    shutil.copy(POLICIES / "leave_policy.md", extra / "copy_of_leave.md")
    write(extra / "broken.pdf", "%PDF-1.4 truncated")
    write(extra / "notes.xlsx", "cells")
    seen = []
    report = library.ingest([POLICIES, extra, tmp_path / "missing"], on_file=seen.append)
    assert report.documents == 5 and report.chunks > 30
    assert report.skipped == [
        {"path": str(extra / "copy_of_leave.md"), "reason": "duplicate of leave_policy.md"}
    ]
    failed = {Path(f["path"]).name: f["reason"] for f in report.failed}
    assert set(failed) == {"missing", "broken.pdf", "notes.xlsx"}
    assert "not a readable PDF" in failed["broken.pdf"]
    assert len(seen) == 8
    by_name = {r.filename: r for r in rows(library)}
    assert by_name["broken.pdf"].status == "failed" and "PDF" in by_name["broken.pdf"].error
    ready = [r for r in by_name.values() if r.status == "ready"]
    assert len(ready) == 5 and sum(r.chunk_count for r in ready) == report.chunks
    for row in ready:
        assert row.chunk_count == library.index.chunk_count(row.id) > 0
        assert len(row.content_hash) == 64 and row.title
    again = library.ingest([POLICIES])
    assert again.documents == 0 and len(again.skipped) == 5


def test_a_changed_file_becomes_the_next_version(library, tmp_path) -> None:
    path = write(
        tmp_path / "badge.md", "# Badges\n\n## Lost badge\n\nA lost badge costs NOK 150.\n"
    )
    (first,) = library.ingest([path]).document_ids
    write(path, "# Badges\n\n## Lost badge\n\nA lost badge costs NOK 400 to replace.\n")
    (second,) = library.ingest([path]).document_ids
    assert first == second
    (row,) = rows(library)
    assert (row.version, row.status) == (2, "ready")
    hits = library.search("how much does a lost badge cost", k=5)
    assert hits and all("NOK 150" not in h.text for h in hits)
    assert "NOK 400" in library.extracted_text(row.id)
    write(path, "")
    assert library.ingest([path]).failed  # a bad new version leaves the old one in service
    assert rows(library)[0].status == "ready" and library.search("lost badge cost", k=1)


def test_private_and_group_documents_stay_with_their_readers(library, tmp_path) -> None:
    with transaction(library.services.sessions) as session:
        alice = create_user(session, "alice@example.com", "long enough", groups=["hr"])
        bob = create_user(session, "bob@example.com", "long enough")
        admin = create_user(session, "root@example.com", "long enough", role="admin")
    secret = write(tmp_path / "salary.md", "# Salaries\n\n## Bands\n\nBand 7 pays NOK 910 000.\n")
    hr = write(tmp_path / "hr.md", "# HR Notes\n\n## Bands\n\nBand 8 pays NOK 990 000.\n")
    library.ingest([secret], owner_id=alice.id, visibility="private")
    library.ingest([hr], owner_id=admin.id, visibility="group", group_name="hr")
    query = "how much does salary band pay"

    def names(user) -> set[str]:
        return {h.document for h in library.search(query, k=5, principal=principal_for(user))}

    assert names(alice) == {"salary.md", "hr.md"}
    assert names(bob) == set()
    assert names(admin) == {"salary.md", "hr.md"}
    with pytest.raises(AssistantError, match="group name is required"):
        library.ingest([secret], visibility="group")
    with pytest.raises(AssistantError, match="visibility must be"):
        library.ingest([secret], visibility="public")


def test_search_documents_tool_sees_only_what_its_caller_may_read(library, tmp_path) -> None:
    from assistant.tool_calls import ToolCalls
    from tools.builtin import builtin_registry
    from tools.sandbox import Sandbox

    with transaction(library.services.sessions) as session:
        alice = create_user(session, "alice@example.com", "long enough")
        bob = create_user(session, "bob@example.com", "long enough")
    memo = write(tmp_path / "memo.md", "# Memo\n\n## Bonus\n\nThe 2027 bonus pool is 4 percent.\n")
    library.ingest([memo], owner_id=alice.id, visibility="private")
    calls = ToolCalls(
        library.services.sessions, builtin_registry(Sandbox()), search_for=library.search_for
    )
    query = {"query": "how large is the bonus pool", "k": 3}

    def documents(user) -> list[str]:
        view = calls.propose(user, "search_documents", query)
        assert view.status == "done", view.error
        return [hit["document"] for hit in view.result["results"]]

    assert documents(alice) == ["memo.md"]
    assert documents(bob) == []


def test_delete_removes_row_and_hits(library, tmp_path) -> None:
    path = write(
        tmp_path / "fleet.md", "# Fleet\n\n## Cars\n\nPool cars are booked in FleetBook.\n"
    )
    (doc_id,) = library.ingest([path]).document_ids
    assert library.search("how do I book a pool car", k=1)[0].document_id == doc_id
    library.delete(doc_id)
    assert rows(library) == [] and library.search("how do I book a pool car", k=5) == []
    with pytest.raises(NotFound):
        library.delete(doc_id)
    with pytest.raises(NotFound):
        library.extracted_text(doc_id)


def test_cli_ingest_and_search(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("db", "upgrade", data_dir=data).returncode == 0
    bad = write(tmp_path / "bad.docx", "not a docx")
    sources = [str(POLICIES / n) for n in ("it_security.txt", "remote_work.docx")]
    done = run_cli("ingest", *sources, str(bad), "--json", data_dir=data)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["documents"], summary["skipped"]) == (2, [])
    assert summary["failed"][0]["path"] == str(bad)
    assert "embedding" in done.stderr  # the progress bar
    queries = write(tmp_path / "q.txt", "minimum password length\nExplain photosynthesis.\n")
    found = run_cli("search", "--file", str(queries), "--json", "-k", "2", data_dir=data)
    assert found.returncode == 0, found.stderr
    first, second = [json.loads(line) for line in found.stdout.splitlines()]
    assert second == [] and len(first) == 2
    hit = first[0]
    assert hit["document"] == "it_security.txt" and "14 characters" in hit["text"]
    stored = data / "index" / "texts" / f"{hit['document_id']}-v1.txt"
    assert stored.read_text()[hit["start"] : hit["end"]] == hit["text"]
    refused = run_cli("search", "-k", "0", "leave", data_dir=data)
    assert refused.returncode == 2 and refused.stderr.startswith("error: ")
    neither = run_cli("search", data_dir=data)
    assert neither.returncode == 2 and "QUERY or --file" in neither.stderr
