"""Declarative document sources (``spec.sources``): fetch (ConfigMap, git, HTTP), extract, plan, push.

The operator runs the syncs (it already holds the API access and the leader lock, so a source revision
is synced exactly once however many engine replicas serve), and pushes documents through the engine's
own HTTP API, so the same code works with FAISS and with an external store. See docs/sources.md.
"""
