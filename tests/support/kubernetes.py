"""The local control plane (hack/cluster.sh up) for engine tests that need real Kubernetes tokens.

``LocalCluster`` runs the kubectl built with the control plane against the admin kubeconfig, and mints
ServiceAccount tokens the way the API server does (RS256 with the cluster's own signing key, the claims
of a real token with other times), for the cases ``kubectl create token`` refuses: a token that has
already expired (the API's shortest lifetime is 10 minutes). The API server itself then judges them.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".cluster"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(part: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


class LocalCluster:
    def __init__(self, kubectl: Path) -> None:
        self.kubeconfig = STATE / "kubeconfig"
        self._kubectl = [str(kubectl), f"--kubeconfig={self.kubeconfig}"]
        config = yaml.safe_load(self.kubeconfig.read_text())
        self.api_url: str = config["clusters"][0]["cluster"]["server"]
        self.ca_file = STATE / "pki" / "ca.crt"
        self.signing_key = STATE / "pki" / "sa.key"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run([*self._kubectl, *args], input=input, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout

    def create_token(self, namespace: str, account: str, audience: str, duration: str = "1h") -> str:
        return self.kubectl("create", "token", account, "-n", namespace, f"--audience={audience}",
                            f"--duration={duration}").strip()

    def resign(self, token: str, **claims: object) -> str:
        """``token`` with some claims replaced (``exp``, ``iat``, ``nbf``), signed again with the cluster's key."""
        header, payload, _ = token.split(".")
        body = {**_unb64(payload), **claims}
        signing = f"{header}.{_b64(json.dumps(body).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.signing_key)],
                                   input=signing.encode(), capture_output=True, check=True, timeout=30).stdout
        return f"{signing}.{_b64(signature)}"


def local_cluster() -> LocalCluster:
    """The cluster of this checkout; the test FAILS (no skip) when it is not up, as the operator's do."""
    if not (STATE / "kubeconfig").exists():
        pytest.fail(f"the local control plane is not up ({STATE / 'kubeconfig'} is missing): run `hack/cluster.sh up`",
                    pytrace=False)
    out = subprocess.run([str(ROOT / "hack" / "cluster.sh"), "env"], capture_output=True, text=True, check=True).stdout
    cluster = LocalCluster(Path(out.split("PATH=")[1].split(":")[0]) / "kubectl")
    try:
        cluster.kubectl("get", "--raw", "/readyz")
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"the local control plane does not answer ({exc}): run `hack/cluster.sh up`", pytrace=False)
    return cluster
