"""Small helpers over the official client for the integration tests: waits with timeouts, no sleeps."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from ragengine_operator import constants as c


def wait_for(fn: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll fn until it returns something truthy; fail with the last value after timeout seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except ApiException as exc:
            last = f"ApiException {exc.status}: {exc.reason}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


class Kube:
    def __init__(self, api: k8s.ApiClient, kubectl: list[str]) -> None:
        self.api = api
        self._kubectl = kubectl  # the kubectl built with the control plane, with the admin kubeconfig
        self.core = k8s.CoreV1Api(api)
        self.apps = k8s.AppsV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self._kubectl, *args], input=input, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc

    # --- RAGEngines --------------------------------------------------------------------------------
    def create_rag(self, ns: str, name: str, spec: dict, **query: Any) -> dict:
        body = {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": name}, "spec": spec}
        return self.custom.create_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, body, **query)

    def get_rag(self, ns: str, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, name)

    def patch_rag(self, ns: str, name: str, patch: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, name, patch)

    def delete_rag(self, ns: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL, name)

    def condition(self, ns: str, name: str, ctype: str) -> dict | None:
        for cond in (self.get_rag(ns, name).get("status") or {}).get("conditions") or []:
            if cond["type"] == ctype:
                return cond
        return None

    def wait_ready(self, ns: str, name: str, timeout: float = 60) -> dict:
        def ready():
            rag = self.get_rag(ns, name)
            status = rag.get("status") or {}
            conds = {x["type"]: x for x in status.get("conditions") or []}
            ok = conds.get(c.READY, {}).get("status") == "True"
            return rag if ok and status.get("observedGeneration") == rag["metadata"]["generation"] else None
        try:
            return wait_for(ready, timeout, f"RAGEngine {ns}/{name} Ready=True at its generation")
        except AssertionError as exc:  # say where it stands
            rag = self.get_rag(ns, name)
            raise AssertionError(f"{exc}; generation {rag['metadata']['generation']}, status {rag.get('status')}") from None

    def delete_all_ragengines(self, ns: str, force: bool = False) -> None:
        items = self.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL)["items"]
        for item in items:
            name = item["metadata"]["name"]
            if force:  # no operator serves this namespace: drop kopf's finalizer ourselves
                self.patch_rag(ns, name, {"metadata": {"finalizers": None}})
            try:
                self.delete_rag(ns, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        wait_for(lambda: not self.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, ns, c.PLURAL)["items"],
                 30, f"RAGEngines in {ns} deleted")

    # --- children ---------------------------------------------------------------------------------
    def deployment(self, ns: str, name: str) -> dict | None:
        try:
            return self.api.sanitize_for_serialization(self.apps.read_namespaced_deployment(name, ns))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pods(self, ns: str, selector: str) -> list:
        return self.core.list_namespaced_pod(ns, label_selector=selector).items

    def exists(self, kind: str, ns: str, name: str) -> bool:
        read = {
            "Deployment": self.apps.read_namespaced_deployment,
            "Service": self.core.read_namespaced_service,
            "PersistentVolumeClaim": self.core.read_namespaced_persistent_volume_claim,
        }[kind]
        try:
            read(name, ns)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
