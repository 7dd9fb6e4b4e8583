"""Files sent to ``POST /index/files`` become documents: the one extractor (``filetypes.to_document``,
the bounded parser for the costly formats) in the engine's parse pool, then one document per page,
slide or sheet, or one per file for formats without them."""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

from ragengine.errors import BadRequest, Unprocessable, UnsupportedMediaType
from ragengine.filetypes import Extracted, to_document
from ragengine.parsing.limits import ParseLimits

LANGUAGES = re.compile(r"^[A-Za-z_]{3,16}(\+[A-Za-z_]{3,16})*$")
SECTION_KEYS = ("page", "slide", "sheet")


def split_sections(found: Extracted) -> list[tuple[str, dict]]:
    """(text, metadata) per section of an extracted file; the whole text when it has none."""
    if not found.sections:
        return [(found.text, {})]
    bounds = [o for o, _ in found.sections] + [len(found.text)]
    out = []
    for (start, meta), end in zip(found.sections, bounds[1:], strict=True):
        piece = found.text[start:end].strip()
        if piece:
            out.append((piece, meta))
    return out


def file_documents(name: str, data: bytes, found: Extracted, extra: dict | None) -> list[dict]:
    """The documents of one extracted file: ids ``<name>`` (one section) or ``<name>#<key>=<value>``."""
    base = {"file_name": name, "file_sha256": hashlib.sha256(data).hexdigest(), **found.metadata, **(extra or {})}
    sections = split_sections(found)
    docs = []
    for text, meta in sections:
        key = next((f"{k}={meta[k]}" for k in SECTION_KEYS if k in meta), None)
        doc_id = f"{name}#{key}" if key and len(sections) > 1 else name
        docs.append({"doc_id": doc_id, "text": text, "metadata": {**base, **meta}})
    return docs


async def documents_of(app: Any, name: str, data: bytes, extra: dict | None, ocr_languages: str | None) -> list[dict]:
    settings = app.state.settings
    if ocr_languages is not None and not LANGUAGES.match(ocr_languages):
        raise BadRequest(f"ocr_languages {ocr_languages!r}: Tesseract language codes joined by '+', e.g. 'eng+deu'.")
    from ragengine.conversations.ingestion import parse_limits

    limits: ParseLimits = parse_limits(settings, **({"ocr_languages": ocr_languages} if ocr_languages else {}))
    loop = asyncio.get_running_loop()
    found = await loop.run_in_executor(app.state.ingestion.parsers, lambda: to_document(
        name, data, max_chars=settings.max_document_chars, limits=limits))
    if isinstance(found, Extracted):
        return file_documents(name, data, found, extra)
    if found.reason.startswith("unsupported file type"):
        raise UnsupportedMediaType(f"{name!r}: {found.reason}.")
    raise Unprocessable(f"{name!r} was not indexed: {found.reason}.")
