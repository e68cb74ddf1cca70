"""Files -> ParsedDocument: .txt, .md, .html, .pdf, .docx, or a ParseError saying why not."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from retrieval.textbuilder import TextBuilder
from retrieval.types import ParsedDocument, ParseError

DEFAULT_MAX_BYTES = 50 * 1024 * 1024
_NUMBERED_HEADING = re.compile(r"^(\d+(?:\.\d+)*)\.?\s+([A-Z][^.!?:;]{1,78})$")
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MD_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_MD_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_HTML_DROP = ("script", "style", "noscript", "template", "svg", "iframe", "head", "nav", "footer")
_HTML_BLOCKS = {"p", "pre", "blockquote", "dt", "dd", "figcaption", "address", "summary"}
_HTML_INLINE = {
    "a", "abbr", "b", "i", "em", "strong", "span", "code", "small", "sub", "sup", "u",
    "mark", "time", "label", "br", "s", "q", "cite", "kbd", "var", "font",
}  # fmt: skip


def supported_suffixes() -> list[str]:
    return sorted(_PARSERS)


def parse_file(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> ParsedDocument:
    """Parse one file; every refusal is a ParseError whose message names the file."""
    path = Path(path)
    parser = _PARSERS.get(path.suffix.lower())
    if parser is None:
        raise ParseError(
            f"{path.name}: unsupported file type '{path.suffix or '(none)'}'; "
            f"supported: {', '.join(supported_suffixes())}"
        )
    if not path.is_file():
        raise ParseError(f"{path.name}: not a readable file")
    size = path.stat().st_size
    if size > max_bytes:
        raise ParseError(
            f"{path.name}: {size / 1e6:.1f} MB is over the {max_bytes / 1e6:.0f} MB limit; "
            "split the file or raise the limit"
        )
    if size == 0:
        raise ParseError(f"{path.name}: the file is empty")
    parsed = parser(path)
    if not parsed.sections:
        raise ParseError(
            f"{path.name}: no extractable text (a scanned PDF needs OCR before upload)"
        )
    return parsed


def _decode(path: Path) -> str:
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise ParseError(f"{path.name}: looks like a binary file, not text")
    for encoding in ("utf-8-sig", "cp1252"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def _paragraphs(text: str) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line.strip():
            blocks[-1].append(line.rstrip())
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def parse_txt(path: Path) -> ParsedDocument:
    b = TextBuilder()
    for lines in _paragraphs(_decode(path)):
        if _table_block(b, lines):
            continue
        if len(lines) == 2 and set(lines[1].strip()) <= {"=", "-"}:
            b.heading(1 if "=" in lines[1] else 2, lines[0])
            continue
        if len(lines) == 1 and (level := _plain_heading_level(lines[0])):
            b.heading(level, lines[0])
            continue
        listy = all(_MD_LIST.match(line) for line in lines)
        b.block("\n".join(s.strip() for s in lines) if listy else " ".join(lines), listy)
    return b.build(path.stem)


def _plain_heading_level(line: str) -> int:
    line = line.strip()
    if (m := _NUMBERED_HEADING.match(line)) is not None:
        return m.group(1).count(".") + 1
    letters = [c for c in line if c.isalpha()]
    if letters and len(line) <= 60 and line.isupper() and not line.endswith("."):
        return 1
    return 0


def parse_md(path: Path) -> ParsedDocument:
    b = TextBuilder()
    text = re.sub(r"<!--.*?-->", "", _decode(path), flags=re.S)
    lines = text.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            end = len(lines) if end is None else end
            b.block("\n".join(lines[i + 1 : end]), keep_lines=True)
            i = end + 1
        elif (m := _MD_HEADING.match(line)) is not None:
            b.heading(len(m.group(1)), _md_inline(m.group(2)))
            i += 1
        elif not line.strip():
            i += 1
        else:
            i = _md_block(b, lines, i)
    return b.build(path.stem)


def _md_block(b: TextBuilder, lines: list[str], i: int) -> int:
    """One paragraph, list, table or setext heading starting at line i; returns the next line."""
    block: list[str] = []
    while i < len(lines) and lines[i].strip() and not _MD_HEADING.match(lines[i]):
        if lines[i].strip().startswith("```"):
            break
        block.append(lines[i])
        i += 1
    if len(block) == 2 and set(block[1].strip()) <= {"=", "-"} and len(block[1].strip()) >= 3:
        b.heading(1 if "=" in block[1] else 2, _md_inline(block[0]))
    elif not _table_block(b, block):
        if all(_MD_LIST.match(line) or line.startswith("  ") for line in block):
            b.block("\n".join(_md_inline(line.strip()) for line in block), keep_lines=True)
        else:
            b.block(_md_inline(" ".join(line.strip() for line in block)))
    return i


def _md_inline(text: str) -> str:
    text = _MD_LINK.sub(r"\1", text)
    return text.replace("**", "").replace("__", "").replace("`", "")


def _table_block(b: TextBuilder, lines: list[str]) -> bool:
    """A pipe table: a header, a rule line, then rows, each row kept as 'Header: value; ...'."""
    if len(lines) < 2 or "|" not in lines[0] or not _MD_TABLE_RULE.match(lines[1]):
        return False
    header = _cells(lines[0])
    for line in lines[2:]:
        b.row(_row_text(header, _cells(line)))
    return True


def _cells(line: str) -> list[str]:
    line = line.strip().removeprefix("|").removesuffix("|")
    return [_md_inline(c.strip()) for c in line.split("|")]


def _row_text(header: list[str], cells: list[str]) -> str:
    parts = []
    for n, cell in enumerate(cells):
        if not cell:
            continue
        name = header[n] if n < len(header) and header[n] else ""
        parts.append(f"{name}: {cell}" if name else cell)
    return "; ".join(parts)


def parse_html(path: Path) -> ParsedDocument:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(_decode(path), "lxml")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(list(_HTML_DROP)):
        tag.decompose()
    b = TextBuilder(title=title)
    _html_walk(b, soup.body or soup)
    return b.build(path.stem)


def _html_walk(b: TextBuilder, element) -> None:
    from bs4 import NavigableString, Tag
    from bs4.element import Comment

    pending: list[str] = []
    for child in element.children:
        if isinstance(child, Comment):
            continue
        if isinstance(child, NavigableString):
            pending.append(str(child))
            continue
        if not isinstance(child, Tag):
            continue
        if child.name in _HTML_INLINE:
            pending.append(child.get_text(" "))
            continue
        b.block(" ".join(pending))
        pending = []
        _html_element(b, child)
    b.block(" ".join(pending))


def _html_element(b: TextBuilder, tag) -> None:
    name = tag.name
    if re.fullmatch(r"h[1-6]", name):
        b.heading(int(name[1]), tag.get_text(" ", strip=True))
    elif name == "table":
        _html_table(b, tag)
    elif name in ("ul", "ol"):
        for item in tag.find_all("li", recursive=False):
            nested = [sub.extract() for sub in item.find_all(["ul", "ol", "table"])]
            b.block("- " + item.get_text(" ", strip=True))
            for sub in nested:
                _html_element(b, sub)
    elif name == "pre":
        b.block(tag.get_text(), keep_lines=True)
    elif name in _HTML_BLOCKS:
        b.block(tag.get_text(" ", strip=True))
    else:
        _html_walk(b, tag)


def _html_table(b: TextBuilder, table) -> None:
    caption = table.find("caption")
    if caption is not None:
        b.block(caption.get_text(" ", strip=True))
    rows = [tr for tr in table.find_all("tr") if tr.find_parent("table") is table]
    header: list[str] = []
    for n, tr in enumerate(rows):
        cells = tr.find_all(["th", "td"], recursive=False)
        values = [c.get_text(" ", strip=True) for c in cells]
        if n == 0 and (all(c.name == "th" for c in cells) or tr.find_parent("thead")):
            header = values
            continue
        b.row(_row_text(header, values))


def parse_pdf(path: Path) -> ParsedDocument:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ParseError(
                f"{path.name}: the PDF is password-protected; remove the password and upload again"
            )
        meta_title = (reader.metadata.title if reader.metadata else None) or ""
        pages = [page.extract_text() or "" for page in reader.pages]
    except ParseError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ParseError(f"{path.name}: not a readable PDF (corrupt or truncated: {exc})") from exc
    except Exception as exc:  # pypdf raises assorted errors on damaged files
        if "crypt" in str(exc).lower() or "password" in str(exc).lower():
            raise ParseError(f"{path.name}: the PDF is password-protected") from exc
        raise ParseError(f"{path.name}: not a readable PDF ({exc})") from exc
    b = TextBuilder(title=meta_title.strip())
    for number, text in enumerate(pages, start=1):
        b.page = number
        _pdf_page(b, text)
    return b.build(path.stem)


def _pdf_page(b: TextBuilder, text: str) -> None:
    """PDF text has no structure: numbered short lines are headings, the rest paragraphs."""
    paragraph: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        level = _plain_heading_level(line) if line else 0
        if line and line == b.title and not b.has_headings:
            level = 1
        if level or not line:
            b.block(" ".join(paragraph))
            paragraph = []
            if level:
                b.heading(level, line)
            continue
        if paragraph and paragraph[-1].endswith("-"):
            paragraph[-1] = paragraph[-1][:-1] + line
        else:
            paragraph.append(line)
    b.block(" ".join(paragraph))


def parse_docx(path: Path) -> ParsedDocument:
    import zipfile

    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ParseError(f"{path.name}: not a readable DOCX file (corrupt or not .docx)") from exc
    b = TextBuilder(title=(document.core_properties.title or "").strip())
    _docx_body(b, document)
    return b.build(path.stem)


def _docx_body(b: TextBuilder, document) -> None:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for element in document.element.body.iterchildren():
        tag = element.tag.rsplit("}", 1)[-1]
        if tag == "p":
            _docx_paragraph(b, Paragraph(element, document))
        elif tag == "tbl":
            table = Table(element, document)
            rows = [[cell.text.strip() for cell in row.cells] for row in table.rows]
            if rows:
                for values in rows[1:]:
                    b.row(_row_text(rows[0], values))


def _docx_paragraph(b: TextBuilder, paragraph) -> None:
    style = paragraph.style.name if paragraph.style is not None else ""
    text = paragraph.text
    if style == "Title":
        b.title = b.title or " ".join(text.split())
        b.heading(1, text)
    elif style.startswith("Heading") and style.split()[-1].isdigit():
        b.heading(int(style.split()[-1]), text)
    elif style.startswith("List"):
        b.block("- " + text)
    else:
        b.block(text)


_PARSERS: dict[str, Callable[[Path], ParsedDocument]] = {
    ".txt": parse_txt,
    ".text": parse_txt,
    ".md": parse_md,
    ".markdown": parse_md,
    ".html": parse_html,
    ".htm": parse_html,
    ".pdf": parse_pdf,
    ".docx": parse_docx,
}
