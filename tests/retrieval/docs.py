"""Real PDF and DOCX files written by the tests themselves (reportlab, python-docx, pypdf)."""

from __future__ import annotations

from pathlib import Path


def write_pdf(path: Path, pages: list[list[tuple[str, str]]], title: str = "Handbook") -> Path:
    """One list of (heading, body) per page."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()
    story = []
    for n, page in enumerate(pages):
        if n:
            story.append(PageBreak())
        for heading, body in page:
            story += [Paragraph(heading, styles["Heading2"]), Paragraph(body, styles["BodyText"])]
    SimpleDocTemplate(str(path), pagesize=A4, title=title).build(story)
    return path


def encrypt_pdf(source: Path, target: Path, password: str) -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(str(source)).pages:
        writer.add_page(page)
    writer.encrypt(password)
    with target.open("wb") as f:
        writer.write(f)
    return target


def write_docx(path: Path, title: str, sections: list[tuple[str, str]], table=None) -> Path:
    import docx

    document = docx.Document()
    document.add_heading(title, level=0)
    for heading, body in sections:
        document.add_heading(heading, level=1)
        document.add_paragraph(body)
    if table:
        document.add_heading("Rates", level=1)
        grid = document.add_table(rows=0, cols=len(table[0]))
        for row in table:
            for cell, value in zip(grid.add_row().cells, row, strict=True):
                cell.text = value
    document.save(str(path))
    return path
