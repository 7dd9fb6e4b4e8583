"""One API client for the operator's own calls (kopf uses its own connection for watches).

The kubeconfig is resolved at call time (in-cluster service account first, else $KUBECONFIG or
~/.kube/config): kubernetes' KUBE_CONFIG_DEFAULT_LOCATION is fixed at import time, too early for
tests that point KUBECONFIG at the local control plane.
"""

from __future__ import annotations

import os
from pathlib import Path

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config


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
