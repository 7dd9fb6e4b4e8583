"""The webhook's Secret on the real API server, written under the chart's admission policy
(conversion/certs.py ensure): made once by whichever replica comes first, shared by all of them, renewed when
it no longer fits, and only read when cert-manager writes it."""

from __future__ import annotations

import base64
import datetime as dt
import threading

import pytest
from kubernetes import client as k8s

from ragengine_operator.conversion import certs

from .conftest import OPERATOR_NAMESPACE

pytestmark = pytest.mark.cluster


def operator_core(kubeconfig) -> k8s.CoreV1Api:
    from kubernetes import config as k8s_config

    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(kubeconfig)))


def test_replicas_starting_together_make_one_secret_and_serve_the_same_certificate(kube, operator_identity):
    name = "rag-ragengine-webhook-tls"  # the chart's (release "rag"): the only Secret of its kind it may write
    names = certs.dns_names("rag-ragengine-webhook", OPERATOR_NAMESPACE, "cluster.local")
    if _exists(kube, name):
        kube.core.delete_namespaced_secret(name, OPERATOR_NAMESPACE)
    core = operator_core(operator_identity)  # as the operator, under its Role and the admission policy
    served: list[certs.Served] = []
    threads = [threading.Thread(target=lambda: served.append(certs.ensure(core, OPERATOR_NAMESPACE, name, names,
                                                                          manage=True))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(served) == 4 and len({s.cert_pem for s in served}) == 1  # one winner; the others read it
    secret = kube.core.read_namespaced_secret(name, OPERATOR_NAMESPACE)
    assert base64.b64decode(secret.data[certs.TLS_CERT]) == served[0].cert_pem
    assert secret.metadata.labels["app.kubernetes.io/managed-by"] == "ragengine-operator"
    version = secret.metadata.resource_version
    assert certs.ensure(core, OPERATOR_NAMESPACE, name, names, manage=True) == served[0]  # nothing to do
    assert kube.core.read_namespaced_secret(name, OPERATOR_NAMESPACE).metadata.resource_version == version

    # a Service renamed (other DNS names): a new serving certificate from the same CA
    other = certs.dns_names("rag2-ragengine-webhook", OPERATOR_NAMESPACE, "cluster.local")
    renewed = certs.ensure(core, OPERATOR_NAMESPACE, name, other, manage=True)
    assert renewed.cert_pem != served[0].cert_pem and renewed.ca_bundle_pem == served[0].ca_bundle_pem

    # a month before the serving certificate's end: renewed, the CA kept
    later = certs.ensure(core, OPERATOR_NAMESPACE, name, other, manage=True,
                         now=dt.datetime.now(dt.UTC) + dt.timedelta(days=340))
    assert later.cert_pem != renewed.cert_pem and later.ca_bundle_pem == renewed.ca_bundle_pem


def test_with_cert_manager_the_operator_only_reads_and_waits_for_the_secret(kube, operator_identity):
    name = "rag-ragengine-webhook-tls"
    names = certs.dns_names("rag-ragengine-webhook", OPERATOR_NAMESPACE, "cluster.local")
    if _exists(kube, name):
        kube.core.delete_namespaced_secret(name, OPERATOR_NAMESPACE)
    core = operator_core(operator_identity)
    with pytest.raises(RuntimeError, match="cert-manager writes it"):
        certs.ensure(core, OPERATOR_NAMESPACE, name, names, manage=False)
    assert not _exists(kube, name)  # it made nothing
    data = certs.renewed({}, names, dt.datetime.now(dt.UTC))  # as cert-manager's self-signed Certificate would
    kube.core.create_namespaced_secret(OPERATOR_NAMESPACE, {"metadata": {"name": name}, "type": "kubernetes.io/tls",
                                                            "data": {k: base64.b64encode(data[k]).decode() for k in
                                                                     (certs.TLS_CERT, certs.TLS_KEY, certs.CA_CERT)}})
    got = certs.ensure(core, OPERATOR_NAMESPACE, name, names, manage=False)
    assert (got.cert_pem, got.ca_bundle_pem) == (data[certs.TLS_CERT], data[certs.CA_CERT])
    kube.core.delete_namespaced_secret(name, OPERATOR_NAMESPACE)


def _exists(kube, name: str) -> bool:
    try:
        kube.core.read_namespaced_secret(name, OPERATOR_NAMESPACE)
        return True
    except k8s.ApiException as exc:
        if exc.status == 404:
            return False
        raise
