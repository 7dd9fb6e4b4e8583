"""S3 sources and push-triggered syncs on the real control plane: the shared operator syncs a real S3 server's
bucket into a real engine; `kubectl annotate ... ragengine.io/sync-now` and a signed S3 event notification start
a sync at once (the source's interval is 5 minutes), an unsigned push is refused and changes nothing; refused
credentials are the source's status and a Warning Event. The push goes to the receiver as every operator
replica serves it (``receiver_url``: runtime.py's side server, with no lease and no kopf of its own), and the
shared operator, the leader here, runs the sync it asks for."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx

from ragengine_operator import constants as c
from ragengine_operator.receiver.verify import sign_standard
from tests.support.s3_server import s3_server

from .kube import wait_for
from .test_sources import documents, events, wait_source

HOOK_TOKEN = "whsec_" + "c2VjcmV0LWtleS1vZi10aGUtbGFrZS1ob29r"  # a Standard Webhooks key (base64)


def sync_workers() -> set[int]:
    """The sync workers running now (subprocess mode: ``python -m ragengine_operator sync-source``)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"sync-source" in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def _event(key: str) -> bytes:
    return json.dumps({"Records": [{"eventName": "s3:ObjectCreated:Put", "s3": {
        "bucket": {"name": "lake"}, "object": {"key": key}}}]}).encode()


def test_s3_source_syncs_on_request_and_on_a_signed_push(kube, namespace, source_engine, receiver_url, tmp_path):
    ns, n = namespace, "lake"
    index = f"lake-{ns}"
    with s3_server(tmp_path) as s3:
        s3.make_bucket("lake")
        s3.put("lake", "kb/a.md", "# A\n\nThe first page of the lake.\n")
        s3.put("lake", "kb/b.md", "# B\n\nThis page will be deleted.\n")
        kube.core.create_namespaced_secret(ns, {"metadata": {"name": "s3"}, "stringData": s3.secret})
        kube.core.create_namespaced_secret(ns, {"metadata": {"name": "hook"}, "stringData": {"token": HOOK_TOKEN}})
        kube.create_rag(ns, n, {"sources": [{
            "name": "lake", "index": index, "s3": {"endpoint": s3.base, "bucket": "lake", "prefix": "kb/",
                                                   "secretRef": {"name": "s3"}},
            "webhook": {"type": "generic", "secretRef": {"name": "hook"}}}]})
        first = wait_source(kube, ns, n, "lake", "the first sync", lambda e: e["synced"] and e.get("documents") == 2)
        assert first["type"] == "s3" and first["revision"].startswith("sha256:"), first
        assert set(documents(source_engine, index)) == {"lake:a.md", "lake:b.md"}

        # kubectl annotate: a sync now, although the interval (5 minutes) is far off
        s3.put("lake", "kb/a.md", "# A\n\nThe first page of the lake, edited.\n")
        s3.delete("lake", "kb/b.md")
        s3.put("lake", "kb/c.md", "# C\n\nA page dropped by a pipeline.\n")
        kube.kubectl("annotate", "-n", ns, f"rag/{n}", f"{c.SYNC_NOW_ANNOTATION}=first", "--overwrite")
        second = wait_source(kube, ns, n, "lake", "the requested sync", lambda e: e.get("revision") != first["revision"]
                             and e.get("lastHandledSyncRequest") == "first|", timeout=30)
        assert "1 added, 1 updated, 1 deleted" in second["message"], second
        docs = documents(source_engine, index)
        assert set(docs) == {"lake:a.md", "lake:c.md"} and "edited" in docs["lake:a.md"]["text"]

        # an unsigned push, and one signed with another key: refused, and nothing is asked of the operator
        s3.put("lake", "kb/d.md", "# D\n\nUploaded, then announced by an S3 event notification.\n")
        hook = f"{receiver_url}/hook/{ns}/{n}/lake"
        body = _event("kb/d.md")
        unsigned = httpx.post(hook, content=body)
        assert unsigned.status_code == 401 and "webhook-signature" in unsigned.text, unsigned.text
        stamp = int(time.time())
        other_key = sign_standard("whsec_b3RoZXI=", "evt-0", stamp, body)
        forged = httpx.post(hook, content=body, headers={"webhook-id": "evt-0", "webhook-timestamp": str(stamp),
                                                         "webhook-signature": other_key})
        assert forged.status_code == 401, forged.text
        annotations = kube.get_rag(ns, n)["metadata"].get("annotations") or {}
        assert f"{c.SOURCE_SYNC_ANNOTATION_PREFIX}lake" not in annotations

        # the signed event: the source's sync starts at once (a worker process, then its listing of the bucket)
        lists, workers = len(s3.lists), sync_workers()
        stamp = int(time.time())
        sent = time.monotonic()
        signed = httpx.post(hook, content=body, headers={"webhook-id": "evt-1", "webhook-timestamp": str(stamp),
                                                         "webhook-signature": sign_standard(HOOK_TOKEN, "evt-1", stamp, body)})
        assert signed.status_code == 202, signed.text
        answered = time.monotonic() - sent
        wait_for(lambda: sync_workers() - workers, 30, "the pushed sync's worker", interval=0.01)
        started = time.monotonic() - sent
        wait_for(lambda: len(s3.lists) > lists, 30, "the pushed sync to list the bucket", interval=0.02)
        listed = time.monotonic() - sent
        sys.__stderr__.write(f"\nsigned push: answered {answered:.2f} s, worker started {started:.2f} s, bucket "
                             f"listed {listed:.2f} s after the POST\n")
        assert started < 10, started  # the interval is 5 minutes: only the push can have started it
        third = wait_source(kube, ns, n, "lake", "the pushed sync", lambda e: e.get("documents") == 3, timeout=30)
        assert third["lastHandledSyncRequest"] == "first|evt-1", third
        assert "lake:d.md" in documents(source_engine, index)
        replay = httpx.post(hook, content=body, headers={"webhook-id": "evt-1", "webhook-timestamp": str(stamp),
                                                         "webhook-signature": sign_standard(HOOK_TOKEN, "evt-1", stamp, body)})
        assert replay.status_code == 409, replay.text


def test_refused_s3_credentials_are_the_sources_status_and_an_event(kube, namespace, tmp_path):
    ns, n = namespace, "locked"
    with s3_server(tmp_path) as s3:
        s3.make_bucket("lake")
        s3.put("lake", "a.md", "# A\n\nAlpha.\n")
        kube.core.create_namespaced_secret(ns, {"metadata": {"name": "s3"}, "stringData": {
            **s3.secret, "secretAccessKey": "not-the-key"}})
        kube.create_rag(ns, n, {"sources": [
            {"name": "lake", "s3": {"endpoint": s3.base, "bucket": "lake", "secretRef": {"name": "s3"}}},
            {"name": "gone", "s3": {"endpoint": s3.base, "bucket": "no-such-bucket", "secretRef": {"name": "s3"}}}]})
        entry = wait_source(kube, ns, n, "lake", "the refusal", lambda e: "refused the credentials" in e.get("message", ""))
        assert not entry["synced"] and "SignatureDoesNotMatch" in entry["message"], entry
        wait_for(lambda: any(e.reason == "SourceSyncFailed" and "refused the credentials" in e.message
                             for e in events(kube, ns, n)), 30, "the SourceSyncFailed Event")
        cond = wait_for(lambda: (x := kube.condition(ns, n, "SourcesSynced")) and x["reason"] == "SyncFailed" and x,
                        30, "SourcesSynced=False")
        assert "lake:" in cond["message"], cond
