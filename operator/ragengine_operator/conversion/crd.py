"""Keep the CRD's conversion webhook pointed at this operator's Service and trusting its CA.

Only the operator of the release that owns the CRD does this (the chart's ``conversionWebhook.manageCRD``,
on with ``crds.install``): two operators that both did would fight over the CRD. Helm's upgrades leave the
caBundle alone (it is in no manifest), so the operator's value stays until the CA changes.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client as k8s

from .. import constants as c
from .webhook_config import client_config

log = logging.getLogger(__name__)


def desired_conversion(namespace: str, service: str, ca_bundle_pem: bytes) -> dict[str, Any]:
    return {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": client_config(namespace, service, ca_pem=ca_bundle_pem)}}


def sync_conversion(ext: k8s.ApiextensionsV1Api, namespace: str, service: str, ca_bundle_pem: bytes) -> bool:
    """Patch spec.conversion when it differs from ours; True when it was patched."""
    crd = ext.read_custom_resource_definition(c.CRD_NAME, _request_timeout=10)
    want = desired_conversion(namespace, service, ca_bundle_pem)
    have = k8s.ApiClient().sanitize_for_serialization(crd.spec.conversion) or {}
    if have == want:
        return False
    ext.patch_custom_resource_definition(c.CRD_NAME, {"spec": {"conversion": want}}, _request_timeout=10)
    log.info("CRD %s: conversion webhook set to Service %s/%s with the current CA", c.CRD_NAME, namespace, service)
    return True
