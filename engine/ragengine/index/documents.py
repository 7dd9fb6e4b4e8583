"""Document operations every store shares: input validation and the add / update classification.

Pure functions: they see documents as plain values and what a store already holds as a mapping
``doc_id -> (text, metadata)``, and they decide; the stores (FAISS registry, PostgreSQL, Milvus) only
carry the decision out. So ``POST /index`` and ``POST /indexes/{name}/documents`` mean the same on every
backend:

- ``add``: a new ``doc_id`` is written; an existing one with the same text is left as it is (the call
  is idempotent); an existing one with other text is a 409 (use the update route).
- ``update``: unknown ids are reported as not found, identical ones as unchanged; a change of text
  re-chunks and re-embeds; a change of metadata alone keeps the chunks and their vectors unless it
  changes how the text is split or embedded (``split_type`` / ``language`` / ``title``).
- ``retrieve``: the same request checks and the same ``max_top_k`` cap (``retrieval_request``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from ragengine.errors import BadRequest, Conflict, PayloadTooLarge
from ragengine.retrieval import filters as flt

MAX_DOC_ID = 512
SPLIT_KEYS = ("split_type", "language", "title")  # title: contextual chunks embed it


@dataclass(frozen=True)
class NewDoc:
    doc_id: str
    text: str
    metadata: dict


@dataclass
class UpdatePlan:
    """What an update does: re-embed ``changed_text``, keep vectors for ``meta_only``."""

    changed_text: list[NewDoc] = field(default_factory=list)
    meta_only: list[NewDoc] = field(default_factory=list)
    result: dict[str, list] = field(
        default_factory=lambda: {"updated_documents": [], "unchanged_documents": [], "not_found_documents": []})

    @property
    def writes(self) -> list[NewDoc]:
        return self.changed_text + self.meta_only


def content_id(text: str) -> str:
    """The id a document gets when the client sends none: its text's SHA-256 (KAITO's choice)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_digest(text: str, metadata: dict) -> str:
    """A document's text and metadata as one digest (how two versions of an index are compared)."""
    h = hashlib.sha256(text.encode("utf-8"))
    h.update(b"\0")
    h.update(json.dumps(metadata, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    return h.hexdigest()


def clean_documents(documents: list[dict], *, max_chars: int, need_id: bool = False) -> list[NewDoc]:
    """Validate request documents; duplicates of one id with the same text collapse into one."""
    out: dict[str, NewDoc] = {}
    for i, doc in enumerate(documents):
        text = doc.get("text")
        if not isinstance(text, str) or not text.strip():
            raise BadRequest(f"documents[{i}]: Document text cannot be empty.")
        if len(text) > max_chars:
            raise PayloadTooLarge(f"documents[{i}]: text has {len(text)} characters; the limit is {max_chars}.")
        doc_id = doc.get("doc_id")
        if doc_id is None and need_id:
            raise BadRequest(f"documents[{i}]: doc_id is required.")
        if doc_id is None:
            doc_id = content_id(text)
        if not isinstance(doc_id, str) or not doc_id or len(doc_id) > MAX_DOC_ID:
            raise BadRequest(f"documents[{i}]: doc_id must be a non-empty string of at most {MAX_DOC_ID} characters.")
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise BadRequest(f"documents[{i}]: metadata must be an object.")
        if doc_id in out and out[doc_id].text != text:
            raise BadRequest(f"documents[{i}]: doc_id {doc_id!r} appears twice with different text.")
        out[doc_id] = NewDoc(doc_id, text, metadata)
    return list(out.values())


def metadata_updates(documents: list[dict], held_text: Mapping[str, str]) -> tuple[list[dict], list[dict]]:
    """A metadata-only update as a document update with the text the index holds (so the update keeps the
    chunks and their vectors: nothing is embedded): (those documents, the not-found ones as ``doc_out``)."""
    found, missing = [], []
    for doc in documents:
        text = held_text.get(doc["doc_id"])
        if text is None:
            missing.append(doc_out(doc["doc_id"], "", doc["metadata"]))
        else:
            found.append({"doc_id": doc["doc_id"], "text": text, "metadata": doc["metadata"]})
    return found, missing


def new_documents(index_name: str, docs: list[NewDoc], existing: Mapping[str, tuple[str, dict]]) -> list[NewDoc]:
    """The documents an add must write; raises 409 for an id that exists with other text."""
    new = []
    for doc in docs:
        held = existing.get(doc.doc_id)
        if held is None:
            new.append(doc)
        elif held[0] != doc.text:
            raise Conflict(f"Document '{doc.doc_id}' already exists in index '{index_name}' with different "
                           f"text; update it with POST /indexes/{index_name}/documents.")
    return new


def plan_update(docs: list[NewDoc], existing: Mapping[str, tuple[str, dict]]) -> UpdatePlan:
    plan = UpdatePlan()
    for doc in docs:
        held = existing.get(doc.doc_id)
        out = doc_out(doc.doc_id, doc.text, doc.metadata)
        if held is None:
            plan.result["not_found_documents"].append(out)
        elif held[0] == doc.text and held[1] == doc.metadata:
            plan.result["unchanged_documents"].append(out)
        else:
            same_split = held[0] == doc.text and not split_keys_changed(held[1], doc.metadata)
            (plan.meta_only if same_split else plan.changed_text).append(doc)
            plan.result["updated_documents"].append(out)
    return plan


def split_keys_changed(old: dict, new: dict) -> bool:
    return any(old.get(k) != new.get(k) for k in SPLIT_KEYS)


def doc_out(doc_id: str, text: str, metadata: dict) -> dict:
    return {"doc_id": doc_id, "text": text, "metadata": metadata, "hash_value": None, "is_truncated": False}


@dataclass(frozen=True)
class DocSearch:
    """What ``GET /indexes/{name}/documents`` narrows the listing to, beside the metadata filter: ``text``, a
    case-insensitive substring of the document's id or text (the console's search box); ``doc_id``, exactly
    that document (a citation's). Every store applies it before paging, so ``total_items`` counts matches."""

    text: str | None = None
    doc_id: str | None = None

    @classmethod
    def of(cls, text: str | None, doc_id: str | None) -> DocSearch | None:
        text = text if text and text.strip() else None
        return cls(text, doc_id) if text is not None or doc_id is not None else None

    @property
    def needle(self) -> str:
        return (self.text or "").lower()

    def matches(self, doc_id: str, text: str) -> bool:
        if self.doc_id is not None and doc_id != self.doc_id:
            return False
        return self.text is None or self.needle in doc_id.lower() or self.needle in text.lower()


def listed(doc_id: str, text: str, metadata: dict, max_text_length: int | None) -> dict:
    """A document as ``GET /indexes/{name}/documents`` shows it (text cut at ``max_text_length``)."""
    truncated = max_text_length is not None and len(text) > max_text_length
    return {"doc_id": doc_id, "text": text[:max_text_length] if truncated else text, "hash_value": None,
            "metadata": metadata, "is_truncated": truncated}


@dataclass(frozen=True)
class RetrievalRequest:
    """A checked ``retrieve`` call: ``top_k`` already capped at the engine's ``max_top_k``."""

    query: str
    top_k: int
    filter: flt.Filter | None
    max_chunks_per_document: int | None


def retrieval_request(query: object, top_k: int, *, filters: dict | None, metadata_filter: dict | None,
                      max_chunks_per_document: int | None, max_top_k: int,
                      acl: flt.Acl | None = None) -> RetrievalRequest:
    """Validate a retrieval the same way on every store (400s in this order: query, top_k, cap, filters).
    ``acl``: the caller's document ACL, ANDed with the client's filters (so it applies before top-k)."""
    if not isinstance(query, str) or not query.strip():
        raise BadRequest("Query string cannot be empty.")
    if top_k < 1:
        raise BadRequest("top_k must be at least 1.")
    if max_chunks_per_document is not None and max_chunks_per_document < 1:
        raise BadRequest("max_chunks_per_document must be at least 1.")
    f = flt.combine(flt.parse_filters(filters) if filters is not None else None, flt.from_metadata_filter(metadata_filter),
                    acl)
    return RetrievalRequest(query, min(top_k, max_top_k), f, max_chunks_per_document)
