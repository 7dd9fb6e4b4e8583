"""The CRD's conversion webhook for a test cluster: the operator's own side server, run in this process on
loopback (the API server runs on this machine), with certificates the operator's own code makes; and the
CRD applied with its conversion stanza pointed at it.

In a cluster the chart's operator serves it behind a Service and keeps the stanza in step; here the tests'
operators run without the webhook (several at once, and in-process), so one webhook for the whole run
stands in for them: the same code, reached by URL instead of by Service.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ragengine_operator import constants as c
from ragengine_operator.conversion import certs
from ragengine_operator.conversion.server import SideServer
from ragengine_operator.conversion.webhook_config import PATH, client_config
from tests.support.server import port_for_external_server

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / f"{c.GROUP}_{c.PLURAL}.yaml"


@dataclass(frozen=True)
class Webhook:
    url: str
    ca_pem: bytes
    server: SideServer


@contextlib.contextmanager
def conversion_webhook(host: str = "127.0.0.1") -> Iterator[Webhook]:
    now = dt.datetime.now(dt.UTC)
    ca_cert, ca_key = certs.make_ca(now)
    cert, key = certs.make_serving(ca_cert, ca_key, ["localhost"], now, ips=(host,))
    server = SideServer(port_for_external_server(host), 0, lambda: None, host=host)
    server.reload(cert, key)
    server.start()
    try:
        yield Webhook(f"https://{host}:{server.webhook_port}{PATH}", ca_cert, server)
    finally:
        server.stop()


def install_crd(kube, webhook: Webhook) -> None:
    """The committed CRD, its conversion webhook pointed at ``webhook``, in place of whatever the cluster holds (a
    helm release's, an earlier run's), then Established. A replace, not an apply: a webhook is a Service or a URL,
    and an apply would keep another manager's field of the two."""
    import yaml

    from tests.operator.integration.kube import wait_for

    crd = yaml.safe_load(CRD_FILE.read_text())
    crd["spec"]["conversion"]["webhook"]["clientConfig"] = client_config(url=webhook.url, ca_pem=webhook.ca_pem)
    exists = kube.kubectl("get", "crd", c.CRD_NAME, check=False).returncode == 0
    kube.kubectl("replace" if exists else "create", "-f", "-", input=yaml.safe_dump(crd))
    # Right after the CRD is created its status may have no conditions yet, and `kubectl wait` then fails
    # at once instead of waiting (seen on a fresh cluster): wait on the condition itself.
    wait_for(lambda: kube.kubectl("wait", "--for=condition=Established", f"crd/{c.CRD_NAME}",
                                  "--timeout=5s", check=False).returncode == 0, 30, "the CRD to be Established")
