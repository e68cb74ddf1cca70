from __future__ import annotations

from pathlib import Path

import pytest

from retrieval import ParsedDocument, ParseError, parse_file
from tests.retrieval.docs import encrypt_pdf, write_docx, write_pdf
from tests.retrieval.shared import POLICIES


def assert_offsets(doc: ParsedDocument) -> None:
    assert doc.sections, "no sections"
    for section in doc.sections:
        assert doc.text[section.start : section.end] == section.text
        assert section.text.strip() == section.text and section.text


@pytest.mark.parametrize("name", sorted(p.name for p in POLICIES.iterdir()))
def test_every_format_of_the_evaluation_set_parses_with_exact_offsets(name: str) -> None:
    assert_offsets(parse_file(POLICIES / name))


def test_markdown_headings_tables_and_inline_markup(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    path.write_text(
        "# Guide\n\nIntro with **bold** and a [link](http://x.example).\n\n"
        "## Rates\n\n| Item | Price |\n|---|---|\n| Tea | 3 |\n| Cake | 5 |\n\n"
        "### Notes\n\n- first\n- second\n\n```\ncode  block\n```\n"
    )
    doc = parse_file(path)
    assert_offsets(doc)
    assert doc.title == "Guide"
    texts = [(s.headings, s.text) for s in doc.sections]
    assert texts[0] == (["Guide"], "Intro with bold and a link.")
    assert (["Guide", "Rates"], "Item: Tea; Price: 3") in texts
    assert (["Guide", "Rates"], "Item: Cake; Price: 5") in texts
    notes = [t for h, t in texts if h == ["Guide", "Rates", "Notes"]]
    assert notes == ["- first\n- second\n\ncode  block"]


def test_html_keeps_structure_and_drops_scripts_styles_and_navigation() -> None:
    doc = parse_file(POLICIES / "expenses.html")
    assert_offsets(doc)
    assert doc.title == "Travel and Expenses Policy"
    assert "tracking code" not in doc.text and "font-family" not in doc.text
    assert "Intranet home" not in doc.text
    rows = [s for s in doc.sections if s.headings[-1] == "Meal Allowance"]
    assert (
        "Destination: United States; Daily meal allowance: USD 90; "
        "Breakfast included at hotel: deduct USD 18"
    ) in [s.text for s in rows]
    claims = next(s for s in doc.sections if s.headings[-1] == "Submitting Expense Claims")
    assert claims.text.startswith("- Submit claims in the expense app")


def test_plain_text_numbered_and_underlined_headings(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(
        "Office Notes\n============\n\nGeneral text here.\n\n1. Keys\n\nAsk reception.\n\n"
        "1.1 Spare Keys\n\nThe safe holds them.\n"
    )
    doc = parse_file(path)
    assert_offsets(doc)
    assert [(s.headings, s.text) for s in doc.sections] == [
        (["Office Notes"], "General text here."),
        (["1. Keys"], "Ask reception."),
        (["1. Keys", "1.1 Spare Keys"], "The safe holds them."),
    ]


def test_pdf_pages_and_headings_are_kept(tmp_path: Path) -> None:
    path = write_pdf(
        tmp_path / "h.pdf",
        [
            [("1. Arrival", "Sign in at the front desk."), ("2. Badges", "Wear your badge.")],
            [("3. Parking", "Park in zone C after 9 o'clock.")],
        ],
    )
    doc = parse_file(path)
    assert_offsets(doc)
    assert [(s.headings[-1], s.page) for s in doc.sections] == [
        ("1. Arrival", 1),
        ("2. Badges", 1),
        ("3. Parking", 2),
    ]
    assert doc.sections[-1].text == "Park in zone C after 9 o'clock."
    assert doc.title == "Handbook"


def test_docx_headings_and_table_rows(tmp_path: Path) -> None:
    path = write_docx(
        tmp_path / "r.docx",
        "Relocation",
        [("Moving Costs", "We pay the removal firm."), ("Housing", "Two months of rent.")],
        table=[("City", "Allowance"), ("Oslo", "NOK 30 000"), ("Bergen", "NOK 25 000")],
    )
    doc = parse_file(path)
    assert_offsets(doc)
    assert doc.title == "Relocation"
    assert [(s.headings[-1], s.text) for s in doc.sections] == [
        ("Moving Costs", "We pay the removal firm."),
        ("Housing", "Two months of rent."),
        ("Rates", "City: Oslo; Allowance: NOK 30 000"),
        ("Rates", "City: Bergen; Allowance: NOK 25 000"),
    ]


def _reason(path: Path, **kwargs) -> str:
    with pytest.raises(ParseError) as info:
        parse_file(path, **kwargs)
    return str(info.value)


def test_bad_files_are_rejected_with_a_reason(tmp_path: Path) -> None:
    good = write_pdf(tmp_path / "good.pdf", [[("1. Intro", "Hello there.")]])
    locked = encrypt_pdf(good, tmp_path / "locked.pdf", "s3cret")
    assert "password-protected" in _reason(locked)

    corrupt = tmp_path / "broken.pdf"
    corrupt.write_bytes(good.read_bytes()[:200])
    assert "broken.pdf" in _reason(corrupt) and "PDF" in _reason(corrupt)

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "empty" in _reason(empty)

    blank = tmp_path / "blank.md"
    blank.write_text("\n\n   \n")
    assert "no extractable text" in _reason(blank)

    big = tmp_path / "big.txt"
    big.write_text("word " * 1000)
    assert "over the" in _reason(big, max_bytes=1000)

    sheet = tmp_path / "sheet.xlsx"
    sheet.write_bytes(b"PK")
    assert "unsupported file type '.xlsx'" in _reason(sheet)

    fake_docx = tmp_path / "fake.docx"
    fake_docx.write_text("not a zip")
    assert "not a readable DOCX" in _reason(fake_docx)

    binary = tmp_path / "image.txt"
    binary.write_bytes(b"\x89PNG\x00\x00\x00" * 10)
    assert "binary" in _reason(binary)
