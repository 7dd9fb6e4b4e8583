"""One API client for the operator's own calls (kopf uses its own connection for watches).

The kubeconfig is resolved at call time (in-cluster service account first, else $KUBECONFIG or
~/.kube/config): kubernetes' KUBE_CONFIG_DEFAULT_LOCATION is fixed at import time, too early for
tests that point KUBECONFIG at the local control plane.

``api_audiences``: what the API server accepts tokens for, as far as the operator can tell: the ``aud`` of
its own token (issued by the API server for itself: ``--api-audiences``) and the cluster's issuer (OIDC
discovery, which every ServiceAccount may read). An engine's access audience must be none of them.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
from pathlib import Path
from typing import Any

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.dynamic import DynamicClient

log = logging.getLogger(__name__)


def kubeconfig_path() -> str:
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and Path(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    ).exists()


def new_api_client(pool_size: int = 32) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    if in_cluster():
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(config_file=kubeconfig_path(), client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size  # reconciles run in parallel threads
    return k8s.ApiClient(configuration)


def kopf_login(**kwargs: object) -> kopf.ConnectionInfo | None:
    """kopf's credentials from the same source as ours."""
    if in_cluster():
        return kopf.login_with_service_account(**kwargs)  # type: ignore[arg-type]
    os.environ.setdefault("KUBECONFIG", kubeconfig_path())
    return kopf.login_with_kubeconfig(**kwargs)  # type: ignore[arg-type]


def _token_audiences(token: str) -> set[str]:
    """The ``aud`` of a JWT, read without verification (the operator's own token: only ever to refuse)."""
    parts = token.split(".")
    if len(parts) != 3:
        return set()
    try:
        claims: Any = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return set()
    aud = claims.get("aud") if isinstance(claims, dict) else None
    return {aud} if isinstance(aud, str) else {a for a in aud if isinstance(a, str)} if isinstance(aud, list) else set()


def api_audiences(dyn: DynamicClient) -> tuple[frozenset[str], bool]:
    """(the API server's audiences found, whether the issuer was read): see the module's docstring."""
    cfg = dyn.client.configuration
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook(cfg)  # in-cluster: the projected token, re-read
    found = _token_audiences(str((cfg.api_key or {}).get("authorization", "")).removeprefix("Bearer ").strip())
    try:
        resp = dyn.request("GET", "/.well-known/openid-configuration", serialize=False, _request_timeout=5)
        issuer = json.loads(resp.data).get("issuer")
    except Exception as exc:  # discovery disabled or not readable: the token's audiences still count
        log.info("cannot read the cluster's OIDC issuer: %s", exc)
        return frozenset(found), False
    if isinstance(issuer, str) and issuer:
        found.add(issuer)
    return frozenset(found), True
