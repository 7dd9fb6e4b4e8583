"""The key the operator shows an engine to read its index status, scoped to that one engine.

With its key required (the default), an engine's ``GET /health`` names its indexes and their versions only
to an admin (issue 22: the open endpoint named every index). The operator needs them for
``status.indexes`` and the ``Reindexing`` condition. It must not hold a tenant's key for that: it never
reads a tenant's Secret data. Nor may it send its own ServiceAccount token: the engine's image is the
tenant's to choose, and a hostile one would replay that token against the API server.

So each engine gets its own status key, ``HMAC-SHA256(status_key_secret, uid)``, derived by the operator
from the secret in its settings whenever needed (nothing stored). The engine's environment holds only its
SHA-256 (``status_key_sha256``). The key unlocks that engine's status details and nothing else: no route
of the API, no other engine (another uid, another key). Rotating the secret rolls every engine once.
"""

from __future__ import annotations

import hashlib
import hmac

from .labels import Owner


def status_key(owner: Owner) -> str | None:
    """The key the operator sends on GET /health; None when no secret is configured."""
    if not owner.status_key_secret:
        return None
    return hmac.new(owner.status_key_secret.encode(), owner.uid.encode(), hashlib.sha256).hexdigest()


def status_key_sha256(owner: Owner) -> str | None:
    """What the engine holds (its ``status_key_sha256`` setting)."""
    key = status_key(owner)
    return hashlib.sha256(key.encode()).hexdigest() if key else None
