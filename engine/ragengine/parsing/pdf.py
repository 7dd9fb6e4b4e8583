"""The PDF reader (pdfplumber: text lines in reading order, headings told by their font size, ruled
tables as pipe tables, a ``[page N]`` label before each page) and OCR for scanned pages and images
(Tesseract through pytesseract, with a page cap and a time cap per file)."""

from __future__ import annotations

import io
import time
from collections import Counter
from typing import Any

from ragengine.parsing import limits as why
from ragengine.parsing.blocks import OverBudget, TextBuilder, Unreadable, markdown_table, too_many
from ragengine.parsing.limits import Parsed, ParseLimits

# -- PDF ---------------------------------------------------------------------------------------------
# A text line whose characters are mostly at least HEADING_RATIO times the body's size (the size most of
# the document's characters have), short and with a letter in it, is a heading; the largest such size is
# level 1, the next level 2, any smaller one level 3. A size that a quarter of the text has is body text.
HEADING_RATIO = 1.15
MAX_HEADING_CHARS = 120
MAX_HEADING_SHARE = 0.25
HEADING_LEVELS = 3


def _inside(obj: dict, box: tuple[float, float, float, float]) -> bool:
    x = (obj["x0"] + obj["x1"]) / 2
    y = (obj["top"] + obj["bottom"]) / 2
    return box[0] <= x <= box[2] and box[1] <= y <= box[3]


def _size(line: dict) -> float:
    """The font size most of the line's characters have."""
    sizes = Counter(round(float(c.get("size") or 0.0), 1) for c in line.get("chars") or ())
    return sizes.most_common(1)[0][0] if sizes else 0.0


def _pdf_page(page: Any) -> list[tuple[str, str, float]]:
    """The page's text lines in reading order (top to bottom) with their font size, and its ruled
    tables as pipe tables in their place: ``("line", text, size)`` / ``("table", markdown, 0)``."""
    tables = page.find_tables()
    boxes = [t.bbox for t in tables]
    text_page = page.filter(lambda o: not any(_inside(o, b) for b in boxes)) if boxes else page
    items: list[tuple[float, int, str, float]] = [
        (line["top"], 0, line["text"].strip(), _size(line)) for line in text_page.extract_text_lines()]
    items += [(t.bbox[1], 1, markdown_table(t.extract()), 0.0) for t in tables]
    items.sort(key=lambda it: (it[0], it[1]))
    return [("table" if is_table else "line", text, size) for _, is_table, text, size in items if text]


def heading_levels(sizes: Counter) -> dict[float, int]:
    """Font size -> heading level, from the characters counted at each size (``sizes``)."""
    if not sizes:
        return {}
    total = sum(sizes.values())
    body = max(sizes, key=lambda s: (sizes[s], -s))
    larger = sorted((s for s in sizes if s >= body * HEADING_RATIO and sizes[s] <= total * MAX_HEADING_SHARE),
                    reverse=True)
    return {s: min(i + 1, HEADING_LEVELS) for i, s in enumerate(larger)}


def page_blocks(items: list[tuple[str, str, float]], levels: dict[float, int]) -> list[str]:
    """A page's blocks: headings as ``#`` lines (a heading wrapped over lines of one size is one),
    the lines between them as one paragraph each (the line right above a table, its caption usually,
    stays right before it), tables and OCR'd text as they are."""
    blocks: list[str] = []
    lines: list[str] = []
    heading: tuple[int, list[str]] | None = None

    def flush() -> None:
        nonlocal heading, lines
        if heading is not None:
            blocks.append("#" * heading[0] + " " + " ".join(heading[1]))
            heading = None
        if lines:
            blocks.append("\n".join(lines))
            lines = []

    for kind, text, size in items:
        level = levels.get(size) if kind == "line" else None
        if level and len(text) <= MAX_HEADING_CHARS and any(ch.isalpha() for ch in text):
            if heading is not None and heading[0] == level and not lines:
                heading[1].append(text)
                continue
            flush()
            heading = (level, [text])
        elif kind == "line":
            if heading is not None:
                flush()
            lines.append(text)
        else:
            flush()
            blocks.append(text)
    flush()
    return blocks


def pdf(data: bytes, limits: ParseLimits) -> Parsed:
    import pdfplumber
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect

    try:
        document = pdfplumber.open(io.BytesIO(data))
    except (PDFPasswordIncorrect, PDFEncryptionError) as exc:
        raise Unreadable(f"the PDF is encrypted with a password ({exc.__class__.__name__})", why.ENCRYPTED) from exc
    except Exception as exc:  # pdfminer raises many kinds on broken files (pdfplumber wraps them)
        inner = exc.args[0] if exc.args and isinstance(exc.args[0], Exception) else exc
        name = inner.__class__.__name__
        if "Password" in name or "Encrypt" in name:
            raise Unreadable(f"the PDF is encrypted with a password ({name})", why.ENCRYPTED) from exc
        raise Unreadable(f"the PDF could not be read: {name}: {str(inner)[:200]}") from exc
    with document:
        pages = document.pages
        if len(pages) > limits.max_pages:
            raise too_many("pages", len(pages), limits.max_pages)
        ocr = OCR(limits)
        # Headings need the body's font size, which only the whole document tells: the pages' lines are
        # kept (text only, within the character budget) and written out once every page is read.
        read: list[list[tuple[str, str, float]]] = []
        sizes: Counter = Counter()
        chars = 0
        for number, page in enumerate(pages, 1):
            items: list[tuple[str, str, float]] = []
            if page.chars:  # a text layer: never OCR'd
                items = _pdf_page(page)
                for kind, text, size in items:
                    if kind == "line":
                        sizes[size] += len(text)
            elif page.images:  # a scanned page
                items = [("ocr", ocr.pdf_page(page, number), 0.0)]
            page.close()
            chars += sum(len(text) + 2 for _, text, _ in items)
            if chars > limits.max_chars:
                raise OverBudget(f"too large: more than {limits.max_chars} characters of text (the limit)")
            read.append(items)
        levels = heading_levels(sizes)
        out = TextBuilder(limits.max_chars)
        for number, items in enumerate(read, 1):
            out.section({"page": number})
            for block in page_blocks(items, levels):
                out.add(block)
        meta: dict = {"format": "pdf", "page_count": len(pages)}
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
