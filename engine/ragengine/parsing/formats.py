"""The readers the child runs, one per kind; each returns ``Parsed`` or ``Refused`` and stops as
soon as a budget in ``ParseLimits`` (pages, characters, archive size, OCR pages and time) is exceeded.

Structured formats become Markdown: headings as ``#`` lines, list items as ``-``, tables as pipe
tables whose first row is the header (the chunker keeps a table whole or repeats that header in
every piece, ``index/chunking.py``). Sections (``Parsed.sections``) mark where each page, slide or
sheet starts. Libraries (compared in docs/documents.md): pdfplumber (pdfminer.six; pypdfium2
renders scanned pages), python-docx, python-pptx, openpyxl (read-only, values), the standard
``csv``, Pillow, and Tesseract through pytesseract for OCR.
"""

from __future__ import annotations

import csv
import datetime
import io
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ragengine.parsing.limits import Parsed, ParseLimits, Refused

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # an encrypted OOXML file (or a legacy .doc/.xls/.ppt)


class OverBudget(Exception):
    """A budget was exceeded deep inside a reader; becomes ``Refused(over_limit=True)``."""


class Unreadable(Exception):
    """The file cannot be read (its reason is the message); becomes ``Refused``."""


class TextBuilder:
    """The document's text, block by block, refusing once it passes ``max_chars``; records where each
    section (page, slide, sheet) starts."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.blocks: list[str] = []
        self.length = 0
        self.sections: list[tuple[int, dict]] = []

    def section(self, metadata: dict) -> None:
        self.sections.append((self.length + (2 if self.blocks else 0), metadata))

    def add(self, block: str) -> None:
        """Raises OverBudget once the text is over the limit (the reader stops there)."""
        block = block.strip()
        if not block:
            return
        self.length += len(block) + (2 if self.blocks else 0)
        self.blocks.append(block)
        if self.length > self.max_chars:
            raise OverBudget(f"too large: more than {self.max_chars} characters of text (the limit)")

    def parsed(self, metadata: dict) -> Parsed:
        text = "\n\n".join(self.blocks)
        # a section with no text of its own starts where the next one does: drop it
        sections = [(o, m) for i, (o, m) in enumerate(self.sections)
                    if o < len(text) and (i + 1 == len(self.sections) or self.sections[i + 1][0] > o)]
        return Parsed(text, metadata, sections)


def too_many(what: str, count: int, limit: int) -> OverBudget:
    return OverBudget(f"too large: {count} {what} (the limit is {limit})")


# -- Markdown ----------------------------------------------------------------------------------------
def cell_text(value: Any) -> str:
    """A table cell on one line, pipes escaped; numbers without a spurious '.0', dates in ISO form."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        value = value.isoformat()
    return " ".join(str(value).split()).replace("|", "\\|")


def markdown_table(rows: Iterable[Sequence[Any]]) -> str:
    """A pipe table, the first row its header; empty rows and trailing empty columns dropped."""
    clean = [[cell_text(v) for v in row] for row in rows]
    clean = [r for r in clean if any(r)]
    if not clean:
        return ""
    width = max((max((i + 1 for i, v in enumerate(r) if v), default=0) for r in clean), default=0)
    if width == 0:
        return ""
    clean = [(r + [""] * width)[:width] for r in clean]
    lines = ["| " + " | ".join(clean[0]) + " |", "|" + " --- |" * width]
    lines += ["| " + " | ".join(r) + " |" for r in clean[1:]]
    return "\n".join(lines)


# -- zip containers (DOCX, PPTX, XLSX) ----------------------------------------------------------------
def open_zip(data: bytes, limits: ParseLimits, what: str) -> None:
    """Refuse what the libraries would unpack past the budgets: too many members, too many bytes
    once inflated (the sizes zipfile enforces while reading), or a zip bomb's ratio."""
    if data.startswith(OLE_MAGIC):
        raise Unreadable(f"the {what} file is encrypted (password-protected) or in the legacy binary format")
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
                         f"{limits.max_unzipped_mb} MiB): a zip bomb or an oversized file")
    for m in members:
        if m.file_size > 10 * 1024 * 1024 and m.file_size > 200 * max(m.compress_size, 1):
            raise OverBudget(f"archive member {m.filename!r} inflates {m.file_size // max(m.compress_size, 1)}-fold "
                             "(a zip bomb)")


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
    meta: dict = {"format": "pptx", "slides": len(slides)}
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
    return out.parsed({"format": "xlsx", "sheets": len(names)})


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


# -- PDF ---------------------------------------------------------------------------------------------
def _inside(obj: dict, box: tuple[float, float, float, float]) -> bool:
    x = (obj["x0"] + obj["x1"]) / 2
    y = (obj["top"] + obj["bottom"]) / 2
    return box[0] <= x <= box[2] and box[1] <= y <= box[3]


def _pdf_page(page: Any) -> str:
    """The page's text lines in reading order (top to bottom), its ruled tables as pipe tables in
    their place; the line just above a table (its caption, usually) stays right before it."""
    tables = page.find_tables()
    boxes = [t.bbox for t in tables]
    text_page = page.filter(lambda o: not any(_inside(o, b) for b in boxes)) if boxes else page
    items: list[tuple[float, int, str]] = [(line["top"], 0, line["text"]) for line in text_page.extract_text_lines()]
    items += [(t.bbox[1], 1, markdown_table(t.extract())) for t in tables]
    items.sort(key=lambda it: (it[0], it[1]))
    blocks: list[str] = []
    lines: list[str] = []
    for _, is_table, text in items:
        if is_table:
            if lines:
                blocks.append("\n".join(lines))
                lines = []
            if text:
                blocks.append(text)
        elif text.strip():
            lines.append(text.strip())
    if lines:
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def pdf(data: bytes, limits: ParseLimits) -> Parsed:
    import pdfplumber
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect

    try:
        document = pdfplumber.open(io.BytesIO(data))
    except (PDFPasswordIncorrect, PDFEncryptionError) as exc:
        raise Unreadable(f"the PDF is encrypted with a password ({exc.__class__.__name__})") from exc
    except Exception as exc:  # pdfminer raises many kinds on broken files (pdfplumber wraps them)
        inner = exc.args[0] if exc.args and isinstance(exc.args[0], Exception) else exc
        name = inner.__class__.__name__
        if "Password" in name or "Encrypt" in name:
            raise Unreadable(f"the PDF is encrypted with a password ({name})") from exc
        raise Unreadable(f"the PDF could not be read: {name}: {str(inner)[:200]}") from exc
    with document:
        pages = document.pages
        if len(pages) > limits.max_pages:
            raise too_many("pages", len(pages), limits.max_pages)
        out = TextBuilder(limits.max_chars)
        ocr = OCR(limits)
        for number, page in enumerate(pages, 1):
            out.section({"page": number})
            if page.chars:  # a text layer: never OCR'd
                out.add(_pdf_page(page))
            elif page.images:  # a scanned page
                out.add(ocr.pdf_page(page, number))
            page.close()
        meta: dict = {"format": "pdf", "pages": len(pages)}
        if ocr.pages:
            meta["ocr_pages"] = ocr.pages
        return out.parsed(meta)


# -- OCR ---------------------------------------------------------------------------------------------
class OCR:
    """Tesseract (Debian's package, through pytesseract) with a page cap and a time cap per file.
    Pages are rendered at ``OCR_DPI`` (pypdfium2, through pdfplumber). Without Tesseract a scanned page
    gives no text, and the file is skipped as having none, with that reason."""

    DPI = 200

    def __init__(self, limits: ParseLimits) -> None:
        self.limits = limits
        self.pages = 0
        self.deadline = time.monotonic() + limits.ocr_s

    def _tesseract(self) -> Any:
        try:
            import pytesseract

            pytesseract.get_tesseract_version()
        except Exception as exc:
            raise Unreadable("the page is a scanned image and OCR is not installed (the engine image's OCR build "
                             "argument, or Debian's tesseract-ocr)") from exc
        return pytesseract

    def image(self, image: Any) -> str:
        self.pages += 1
        if self.pages > self.limits.ocr_max_pages:
            raise too_many("scanned pages to OCR", self.pages, self.limits.ocr_max_pages)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OverBudget(f"OCR took longer than {self.limits.ocr_s} s for this file (the limit)")
        tesseract = self._tesseract()
        try:
            return str(tesseract.image_to_string(image, lang=self.limits.ocr_languages, timeout=left))
        except tesseract.TesseractError as exc:  # a RuntimeError too: first
            raise Unreadable(f"OCR failed (languages {self.limits.ocr_languages!r}; each needs Debian's "
                             f"tesseract-ocr-<lang>): {' '.join(str(exc).split())[:300]}") from exc
        except RuntimeError as exc:  # pytesseract's "Tesseract process timeout"
            raise OverBudget(f"OCR took longer than {self.limits.ocr_s} s for this file (the limit)") from exc

    def pdf_page(self, page: Any, number: int) -> str:
        return self.image(page.to_image(resolution=self.DPI).original)


def image(data: bytes, limits: ParseLimits) -> Parsed:
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = limits.max_image_pixels  # larger: DecompressionBombError
    try:
        picture = Image.open(io.BytesIO(data))
        picture.load()
    except Image.DecompressionBombError as exc:
        raise OverBudget(f"the image has more than {limits.max_image_pixels} pixels (the limit)") from exc
    except Exception as exc:
        raise Unreadable(f"the image could not be read: {exc.__class__.__name__}: {str(exc)[:200]}") from exc
    out = TextBuilder(limits.max_chars)
    out.add(OCR(limits).image(picture))
    return out.parsed({"format": "image", "ocr_pages": 1})


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
        return Refused(str(exc), over_limit=True)
    except Unreadable as exc:
        return Refused(str(exc))
