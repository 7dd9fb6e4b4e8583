"""The readers the child runs, one per kind; each returns ``Parsed`` or ``Refused`` and stops as
soon as a budget in ``ParseLimits`` (pages, characters, archive size, OCR pages and time) is exceeded.

Structured formats become Markdown: headings as ``#`` lines, list items as ``-``, tables as pipe
tables whose first row is the header (the chunker keeps a table whole or repeats that header in
every piece, ``index/chunking.py``). Sections (``Parsed.sections``) mark where each page, slide or
sheet starts, and so does a label line in the text (``[slide 3]``, ``parsing/units.py``). What the
metadata counts is named ``page_count``, ``slide_count``, ``sheet_count``: ``page``, ``pages``,
``slide`` and ``sheet`` are a chunk's place (``index/places.py``). Libraries (compared in
docs/documents.md): pdfplumber (pdfminer.six; pypdfium2 renders scanned pages), python-docx,
python-pptx, openpyxl (read-only, values), the standard ``csv``, Pillow, and Tesseract through
pytesseract for OCR.

This module has the office formats and the dispatch (``parse``); the PDF reader and OCR are in
``pdf.py``, the text builder and the errors every reader raises in ``blocks.py``.
"""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Callable, Iterable
from typing import Any

from ragengine.parsing import limits as why
from ragengine.parsing.blocks import OverBudget, TextBuilder, Unreadable, markdown_table, too_many
from ragengine.parsing.limits import Parsed, ParseLimits, Refused
from ragengine.parsing.pdf import image, pdf

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # an encrypted OOXML file (or a legacy .doc/.xls/.ppt)


# -- zip containers (DOCX, PPTX, XLSX) ----------------------------------------------------------------
def open_zip(data: bytes, limits: ParseLimits, what: str) -> None:
    """Refuse what the libraries would unpack past the budgets: too many members, too many bytes
    once inflated (the sizes zipfile enforces while reading), or a zip bomb's ratio."""
    if data.startswith(OLE_MAGIC):
        raise Unreadable(f"the {what} file is encrypted (password-protected) or in the legacy binary format",
                         why.ENCRYPTED)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise Unreadable(f"the {what} file is not a valid archive (truncated or corrupt): {exc}") from exc
    if len(members) > limits.max_zip_members:
        raise too_many("archive members", len(members), limits.max_zip_members)
    total = sum(m.file_size for m in members)
    if total > limits.max_unzipped_mb * 1024 * 1024:
        raise OverBudget(f"the archive would unpack to {total // (1024 * 1024)} MiB (the limit is "
                         f"{limits.max_unzipped_mb} MiB): a zip bomb or an oversized file", why.ZIP_BOMB)
    for m in members:
        if m.file_size > 10 * 1024 * 1024 and m.file_size > 200 * max(m.compress_size, 1):
            raise OverBudget(f"archive member {m.filename!r} inflates {m.file_size // max(m.compress_size, 1)}-fold "
                             "(a zip bomb)", why.ZIP_BOMB)


# -- DOCX --------------------------------------------------------------------------------------------
def _docx_paragraph(p: Any) -> str:
    text = p.text.strip()
    if not text:
        return ""
    style = (p.style.name if p.style is not None else "") or ""
    if style == "Title":
        return f"# {text}"
    if style.startswith("Heading "):
        level = style.removeprefix("Heading ").strip()
        if level.isdigit():
            return "#" * min(6, int(level) + 1) + f" {text}"  # the title (if any) is level 1
    if "List Number" in style:
        return f"1. {text}"
    numbered = p._p.pPr is not None and p._p.pPr.numPr is not None
    if "List" in style or numbered:
        return f"- {text}"
    return text


def docx(data: bytes, limits: ParseLimits) -> Parsed:
    import docx as python_docx
    from docx.table import Table

    open_zip(data, limits, "DOCX")
    document = python_docx.Document(io.BytesIO(data))
    out = TextBuilder(limits.max_chars)
    title = (document.core_properties.title or "").strip()
    items: list[str] = []  # consecutive paragraphs joined by one line break (lists stay lists)

    def flush() -> None:
        if items:
            out.add("\n".join(items))
            items.clear()

    for block in document.iter_inner_content():
        if isinstance(block, Table):
            flush()
            out.add(markdown_table([cell.text for cell in row.cells] for row in block.rows))
            continue
        line = _docx_paragraph(block)
        if line.startswith("#"):
            flush()
            out.add(line)
        elif line:
            items.append(line)
            if not line.startswith(("- ", "1. ")):
                flush()
    flush()
    meta: dict = {"format": "docx"}
    if title:
        meta["title"] = title
    return out.parsed(meta)


# -- PPTX --------------------------------------------------------------------------------------------
def _shape_blocks(shape: Any, title_id: int | None) -> Iterable[str]:
    if getattr(shape, "shape_id", None) == title_id:
        return
    if shape.shape_type is not None and int(shape.shape_type) == 6:  # a group: its shapes in order
        for inner in shape.shapes:
            yield from _shape_blocks(inner, title_id)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        yield markdown_table([cell.text for cell in row.cells] for row in shape.table.rows)
        return
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        lines = []
        for para in shape.text_frame.paragraphs:
            text = "".join(run.text for run in para.runs).strip()
            if text:
                lines.append(("  " * para.level + "- " + text) if para.level else text)
        if lines:
            yield "\n".join(lines)


def pptx(data: bytes, limits: ParseLimits) -> Parsed:
    from pptx import Presentation

    open_zip(data, limits, "PPTX")
    deck = Presentation(io.BytesIO(data))
    slides = list(deck.slides)
    if len(slides) > limits.max_pages:
        raise too_many("slides", len(slides), limits.max_pages)
    out = TextBuilder(limits.max_chars)
    for number, slide in enumerate(slides, 1):
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text.split()) if title_shape is not None else ""
        out.section({"slide": number, **({"slide_title": title} if title else {})})
        out.add(f"# Slide {number}: {title}" if title else f"# Slide {number}")
        for shape in slide.shapes:
            for block in _shape_blocks(shape, title_shape.shape_id if title_shape is not None else None):
                out.add(block)
        if slide.has_notes_slide:
            notes = (slide.notes_slide.notes_text_frame.text or "").strip() if slide.notes_slide.notes_text_frame else ""
            if notes:
                out.add(f"Notes: {notes}")
    meta: dict = {"format": "pptx", "slide_count": len(slides)}
    title = (deck.core_properties.title or "").strip()
    if title:
        meta["title"] = title
    return out.parsed(meta)


# -- XLSX and CSV ------------------------------------------------------------------------------------
def xlsx(data: bytes, limits: ParseLimits) -> Parsed:
    from openpyxl import load_workbook

    open_zip(data, limits, "XLSX")
    book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    names = book.sheetnames
    if len(names) > limits.max_pages:
        raise too_many("sheets", len(names), limits.max_pages)
    out = TextBuilder(limits.max_chars)
    budget = limits.max_chars
    for name in names:
        rows: list[list[Any]] = []
        size = 0
        for row in book[name].iter_rows(values_only=True):
            rows.append(list(row))
            size += sum(len(str(v)) + 3 for v in row if v is not None)
            if size > budget:
                raise OverBudget(f"too large: more than {limits.max_chars} characters of text (the limit)")
        table = markdown_table(rows)
        if table:
            out.section({"sheet": name})
            out.add(f"# Sheet: {name}\n\n{table}")
    book.close()
    return out.parsed({"format": "xlsx", "sheet_count": len(names)})


def decode_text(data: bytes) -> str:
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def csv_table(data: bytes, limits: ParseLimits) -> Parsed:
    text = decode_text(data)
    if len(text) > limits.max_chars:
        raise OverBudget(f"too large: {len(text)} characters (the limit is {limits.max_chars})")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    csv.field_size_limit(limits.max_chars)
    out = TextBuilder(limits.max_chars)
    out.add(markdown_table(csv.reader(io.StringIO(text), dialect)))
    return out.parsed({"format": "csv"})


READERS: dict[str, Callable[[bytes, ParseLimits], Parsed]] = {
    "pdf": pdf, "docx": docx, "pptx": pptx, "xlsx": xlsx, "csv": csv_table, "image": image,
}


def parse(kind: str, data: bytes, limits: ParseLimits) -> Parsed | Refused:
    reader = READERS.get(kind)
    if reader is None:
        return Refused(f"no reader for {kind!r}")
    try:
        return reader(data, limits)
    except OverBudget as exc:
        return Refused(str(exc), over_limit=True, code=exc.code)
    except Unreadable as exc:
        return Refused(str(exc), code=exc.code)
