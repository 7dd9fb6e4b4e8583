"""``ragengine index FOLDER``: a folder's files into an index, sending only what changed, and a report of
every file it skipped and why.

Each file is one document, id ``<source>:<path>`` (``source``: a name for this folder, by default its
own; ``path``: relative to it), metadata ``source``, ``path``, ``file_name`` and ``source_hash``. The
hash is of the file's bytes and of what decides its text (``TEXT_FORMAT``, the code and OCR options),
and it is kept **in the index**, with the document: before reading any file the command lists the
source's documents and their hashes (``GET /indexes/{name}/documents``, text cut to one character),
and a file whose hash the index already holds is neither parsed nor sent. So a CI job on a fresh
checkout, with no state of its own, sends nothing for an unchanged folder, and an index that was
rebuilt or restored is compared with what it really holds (a cache file beside the folder would be
lost with the runner, or would trust what the index no longer has). The source sync of the operator
keeps its hashes the same way (``ragengine_operator/sources/plan.py``).

Pure but for ``EngineIndex`` (the HTTP calls) and ``index_folder`` (reads the files one at a time).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ragengine.filetypes import Extracted, to_document
from ragengine.parsing.limits import ParseLimits

# What to_document makes of a file changed in a way worth re-sending it for: 2 = page, slide and sheet
# labels and headings in the text (citations with places). Part of every file's hash.
TEXT_FORMAT = 2
MAX_DOC_ID = 512
PAGE = 100


@dataclass(frozen=True)
class Skip:
    path: str
    code: str  # parsing.limits: encrypted, zip_bomb, memory, over_budget, unreadable, empty, unsupported, not_text
    reason: str


@dataclass
class Report:
    index: str
    source: str
    files: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    skipped: list[Skip] = field(default_factory=list)
    outside: int = 0  # symbolic links that lead out of the folder, not read

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, indent=2)

    def lines(self) -> list[str]:
        out = [f"skipped {s.path} ({s.code}): {s.reason}" for s in self.skipped]
        out.append(f"indexed {self.files} files into '{self.index}' (source '{self.source}'): {self.added} added, "
                   f"{self.updated} updated, {self.unchanged} unchanged, {self.deleted} deleted, "
                   f"{len(self.skipped)} skipped")
        return out


def doc_id(source: str, path: str) -> str:
    """``<source>:<path>``; a path too long for an id keeps its tail and gains a hash of the whole."""
    full = f"{source}:{path}"
    if len(full) <= MAX_DOC_ID:
        return full
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:16]
    return f"{source}:~{digest}:{path[-(MAX_DOC_ID - len(source) - 20):]}"


def file_hash(data: bytes, options: dict[str, Any]) -> str:
    h = hashlib.sha256(json.dumps({"format": TEXT_FORMAT, **options}, sort_keys=True).encode())
    h.update(b"\0")
    h.update(data)
    return h.hexdigest()


class EngineIndex:
    """The engine's document routes for one index (``client``: an ``httpx.Client`` on the engine)."""

    def __init__(self, client: Any, index: str) -> None:
        self.client, self.index = client, index
        self.path = f"/indexes/{quote(index, safe='')}"

    def _ok(self, resp: Any, what: str) -> Any:
        if resp.status_code != 200:
            raise IndexingError(f"{what} answered {resp.status_code}: {resp.text[:500]}")
        return resp.json()

    def held(self, source: str) -> dict[str, str | None]:
        """doc_id -> source_hash of the source's documents in the index (empty when there is no index)."""
        out: dict[str, str | None] = {}
        offset = 0
        while True:
            resp = self.client.get(f"{self.path}/documents", params={
                "limit": PAGE, "offset": offset, "max_text_length": 1, "metadata_filter": json.dumps({"source": source})})
            if resp.status_code == 404:
                return out
            page = self._ok(resp, f"GET {self.path}/documents")
            out.update({d["doc_id"]: (d.get("metadata") or {}).get("source_hash") for d in page["documents"]})
            offset += PAGE
            if offset >= page["total_items"] or not page["documents"]:
                return out

    def add(self, docs: list[dict]) -> None:
        self._ok(self.client.post("/index", json={"index_name": self.index, "documents": docs}), "POST /index")

    def update(self, docs: list[dict]) -> dict[str, list[str]]:
        """-> the ids ``updated``, ``unchanged`` and ``not_found`` (deleted meanwhile: the caller adds them)."""
        answer = self._ok(self.client.post(f"{self.path}/documents", json={"documents": docs}),
                          f"POST {self.path}/documents")
        return {k: [d["doc_id"] for d in answer.get(f"{k}_documents") or []] for k in ("updated", "unchanged", "not_found")}

    def delete(self, ids: list[str]) -> None:
        self._ok(self.client.post(f"{self.path}/documents/delete", json={"doc_ids": ids}),
                 f"POST {self.path}/documents/delete")


class IndexingError(Exception):
    """The engine refused a call or could not be reached; the message says which."""


@dataclass(frozen=True)
class Options:
    source: str
    code_aware: bool = True
    ocr_languages: str | None = None
    force: bool = False  # send every file, changed or not
    prune: bool = False  # delete the source's documents whose file is gone
    batch_size: int = 16

    def hashed(self) -> dict[str, Any]:
        return {"code_aware": self.code_aware, "ocr_languages": self.ocr_languages}


def index_folder(engine: EngineIndex, folder: Path, files: Iterable[Path], options: Options,
                 progress: Callable[[int], None] = lambda n: None) -> Report:
    """Send the files that changed; report what was done and every file skipped, with its reason."""
    report = Report(engine.index, options.source)
    held = engine.held(options.source)
    limits = ParseLimits(ocr_languages=options.ocr_languages) if options.ocr_languages else None
    seen: set[str] = set()
    adds: list[dict] = []
    updates: list[dict] = []

    def flush(final: bool = False) -> None:
        if adds and (final or len(adds) >= options.batch_size):
            engine.add(adds)
            report.added += len(adds)
            adds.clear()
        if updates and (final or len(updates) >= options.batch_size):
            done = engine.update(updates)
            if done["not_found"]:
                gone = set(done["not_found"])
                engine.add([d for d in updates if d["doc_id"] in gone])
            report.updated += len(done["updated"])
            report.unchanged += len(done["unchanged"])
            report.added += len(done["not_found"])
            updates.clear()

    for path in files:
        report.files += 1
        rel = path.relative_to(folder).as_posix()
        key = doc_id(options.source, rel)
        seen.add(key)
        try:
            data = path.resolve().read_bytes()
        except OSError as exc:
            report.skipped.append(Skip(rel, "unreadable", f"cannot read the file: {exc.strerror or exc}"))
            progress(1)
            continue
        digest = file_hash(data, options.hashed())
        if not options.force and held.get(key) == digest:
            report.unchanged += 1
            progress(1)
            continue
        found = to_document(path.name, data, code_aware=options.code_aware, limits=limits)
        del data
        if not isinstance(found, Extracted):
            report.skipped.append(Skip(rel, found.code, found.reason))
            progress(1)
            continue
        doc = {"doc_id": key, "text": found.text, "metadata": {
            **found.metadata, "source": options.source, "path": rel, "file_name": path.name, "source_hash": digest}}
        (updates if key in held else adds).append(doc)
        flush()
        progress(1)
    flush(final=True)
    if options.prune:
        gone = sorted(k for k in held if k not in seen)
        for i in range(0, len(gone), 500):
            engine.delete(gone[i:i + 500])
        report.deleted = len(gone)
    return report
