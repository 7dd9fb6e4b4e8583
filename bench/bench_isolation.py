"""Isolation of source syncs: the operator stays small and responsive while one tenant's hostile sources run.

    .venv/bin/python -m bench.bench_isolation                          # this checkout (sync_mode subprocess)
    .venv/bin/python -m bench.bench_isolation --operator-src DIR --label before   # another checkout, e.g. main

Against the local control plane (hack/cluster.sh up first). The operator runs as its own process
(``python -m ragengine_operator``, the admin kubeconfig, its liveness endpoint on), syncs in
``subprocess`` mode (kwok's pods run no containers) under the limits below. One namespace holds a
RAGEngine with the hostile sources of the security review (issue 22), served from this process:

- ``gzip``: a 300 KB gzip body that decodes to 300 MB (finding 3);
- ``git-bomb``: a ~1 MB git repository of thirty 18 MB files (finding 3);
- ``redos``: a glob that backtracks for hours on a 40-character file name (finding 2);
- ``trickle``: a server that sends one byte a second, forever (finding 6).

Another namespace holds a benign ConfigMap source that a real engine (FAISS, the packaged model) takes in.
Every 100 ms the bench GETs ``/healthz`` (1 s timeout) and reads the operator process's RSS from /proc
(its own process only: a sync worker is a child with its own limits). It stops when every source has
reported, or after ``--duration``. Prints a table, writes bench/results/isolation.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from bench.common import RESULTS, ROOT, pct, rss_mib, write_result
from tests.support.git_server import Repo, git_http_server
from tests.support.server import serve_app

KUBECONFIG = ROOT / ".cluster" / "kubeconfig"
OUT = RESULTS / "isolation.json"
LIMITS = {"RAGENGINE_OPERATOR_SYNC_MEMORY": "512Mi", "RAGENGINE_OPERATOR_SYNC_CPU_SECONDS": "30",
          "RAGENGINE_OPERATOR_SYNC_DEADLINE_SECONDS": "60"}
HOSTILE = ("gzip", "git-bomb", "redos", "trickle")


class Hostile(BaseHTTPRequestHandler):
    BOMB = gzip.compress(b"a" * (300 * 1024 * 1024), compresslevel=9)

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/bomb"):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(self.BOMB)))
            self.end_headers()
            self.wfile.write(self.BOMB)
            return
        self.send_response(200)  # /trickle
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"a")
                self.wfile.flush()
                time.sleep(1)
        except OSError:
            return


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(url: str) -> float:
    """ms for GET /healthz; inf when it did not answer 200 within 1 s."""
    t0 = time.perf_counter()
    try:
        ok = httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        ok = False
    return (time.perf_counter() - t0) * 1000 if ok else float("inf")


def repos(root: Path) -> None:
    root.mkdir()
    bomb = Repo(root, "bomb")
    for i in range(30):
        bomb.write(f"big-{i}.txt", "a" * (18 * 1024 * 1024))
    bomb.commit("thirty 18 MB files")
    for path in (root / "bomb-work").glob("big-*"):
        path.unlink()  # 540 MB of working files; the bare repository keeps them packed
    redos = Repo(root, "redos")
    redos.write("a" * 40, "hello")
    redos.commit("one long name")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--operator-src", type=Path, default=None, help="run the operator from this source tree")
    ap.add_argument("--label", default="current", help="name of this run in bench/results/isolation.json")
    ap.add_argument("--duration", type=float, default=240.0, help="stop after this many seconds at most")
    ap.add_argument("--sources", default=",".join(HOSTILE), help=f"hostile sources to run (of {', '.join(HOSTILE)})")
    args = ap.parse_args()
    if not KUBECONFIG.exists():
        sys.exit("the local control plane is not up: run `hack/cluster.sh up`")
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings

    kubectl = subprocess.run([str(ROOT / "hack" / "cluster.sh"), "env"], capture_output=True, text=True,
                             check=True).stdout.split("PATH=")[1].split(":")[0] + "/kubectl"
    src = args.operator_src or ROOT
    subprocess.run([kubectl, f"--kubeconfig={KUBECONFIG}", "apply", "--server-side", "--force-conflicts", "-f",
                    str(src / "crds" / "ragengine.io_ragengines.yaml")], check=True, capture_output=True)
    api = k8s_config.new_client_from_config(config_file=str(KUBECONFIG))
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    run = uuid.uuid4().hex[:5]
    hostile_ns, benign_ns = f"iso-hostile-{run}", f"iso-benign-{run}"
    with tempfile.TemporaryDirectory(prefix="bench-iso-") as tmp_name:
        tmp = Path(tmp_name)
        print("building the hostile repositories ...", flush=True)
        repos(tmp / "git")
        server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        web = f"http://127.0.0.1:{server.server_address[1]}"
        app = create_app(EngineSettings(data_dir=tmp / "data"))
        with git_http_server(tmp / "git") as git, serve_app(app, timeout_s=600) as engine:
            for ns in (hostile_ns, benign_ns):
                core.create_namespace({"metadata": {"name": ns}})
            core.create_namespaced_config_map(benign_ns, {"metadata": {"name": "faq"}, "data": {
                "install.md": "# Install\n\nRun the installer.\n", "upgrade.md": "# Upgrade\n\nKeep your data.\n"}})
            port = free_port()
            env = {**os.environ, "KUBECONFIG": str(KUBECONFIG), "RAGENGINE_OPERATOR_METRICS_PORT": "0",
                   "RAGENGINE_OPERATOR_LIVENESS_PORT": str(port), "RAGENGINE_OPERATOR_ENGINE_URL": engine,
                   "RAGENGINE_OPERATOR_SYNC_MODE": "subprocess", **LIMITS,
                   "PYTHONPATH": f"{src / 'operator'}:{src / 'engine'}:{ROOT}"}
            log = tmp / "operator.log"
            op = subprocess.Popen([sys.executable, "-m", "ragengine_operator", "-n", hostile_ns, "-n", benign_ns],
                                  stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
            try:
                result = measure(args, op, port, core, custom, hostile_ns, benign_ns, web, git)
            finally:
                op.kill()
                op.wait()
                for ns in (hostile_ns, benign_ns):
                    core.delete_namespace(ns)
                server.shutdown()
    result["label"] = args.label
    print(f"\n| {args.label} | value |\n|---|---|")
    for k in ("idle_healthz_p50_ms", "idle_healthz_max_ms",
              "healthz_probes", "healthz_p50_ms", "healthz_p99_ms", "healthz_max_ms", "healthz_over_1s",
              "operator_rss_start_mb", "operator_rss_max_mb", "operator_rss_peak_mb", "benign_synced_s"):
        print(f"| {k} | {result[k]} |")
    for name, outcome in result["sources"].items():
        print(f"| source {name} | {outcome} |")
    stored = json.loads(OUT.read_text()) if OUT.exists() else {}
    stored[args.label] = result
    write_result(OUT, stored)
    return 0


def measure(args, op, port, core, custom, hostile_ns, benign_ns, web, git) -> dict:
    group, version, plural = "ragengine.io", "v1alpha1", "ragengines"
    healthz = f"http://127.0.0.1:{port}/healthz"
    deadline = time.monotonic() + 60
    while True:  # the operator up
        try:
            if httpx.get(healthz, timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or op.poll() is not None:
            sys.exit("the operator did not start")
        time.sleep(0.2)
    rss_start = rss_mib(op.pid)
    idle = []  # the same probes before any RAGEngine: what this machine's load alone costs
    until = time.monotonic() + 15
    while time.monotonic() < until:
        t0 = time.perf_counter()
        idle.append(probe(healthz))
        time.sleep(max(0.0, 0.1 - (time.perf_counter() - t0)))

    def rag(ns: str, name: str, sources: list[dict]) -> None:
        custom.create_namespaced_custom_object(group, version, ns, plural, {
            "apiVersion": f"{group}/{version}", "kind": "RAGEngine", "metadata": {"name": name},
            "spec": {"storage": {"volume": {"size": "1Gi"}}, "sources": sources}})

    started = time.monotonic()
    chosen = args.sources.split(",")
    rag(hostile_ns, "hostile", [source for source in [
        {"name": "gzip", "http": {"urls": [f"{web}/bomb.txt"]}},
        {"name": "git-bomb", "git": {"url": f"{git}/bomb.git", "ref": "main"}},
        {"name": "redos", "git": {"url": f"{git}/redos.git", "ref": "main", "paths": ["*a" * 14 + "*b"]}},
        {"name": "trickle", "http": {"urls": [f"{web}/trickle.txt"]}},
    ] if source["name"] in chosen])
    rag(benign_ns, "benign", [{"name": "faq", "index": f"faq-{benign_ns}", "configMap": {"name": "faq"}}])
    latencies: list[float] = []
    rss: list[float] = []
    outcomes: dict[str, dict] = {}
    benign_synced = None
    last_read = 0.0
    while time.monotonic() - started < args.duration and op.poll() is None:
        t0 = time.perf_counter()
        latencies.append(probe(healthz))
        rss.append(rss_mib(op.pid))
        if time.monotonic() - last_read > 1:
            last_read = time.monotonic()
            entries = (custom.get_namespaced_custom_object(group, version, hostile_ns, plural, "hostile").get("status")
                       or {}).get("sources") or []
            for e in entries:
                message = e.get("message", "")
                if e["name"] not in outcomes and message and not message.startswith(("syncing", "waiting")):
                    outcomes[e["name"]] = {"after_s": round(time.monotonic() - started, 1), "synced": e["synced"],
                                           "message": message[:200]}
            if benign_synced is None:
                entries = (custom.get_namespaced_custom_object(group, version, benign_ns, plural, "benign").get("status")
                           or {}).get("sources") or []
                if entries and entries[0].get("synced"):
                    benign_synced = round(time.monotonic() - started, 1)
            if benign_synced is not None and set(outcomes) >= set(chosen):
                break
        time.sleep(max(0.0, 0.1 - (time.perf_counter() - t0)))
    alive = op.poll() is None
    peak = rss_mib(op.pid, "VmHWM") if alive else float("nan")
    finite = [x for x in latencies if x != float("inf")]
    return {
        "operator_alive": alive,
        "idle_healthz_p50_ms": round(pct([x for x in idle if x != float("inf")], 50), 1),
        "idle_healthz_max_ms": round(max([x for x in idle if x != float("inf")], default=float("nan")), 1),
        "healthz_probes": len(latencies), "healthz_p50_ms": round(pct(finite, 50), 1),
        "healthz_p99_ms": round(pct(finite, 99), 1), "healthz_max_ms": round(max(finite, default=float("nan")), 1),
        "healthz_over_1s": sum(1 for x in latencies if x == float("inf")),
        "operator_rss_start_mb": round(rss_start, 1), "operator_rss_max_mb": round(max(rss, default=0.0), 1),
        "operator_rss_peak_mb": round(peak, 1), "benign_synced_s": benign_synced,
        "sources": {name: outcomes.get(name, "no report") for name in chosen},
        "limits": LIMITS, "duration_s": round(time.monotonic() - started, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
