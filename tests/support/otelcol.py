"""A real OpenTelemetry Collector for the tests: OTLP in (gRPC and HTTP), a JSON-lines file out.

``collector(tmp_path)`` builds the binary once (hack/otelcol/build.sh: the collector's Go modules, compiled
into ~/.cache/ragengine/otelcol; minutes cold, nothing after), starts it on two loopback ports and yields a
``Collector``: its endpoints, and ``spans()``, every span the file exporter wrote so far, flattened with
its resource's service name. ``wait_for(predicate)`` reads the file until the spans satisfy ``predicate``
(the file exporter flushes every 100 ms) or the deadline passes.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.server import port_for_external_server

ROOT = Path(__file__).resolve().parents[2]
READY = "Everything is ready"
CONFIG = """\
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: "127.0.0.1:{grpc}"}}
      http: {{endpoint: "127.0.0.1:{http}"}}
exporters:
  file:
    path: "{out}"
    flush_interval: 100ms
service:
  telemetry:
    metrics: {{level: none}}
  pipelines:
    traces: {{receivers: [otlp], exporters: [file]}}
"""


def binary() -> Path:
    """The collector's path (built on first use)."""
    out = subprocess.run(["bash", str(ROOT / "hack/otelcol/build.sh")], check=True, capture_output=True, text=True,
                         timeout=1800)
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass
class Collector:
    grpc: str  # http://127.0.0.1:PORT (OTLP/gRPC)
    http: str  # http://127.0.0.1:PORT (OTLP/HTTP; traces at /v1/traces)
    out: Path

    def raw(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def spans(self) -> list[dict]:
        """Every exported span: the OTLP JSON span plus ``service`` (its resource's service.name)."""
        found = []
        raw = self.raw()
        # The collector may be writing a line as it is read: only the lines it has finished (up to the last
        # newline) are whole JSON; a partial last line failed json.loads (a flaky tracing test).
        for line in raw[:raw.rfind("\n") + 1].splitlines():
            if not line.strip():
                continue
            for rs in json.loads(line).get("resourceSpans", []):
                attrs = {a["key"]: a["value"] for a in rs.get("resource", {}).get("attributes", [])}
                service = attrs.get("service.name", {}).get("stringValue")
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        found.append({**span, "service": service, "attrs": attributes(span)})
        return found

    def wait_for(self, predicate: Callable[[list[dict]], bool], timeout_s: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans()
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                raise TimeoutError(f"the collector has {len(spans)} spans, not the expected ones: "
                                   f"{sorted({s['name'] for s in spans})}")
            time.sleep(0.05)


def attributes(span: dict) -> dict:
    """A span's attributes as plain values (OTLP JSON wraps each in {"stringValue": ...} and the like)."""
    out = {}
    for a in span.get("attributes", []):
        value = a["value"]
        if "arrayValue" in value:
            out[a["key"]] = [next(iter(v.values())) for v in value["arrayValue"].get("values", [])]
        else:
            v = next(iter(value.values()), None)
            out[a["key"]] = int(v) if "intValue" in value else v
    return out


@contextlib.contextmanager
def collector(work: Path) -> Iterator[Collector]:
    work.mkdir(parents=True, exist_ok=True)
    grpc, http = port_for_external_server(), port_for_external_server()
    out = work / "traces.jsonl"
    config = work / "otelcol.yaml"
    config.write_text(CONFIG.format(grpc=grpc, http=http, out=out))
    log = work / "otelcol.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([str(binary()), f"--config=file:{config}"], stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while READY not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"otelcol did not start (rc={proc.poll()}):\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.05)
        yield Collector(f"http://127.0.0.1:{grpc}", f"http://127.0.0.1:{http}", out)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
