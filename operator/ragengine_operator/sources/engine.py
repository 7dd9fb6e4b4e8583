"""The engine's HTTP API as a source sync uses it: what an index holds for a source, and the writes.

Writes go through the same routes clients use (``POST /index``, ``POST /indexes/{name}/documents``,
``POST /indexes/{name}/documents/metadata``, ``POST /indexes/{name}/documents/delete``), with the
engine's API key when auth is on, so a sync behaves the same on FAISS and on an external store and needs
no access to the engine's storage.

The engine's image is the tenant's, so each call is bounded as every call to a tenant's server is
(net/transport.py): one deadline over the whole call (``timeout``; a write embeds its batch within it) and
a byte cap on the answer (``max_bytes``), whatever the engine sends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from ragengine_operator.net.transport import BoundedTransport, ResponseTooLarge
from ragengine_operator.sources.plan import HASH_KEY, SOURCE_KEY, SyncPlan

PAGE = 100
BATCH = 32
# A sync pod's first connections can be refused while the network policy learns its address (kube-router
# refused a new pod for about a second on the real node; a Job that pushes at once never got through), and a
# restarting engine refuses for a while too. A refused connect sent nothing, so it is repeated, writes too.
CONNECT_GRACE_S = 30.0
FIRST_RETRY_S, MAX_RETRY_S = 0.25, 2.0
CALL_TIMEOUT_S = 600.0  # one call, whole: a batch of BATCH documents is embedded within it
MAX_ANSWER_BYTES = 32 * 1024 * 1024  # a page of PAGE documents' metadata, with room


def _index_path(index: str, rest: str = "") -> str:
    """``/indexes/<name>/<rest>`` with the name escaped whole: '?', '#', '/' or '..' in it never re-route."""
    return f"/indexes/{quote(index, safe='')}{rest}"


class EngineUnavailable(Exception):
    """The engine did not answer or refused a write; the sync is retried later."""


@dataclass
class Applied:
    added: int = 0
    updated: int = 0
    deleted: int = 0
    relabelled: int = 0  # metadata-only writes of documents kept unread

    @property
    def written(self) -> int:
        return self.added + self.updated + self.deleted + self.relabelled


class EngineClient:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = CALL_TIMEOUT_S,
                 connect_grace_s: float = CONNECT_GRACE_S, max_bytes: int = MAX_ANSWER_BYTES) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, trust_env=False,
                                 transport=BoundedTransport(timeout, max_bytes))
        self.connect_grace_s = connect_grace_s
        self.refused = 0  # connects refused (or timed out) and repeated so far
        self._held: dict[tuple[str, str], dict[str, dict]] = {}  # one listing per sync (a client lives for one)

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, path: str, **kwargs) -> httpx.Response:
        """One request; a connect that fails is repeated with backoff for ``connect_grace_s``."""
        deadline, delay = time.monotonic() + self.connect_grace_s, FIRST_RETRY_S
        while True:
            try:
                return self.http.request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                if time.monotonic() + delay > deadline:
                    raise
                self.refused += 1
                time.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_S)

    def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            resp = self._send(method, path, **kwargs)
        except ResponseTooLarge as exc:
            raise EngineUnavailable(f"the engine's answer was refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"engine unreachable: {exc}") from exc
        if resp.status_code >= 400 and resp.status_code != 404:
            raise EngineUnavailable(f"{method} {path} answered {resp.status_code}: {resp.text[:300]}")
        return resp

    def documents_of(self, index: str, source: str) -> dict[str, dict]:
        """id -> metadata of every document of ``source`` in ``index`` (empty when there is no index); listed
        once per client (the reader and the planner share it) until a write."""
        if (index, source) in self._held:
            return self._held[(index, source)]
        out: dict[str, dict] = {}
        offset = 0
        while True:
            resp = self._call("GET", _index_path(index, "/documents"), params={
                "limit": PAGE, "offset": offset, "max_text_length": 1, "metadata_filter": json.dumps({SOURCE_KEY: source})})
            if resp.status_code == 404:
                break
            page = resp.json()
            out.update({d["doc_id"]: d.get("metadata") or {} for d in page["documents"]})
            offset += PAGE
            if offset >= page["total_items"] or not page["documents"]:
                break
        self._held[(index, source)] = out
        return out

    def indexed(self, index: str, source: str) -> dict[str, str | None]:
        """id -> source_hash of every document of ``source`` in ``index`` (empty when there is no index)."""
        return {k: v.get(HASH_KEY) for k, v in self.documents_of(index, source).items()}

    def put_golden_set(self, index: str, source: str, path: str, revision: str | None, text: str) -> int | str:
        """Hand a golden set file to the engine (docs/evaluation.md): its question count, or the engine's
        refusal (a bad file is the source's note, not a failed sync)."""
        try:
            resp = self._send("PUT", _index_path(index, "/evaluations/golden-set"),
                              json={"source": source, "path": path, "revision": revision, "text": text})
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"engine unreachable: {exc}") from exc
        if resp.status_code in (400, 413, 422):
            try:
                body = resp.json()
                return str(body.get("detail") or (body.get("error") or {}).get("message") or resp.text)[:300]
            except ValueError:
                return resp.text[:300]
        if resp.status_code >= 400:
            raise EngineUnavailable(f"PUT golden set answered {resp.status_code}: {resp.text[:300]}")
        return int(resp.json()["questions"])

    def golden_set(self, index: str) -> dict | None:
        """What the engine holds as the index's golden set from a source (source, path, revision), if any."""
        resp = self._call("GET", _index_path(index, "/evaluations/golden-set"))
        return None if resp.status_code == 404 else resp.json()

    def has_index(self, index: str) -> bool:
        return self._call("GET", _index_path(index, "/documents"), params={"limit": 1, "max_text_length": 1}).status_code != 404

    def apply(self, index: str, plan: SyncPlan, chunking: dict | None = None,
              progress: Callable[[Applied], None] | None = None) -> Applied:
        """Write the plan in batches. A failure part-way says how much of the revision was written (the
        index then mixes two revisions until the next sync, which writes only the rest)."""
        done = Applied()
        self._held.clear()
        try:
            self._write(index, plan, chunking, done, progress or (lambda _: None))
        except EngineUnavailable as exc:
            if done.written:
                raise EngineUnavailable(
                    f"{exc}; partly synced: {done.added} of {len(plan.add)} added, {done.updated} of "
                    f"{len(plan.update)} updated, {done.relabelled} of {len(plan.relabel)} relabelled, {done.deleted} "
                    f"of {len(plan.delete)} deleted before the failure, the next sync writes the rest") from exc
            raise
        return done

    def _write(self, index: str, plan: SyncPlan, chunking: dict | None, done: Applied,
               progress: Callable[[Applied], None]) -> None:
        for i in range(0, len(plan.add), BATCH):
            body: dict = {"index_name": index, "documents": [d.body() for d in plan.add[i:i + BATCH]]}
            if chunking:
                body["chunking"] = chunking
            self._call("POST", "/index", json=body)
            done.added += len(body["documents"])
            progress(done)
        for i in range(0, len(plan.update), BATCH):
            docs = [d.body() for d in plan.update[i:i + BATCH]]
            self._call("POST", _index_path(index, "/documents"), json={"documents": docs})
            done.updated += len(docs)
            progress(done)
        for i in range(0, len(plan.relabel), PAGE):
            docs = [{"doc_id": key, "metadata": meta} for key, meta in plan.relabel[i:i + PAGE]]
            self._call("POST", _index_path(index, "/documents/metadata"), json={"documents": docs})
            done.relabelled += len(docs)
            progress(done)
        for i in range(0, len(plan.delete), 500):
            ids = plan.delete[i:i + 500]
            self._call("POST", _index_path(index, "/documents/delete"), json={"doc_ids": ids})
            done.deleted += len(ids)
            progress(done)

    def follow_chunking(self, index: str, chunking: dict) -> int | None:
        """A source's chunking changed: re-index the index to it (the engine keeps serving the old version
        and compares after resolving sizes, so an unchanged chunking starts nothing). -> the version being
        built, or None."""
        resp = self._call("POST", f"/indexes/{index}/reindex", json={"chunking": chunking, "only_if_changed": True})
        if resp.status_code != 202:  # 200: nothing changed; 404: no index yet (the first write makes it so)
            return None
        return (resp.json().get("job") or {}).get("version")

    def chunks(self, index: str) -> int | None:
        resp = self._call("GET", "/health")
        return ((resp.json().get("indexes") or {}).get(index) or {}).get("chunks")
