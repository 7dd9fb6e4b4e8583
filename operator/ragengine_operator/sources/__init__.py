"""Declarative document sources (``spec.sources``): the sync worker's fetch (ConfigMap, git, HTTP, S3), extract,
plan and push, and the protocol between it and the operator.

The operator runs the syncs (``syncer``: it already holds the API access and the leader lock, so a source
revision is synced exactly once however many engine replicas serve), and the worker pushes documents through
the engine's own HTTP API, so the same code works with FAISS and with an external store. See docs/sources.md.
This package is one floor, above ``spec`` and ``net``: it imports nothing else of the operator, and neither
kopf nor the Kubernetes client (the sync image has neither; .importlinter).
"""
