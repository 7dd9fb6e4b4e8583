"""The PDF reader (pdfplumber: text lines in reading order, ruled tables as pipe tables) and OCR for
scanned pages and images (Tesseract through pytesseract, with a page cap and a time cap per file)."""

from __future__ import annotations

import io
import time
from typing import Any

from ragengine.parsing.blocks import OverBudget, TextBuilder, Unreadable, markdown_table, too_many
from ragengine.parsing.limits import Parsed, ParseLimits


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
