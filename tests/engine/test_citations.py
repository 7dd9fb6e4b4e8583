"""Citations that point to the right place (issue 44), with files made by the formats' own libraries
(tests/support/handbooks.py): a chunk's heading path, slide and page are where its text is, on every store,
and every API that cites says it ("pump.pdf, p. 2", "launch.pptx, slide 3")."""

from __future__ import annotations

import time

import httpx
import pytest

from ragengine.filetypes import Extracted, to_document
from tests.support import handbooks as hb


def _index_files(base: str, index: str, files: dict[str, bytes]) -> None:
    """One document per file, as ``ragengine index`` and a source sync send them (``POST /index``)."""
    docs = []
    for name, data in files.items():
        found = to_document(name, data)
        assert isinstance(found, Extracted), found
        docs.append({"doc_id": f"docs:{name}", "text": found.text,
                     "metadata": {**found.metadata, "source": "docs", "path": name, "file_name": name}})
    r = httpx.post(f"{base}/index", json={"index_name": index, "documents": docs}, timeout=120)
    assert r.status_code == 200, r.text


def _hit(base: str, index: str, query: str, holding: str) -> dict:
    hits = httpx.post(f"{base}/retrieve", json={"index_name": index, "query": query, "max_node_count": 5},
                      timeout=60).json()["results"]
    found = [h for h in hits if holding in h["text"]]
    assert found, [h["text"][:80] for h in hits]
    return found[0]


def test_each_chunk_says_its_section_slide_and_page(make_server):
    with make_server() as (base, _):
        _index_files(base, "places", {"handbook.docx": hb.handbook_docx(), "launch.pptx": hb.launch_pptx(),
                                      "pump.pdf": hb.pump_pdf()})
        sabbatical = _hit(base, "places", hb.SABBATICAL_QUESTION, "paid sabbatical of twelve weeks")["metadata"]
        assert sabbatical["heading_path"] == [hb.HANDBOOK_TITLE, hb.SABBATICAL]  # not the title alone
        assert sabbatical["citation"] == "handbook.docx, Sabbatical policy"
        launch = _hit(base, "places", hb.LAUNCH_QUESTION, hb.LAUNCH_NOTES)["metadata"]
        assert (launch["slide"], launch["citation"]) == (3, "launch.pptx, slide 3")
        assert launch["heading_path"] == ["Slide 3: Launch date"] and launch["slide_count"] == 4
        pump = _hit(base, "places", hb.PUMP_QUESTION, "red reset switch")["metadata"]
        assert (pump["page"], pump["citation"], pump["heading_path"]) == (2, "pump.pdf, p. 2", ["Restarting the pump"])
        assert "pages" not in pump and pump["page_count"] == 3


def _wait(base: str, path: str, done, timeout_s: float = 180.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while not done(body := httpx.get(f"{base}{path}").json()):
        assert time.monotonic() < deadline, body
        time.sleep(0.1)
    return body


@pytest.mark.stores("faiss")
def test_a_pdf_citation_names_its_page_in_every_api_that_cites(make_server):
    """Chat completions' source_nodes, the Responses API's file_citation annotations and a session's answer."""
    with make_server() as (base, _):
        # chat completions over an index filled as `ragengine index` fills it; the PPTX answer says slide 3 too
        _index_files(base, "manuals", {"pump.pdf": hb.pump_pdf(), "launch.pptx": hb.launch_pptx()})
        for question, cited in ((hb.PUMP_QUESTION, "pump.pdf, p. 2"), (hb.LAUNCH_QUESTION, "launch.pptx, slide 3")):
            chat = httpx.post(f"{base}/v1/chat/completions", timeout=120, json={
                "index_name": "manuals", "messages": [{"role": "user", "content": question}]}).json()
            assert chat["source_nodes"][0]["metadata"]["citation"] == cited, chat["source_nodes"]

        # the Responses API over a vector store holding the uploaded PDF
        up = httpx.post(f"{base}/v1/files", files={"file": ("pump.pdf", hb.pump_pdf(), "application/pdf")},
                        data={"purpose": "assistants"}, timeout=120)
        assert up.status_code in (200, 202), up.text
        file_id = up.json()["id"]
        _wait(base, f"/v1/files/{file_id}", lambda f: f["status"] in ("processed", "error"))
        store = httpx.post(f"{base}/v1/vector_stores", json={"name": "manuals", "file_ids": [file_id]}).json()
        _wait(base, f"/v1/vector_stores/{store['id']}/files/{file_id}", lambda f: f["status"] != "in_progress")
        answer = httpx.post(f"{base}/v1/responses", timeout=120, json={
            "model": "any", "input": hb.PUMP_QUESTION,
            "tools": [{"type": "file_search", "vector_store_ids": [store["id"]]}]}).json()
        message = next(item for item in answer["output"] if item["type"] == "message")
        annotations = message["content"][0]["annotations"]
        assert annotations and all(a["type"] == "file_citation" and a["file_id"] == file_id for a in annotations)
        assert ("pump.pdf, p. 2", 2) in {(a["citation"], a["page"]) for a in annotations}, annotations
        assert "red reset switch" in message["content"][0]["text"]  # the extractive answer (no LLM here)

        # a session's answer about the same upload
        session = httpx.post(f"{base}/v1/sessions", json={"title": "Pump", "file_ids": [file_id]}).json()
        said = httpx.post(f"{base}/v1/sessions/{session['id']}/messages", timeout=120,
                          json={"content": hb.PUMP_QUESTION}).json()
        sources = said["assistant_message"]["metadata"]["sources"]
        restart = [s for s in sources if "red reset switch" in s["text"]]
        assert restart and restart[0]["metadata"]["citation"] == "pump.pdf, p. 2", sources


@pytest.mark.stores("faiss")
def test_a_chunk_hit_again_says_the_same_place_and_a_replaced_document_its_new_one(make_server):
    """A FAISS hit's place and citation are worked out on the chunk's first hit and kept with its document
    (index/search.py, ``_hit``): a second hit says the same, and a document whose metadata or text is updated
    says its new place."""
    def doc(heading: str, name: str) -> dict:
        text = f"# {heading}\n\nThe cooling pump of line 4 is restarted every Tuesday at 06:00.\n"
        return {"doc_id": "pump", "text": text, "metadata": {"file_name": name}}

    def hit(base: str) -> dict:
        return _hit(base, "kept", "when is the line 4 pump restarted?", "every Tuesday")

    with make_server() as (base, _):
        r = httpx.post(f"{base}/index", json={"index_name": "kept", "documents": [doc("Pumps", "pumps.md")]}, timeout=60)
        assert r.status_code == 200, r.text
        first = hit(base)
        assert first["metadata"]["heading_path"] == ["Pumps"] and first["metadata"]["citation"] == "pumps.md, Pumps"
        assert hit(base) == first
        r = httpx.post(f"{base}/indexes/kept/documents/metadata", timeout=60,
                       json={"documents": [{"doc_id": "pump", "metadata": {"file_name": "plant.md"}}]})
        assert r.status_code == 200 and r.json()["updated_documents"], r.text
        renamed = hit(base)
        assert renamed["metadata"]["citation"] == "plant.md, Pumps" and renamed["node_id"] == first["node_id"]
        r = httpx.post(f"{base}/indexes/kept/documents", json={"documents": [doc("Line 4", "line4.md")]}, timeout=60)
        assert r.status_code == 200 and r.json()["updated_documents"], r.text
        again = hit(base)
        assert again["metadata"]["heading_path"] == ["Line 4"] and again["metadata"]["citation"] == "line4.md, Line 4"
        assert again["node_id"] != first["node_id"]  # the chunk's text changed with its heading
