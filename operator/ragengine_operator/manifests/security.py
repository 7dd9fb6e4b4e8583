"""Pod Security "restricted" settings shared by both workloads (engine and vLLM).

One place, so the two pods cannot drift apart: PodSecurity admission in a namespace labelled
`pod-security.kubernetes.io/enforce: restricted` accepts both (tests/operator/integration).
"""

from __future__ import annotations

from typing import Any


def pod_security_context(uid: int) -> dict[str, Any]:
    """Non-root as `uid`, which also owns the volumes (fsGroup), under the runtime's seccomp profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,  # volumes (index, model cache) writable for the non-root user
        "fsGroupChangePolicy": "OnRootMismatch",  # no recursive chown of 100s of GB on every start
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """No privilege escalation, no capabilities."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def locked_down_pod(uid: int) -> dict[str, Any]:
    """The pod-spec fields both workloads share: restricted security context, no Service env links, and
    no API token (neither the engine nor vLLM calls the API server)."""
    return {
        "securityContext": pod_security_context(uid),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
    }
