"""The RAGEngine API's versions: v1beta1 (the hub, stored) and v1alpha1 (frozen, deprecated), the conversion
between them (convert.py, pure), the webhook that serves it (server.py), its TLS certificate (certs.py), the
CRD's conversion stanza kept in step (crd.py) and the rewrite of stored objects to the storage version
(storage.py). docs/upgrades.md tells the story.
"""
