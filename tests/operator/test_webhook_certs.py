"""The conversion webhook's TLS (operator/ragengine_operator/conversion/certs.py, server.py): certificates made,
checked and renewed, and served over a real TLS connection that verifies them as the API server does (the CA
bundle, the Service's DNS name)."""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl

import pytest
from cryptography import x509

from ragengine_operator.conversion import certs
from ragengine_operator.conversion.server import SideServer
from tests.support.server import port_for_external_server

NOW = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
NAMES = certs.dns_names("rag-ragengine-webhook", "ragengine-system", "cluster.local")


def fresh(now: dt.datetime = NOW) -> dict[str, bytes]:
    return certs.renewed({}, NAMES, now)


def test_a_fresh_secret_serves_every_name_the_api_server_may_dial():
    data = fresh()
    assert certs.renewal_reason(data, NAMES, NOW) is None
    cert = x509.load_pem_x509_certificate(data[certs.TLS_CERT])
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert sans == ["rag-ragengine-webhook", "rag-ragengine-webhook.ragengine-system",
                    "rag-ragengine-webhook.ragengine-system.svc", "rag-ragengine-webhook.ragengine-system.svc.cluster.local"]


@pytest.mark.parametrize(("later", "why"), [
    (dt.timedelta(days=340), "the serving certificate expires on"),  # a month before its year is out
    (dt.timedelta(days=3650 - 300), "the CA expires on"),  # a CA within a year of its end
])
def test_certificates_near_their_end_are_made_again(later, why):
    assert why in (certs.renewal_reason(fresh(), NAMES, NOW + later) or "")


def test_a_renewal_keeps_the_ca_so_the_api_server_s_trust_holds():
    data = fresh()
    again = certs.renewed(data, NAMES, NOW + dt.timedelta(days=340))
    assert again[certs.CA_CERT] == data[certs.CA_CERT] and again[certs.CA_KEY] == data[certs.CA_KEY]
    assert again[certs.TLS_CERT] != data[certs.TLS_CERT]
    assert certs.renewal_reason(again, NAMES, NOW + dt.timedelta(days=340)) is None


def test_a_new_ca_comes_with_the_old_one_in_the_bundle_until_the_old_one_expires():
    data = fresh()
    later = NOW + dt.timedelta(days=3650 - 300)
    rotated = certs.renewed(data, NAMES, later)
    bundle = x509.load_pem_x509_certificates(rotated[certs.CA_CERT])
    old_ca = x509.load_pem_x509_certificate(data[certs.CA_CERT])
    assert len(bundle) == 2 and bundle[1] == old_ca and bundle[0] != old_ca  # the new one first: it signs
    assert certs.renewal_reason(rotated, NAMES, later) is None


@pytest.mark.parametrize("damage", ["missing key", "garbage", "other names"])
def test_a_damaged_or_foreign_secret_is_made_again(damage):
    data = fresh()
    if damage == "missing key":
        del data[certs.TLS_KEY]
        names = NAMES
    elif damage == "garbage":
        data[certs.TLS_CERT] = b"-----BEGIN CERTIFICATE-----\nbm9wZQ==\n-----END CERTIFICATE-----\n"
        names = NAMES
    else:
        names = certs.dns_names("other-webhook", "ragengine-system", "cluster.local")
    assert certs.renewal_reason(data, names, NOW)


def handshake_and_convert(port: int, ca_bundle: bytes, server_name: str) -> dict:
    """POST a ConversionReview as the API server does: TLS to the address, verified for the Service's name."""
    context = ssl.create_default_context(cadata=ca_bundle.decode())
    review = json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {
        "uid": "u", "desiredAPIVersion": "ragengine.io/v1beta1", "objects": [
            {"apiVersion": "ragengine.io/v1alpha1", "kind": "RAGEngine", "metadata": {"name": "x"},
             "spec": {"storage": {"size": "1Gi"}}}]}}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        tls.sendall(b"POST /convert HTTP/1.1\r\nHost: " + server_name.encode() + b"\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(review)}\r\nConnection: close\r\n\r\n".encode() + review)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])  # type: ignore[no-any-return]


def test_the_webhook_serves_over_verified_tls_and_presents_a_renewed_certificate_at_once():
    now = dt.datetime.now(dt.UTC)
    data = certs.renewed({}, NAMES, now)
    server = SideServer(port_for_external_server(), 0, lambda: None, host="127.0.0.1")
    server.reload(data[certs.TLS_CERT], data[certs.TLS_KEY])
    server.start()
    try:
        answer = handshake_and_convert(server.webhook_port, data[certs.CA_CERT], NAMES[2])
        assert answer["response"]["result"] == {"status": "Success"}
        assert answer["response"]["convertedObjects"][0]["spec"] == {"storage": {"volume": {"size": "1Gi"}}}
        with pytest.raises(ssl.SSLCertVerificationError):  # a name the certificate does not carry
            handshake_and_convert(server.webhook_port, data[certs.CA_CERT], "elsewhere.example")
        # a new certificate (from a new CA here): the next connection gets it, without a restart
        rotated = certs.renewed({}, NAMES, now)
        server.reload(rotated[certs.TLS_CERT], rotated[certs.TLS_KEY])
        with pytest.raises(ssl.SSLCertVerificationError):  # the old CA no longer verifies what is served
            handshake_and_convert(server.webhook_port, data[certs.CA_CERT], NAMES[2])
        answer = handshake_and_convert(server.webhook_port, rotated[certs.CA_CERT], NAMES[2])
        assert answer["response"]["result"]["status"] == "Success"
        assert server.served == 2
    finally:
        server.stop()
