"""The conversion webhook's TLS: a CA and a serving certificate kept in one Secret that every replica serves.

The API server trusts the CA (the CRD's caBundle); the serving certificate names the webhook Service. The
operator makes both the first time and renews the serving certificate well before it expires (any replica:
writes carry the Secret's resourceVersion, so two replicas never both win). A CA near its end is replaced,
and the bundle then carries the old CA beside the new one until the old expires, so the API server keeps
trusting certificates signed by either while the replicas switch. With cert-manager (the chart's
``conversionWebhook.certManager``) cert-manager writes the Secret and the operator only reads it.

Pure functions (make, check) apart from the one I/O function, ``ensure``.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from .. import constants as c

log = logging.getLogger(__name__)

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=30)  # a serving certificate this close to its end is renewed
CA_RENEW_BEFORE = dt.timedelta(days=365)  # a CA this close to its end is replaced (certificates it signs live a year)
TLS_CERT, TLS_KEY, CA_CERT, CA_KEY = "tls.crt", "tls.key", "ca.crt", "ca.key"


@dataclass(frozen=True)
class Served:
    """What a replica serves and what the CRD's caBundle must hold."""

    cert_pem: bytes
    key_pem: bytes
    ca_bundle_pem: bytes


def dns_names(service: str, namespace: str, cluster_domain: str) -> list[str]:
    """Every name the API server may dial the Service by."""
    names = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]
    return [*names, f"{service}.{namespace}.svc.{cluster_domain}"] if cluster_domain else names


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(now: dt.datetime) -> tuple[bytes, bytes]:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{c.FIELD_MANAGER} webhook CA {now:%Y%m%d%H%M%S}")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def make_serving(ca_cert_pem: bytes, ca_key_pem: bytes, names: list[str], now: dt.datetime,
                 ips: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
    import ipaddress

    ca = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)
    key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else ips[0])]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=SERVING_DAYS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]  # an EC key: the CA's own
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _certs(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle) if bundle else []


def renewal_reason(data: dict[str, bytes], names: list[str], now: dt.datetime) -> str | None:
    """Why the Secret's certificates must be made again (None: they serve as they are)."""
    try:
        (ca,) = _certs(data[CA_CERT])[:1]
        serving = x509.load_pem_x509_certificate(data[TLS_CERT])
        serialization.load_pem_private_key(data[TLS_KEY], None)
        serialization.load_pem_private_key(data[CA_KEY], None)
    except (KeyError, ValueError) as exc:
        return f"missing or unreadable ({type(exc).__name__})"
    if ca.not_valid_after_utc - now < CA_RENEW_BEFORE:
        return f"the CA expires on {ca.not_valid_after_utc:%Y-%m-%d}"
    if serving.not_valid_after_utc - now < RENEW_BEFORE:
        return f"the serving certificate expires on {serving.not_valid_after_utc:%Y-%m-%d}"
    if serving.issuer != ca.subject:
        return "the serving certificate was not signed by the CA"
    have = set(serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName))
    if not set(names) <= have:
        return f"the serving certificate does not name {', '.join(sorted(set(names) - have))}"
    return None


def renewed(data: dict[str, bytes], names: list[str], now: dt.datetime) -> dict[str, bytes]:
    """The Secret's new data: a new serving certificate, from the same CA unless that one is near its end (then a
    new CA, with the old one kept in the bundle while it is still valid)."""
    try:
        old_cas = [ca for ca in _certs(data.get(CA_CERT, b"")) if ca.not_valid_after_utc > now]
        (current,) = old_cas[:1]
        serialization.load_pem_private_key(data[CA_KEY], None)
        keep_ca = current.not_valid_after_utc - now >= CA_RENEW_BEFORE
    except (KeyError, ValueError):
        old_cas, keep_ca = [], False
    if keep_ca:
        ca_cert, ca_key, bundle = old_cas[0].public_bytes(serialization.Encoding.PEM), data[CA_KEY], data[CA_CERT]
    else:
        ca_cert, ca_key = make_ca(now)
        bundle = ca_cert + b"".join(ca.public_bytes(serialization.Encoding.PEM) for ca in old_cas)
    cert, key = make_serving(ca_cert, ca_key, names, now)
    return {TLS_CERT: cert, TLS_KEY: key, CA_CERT: bundle, CA_KEY: ca_key}


def _decoded(secret: Any) -> dict[str, bytes]:
    import base64

    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def _encoded(data: dict[str, bytes]) -> dict[str, str]:
    import base64

    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def ensure(core: k8s.CoreV1Api, namespace: str, name: str, names: list[str], *, manage: bool,
           now: dt.datetime | None = None) -> Served:
    """The Secret's certificates, made or renewed first when ``manage`` (else as cert-manager wrote them)."""
    for _ in range(5):  # another replica may write between our read and our write: read again
        now = now or dt.datetime.now(dt.UTC)
        try:
            secret = core.read_namespaced_secret(name, namespace, _request_timeout=10)
        except ApiException as exc:
            if exc.status != 404:
                raise
            secret = None
        data = _decoded(secret) if secret is not None else {}
        if not manage:
            if secret is None or TLS_CERT not in data or TLS_KEY not in data:
                raise RuntimeError(f"Secret {namespace}/{name} has no tls.crt/tls.key yet (cert-manager writes it)")
            return Served(data[TLS_CERT], data[TLS_KEY], data.get(CA_CERT, b""))
        why = "it does not exist" if secret is None else renewal_reason(data, names, now)
        if why is None:
            return Served(data[TLS_CERT], data[TLS_KEY], data[CA_CERT])
        log.info("making the webhook's certificates in Secret %s/%s: %s", namespace, name, why)
        body = k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace,
                                      labels={c.LABEL_MANAGED_BY: c.FIELD_MANAGER, c.LABEL_PART_OF: "ragengine"}),
            type="Opaque", data=_encoded(renewed(data, names, now)))
        try:
            if secret is None:
                core.create_namespaced_secret(namespace, body, _request_timeout=10)
            else:
                assert body.metadata is not None and secret.metadata is not None
                body.metadata.resource_version = secret.metadata.resource_version
                core.replace_namespaced_secret(name, namespace, body, _request_timeout=10)
        except ApiException as exc:
            if exc.status != 409:  # 409: another replica wrote first; use what it wrote
                raise
    raise RuntimeError(f"Secret {namespace}/{name} kept changing under us")
