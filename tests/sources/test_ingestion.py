"""Per-source and per-index ingestion settings (issue 44): OCR languages, the formats a source accepts and
the index's chunking, from the RAGEngine spec through the sync worker to the parser and the engine."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from ragengine_operator.sources.protocol import SyncRequest
from ragengine_operator.sources.worker import run
from ragengine_operator.spec import RAGEngineSpec
from ragengine_operator.spec.sources import Source
from ragengine_operator.syncer.runner import Target
from tests.support import corpus
from tests.support.embedding import borrowed
from tests.support.server import serve_app

SPEC = {
    "indexes": [{"name": "manuals", "chunking": {"chunkSize": 128, "contextual": True},
                 "ingestion": {"ocrLanguages": "xyz", "formats": ["markdown", "pdf", "image"]}}],
    "sources": [{"name": "shelf", "index": "manuals", "configMap": {"name": "shelf"},
                 "ingestion": {"formats": ["markdown", "image"]}}],
}


def test_a_source_takes_its_index_settings_where_it_sets_none():
    target = Target.from_body("team", "rag", "uid-1", SPEC, {})
    assert target is not None
    (source,) = target.sources
    assert source.chunking is not None and source.chunking.model_dump(exclude_none=True) == {
        "chunk_size": 128, "contextual": True}
    assert source.ingestion is not None
    assert (source.ingestion.ocr_languages, source.ingestion.formats) == ("xyz", ["markdown", "image"])


def test_one_index_has_one_chunking():
    spec = {"indexes": [{"name": "manuals", "chunking": {"chunkSize": 128}}],
            "sources": [{"name": "a", "index": "manuals", "configMap": {"name": "a"}, "chunking": {"chunkSize": 64}}]}
    with pytest.raises(ValidationError, match="source 'a' and indexes\\[\\] set different chunking for index 'manuals'"):
        RAGEngineSpec.model_validate(spec)
    two = {"sources": [{"name": "a", "index": "x", "configMap": {"name": "a"}, "chunking": {"chunkSize": 64}},
                       {"name": "b", "index": "x", "configMap": {"name": "b"}, "chunking": {"chunkSize": 96}}]}
    with pytest.raises(ValidationError, match="source 'b' and source 'a' set different chunking"):
        RAGEngineSpec.model_validate(two)
    with pytest.raises(ValidationError, match="ocrLanguages"):
        RAGEngineSpec.model_validate({"sources": [{"name": "a", "configMap": {"name": "a"},
                                                   "ingestion": {"ocrLanguages": "eng;rm -rf"}}]})
    with pytest.raises(ValidationError, match="formats"):
        RAGEngineSpec.model_validate({"sources": [{"name": "a", "configMap": {"name": "a"},
                                                   "ingestion": {"formats": ["exe"]}}]})


@pytest.fixture
def engine(embedder, tmp_path):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    app = create_app(EngineSettings(data_dir=tmp_path / "data"))
    with borrowed(embedder) as own:
        app.state.embedder = own
        with serve_app(app) as base:
            yield base


def test_the_settings_reach_the_worker_the_parser_and_the_engine(engine, tmp_path: Path):
    """Through the worker's own entry (``run``), as a Job or a subprocess runs it: the PDF is skipped for its
    format, the scan is read with the index's OCR languages (an unknown one, so the parser's refusal names
    it), the Markdown reaches the engine in an index made with the index's chunking."""
    (source,) = Target.from_body("team", "rag", "uid-1", SPEC, {}).sources  # type: ignore[union-attr]
    files = {"guide.md": b"# Guide\n\nThe pump restarts with the red switch.", "manual.pdf": corpus.pdf_table_bytes(),
             "scan.png": corpus.png_bytes()}
    request = SyncRequest("sync", source.name, source.index_name, engine,
                          source.model_dump(mode="json", by_alias=True, exclude_none=True), configmap_revision="7")
    result = run(request, {}, None, {"binaryData": {k: base64.b64encode(v).decode() for k, v in files.items()}},
                 tmp_path)
    assert result.ok, result.message
    assert result.documents == 1 and result.skipped == 2
    assert result.skipped_examples["manual.pdf"] == ("format 'pdf' is not one this source accepts "
                                                     "(ingestion.formats: image, markdown)")
    assert "'xyz'" in result.skipped_examples["scan.png"], result.skipped_examples
    docs = httpx.get(f"{engine}/indexes/manuals/documents").json()["documents"]
    assert [d["doc_id"] for d in docs] == ["shelf:guide.md"]
    versions = httpx.get(f"{engine}/indexes/manuals/versions").json()
    assert versions["versions"][0]["chunking"] == {**versions["versions"][0]["chunking"], "chunk_size": 128,
                                                   "contextual": True}, versions


def test_an_edited_source_is_read_again_in_full():
    """The revision synced last is passed on (so an unchanged git commit is not read) only while the spec is
    the one synced: new ingestion settings must reach every file."""
    from ragengine_operator.sources.status import SourceState, spec_digest

    source = Source.model_validate(SPEC["sources"][0])
    synced = SourceState(digest=spec_digest(source), synced=True, revision="7")
    edited = source.model_copy(update={"ingestion": None})
    assert spec_digest(edited) != synced.digest
    from ragengine_operator.syncer import runner

    known = runner.known_revision
    assert known(source, synced) == "7" and known(edited, synced) is None
