#!/usr/bin/env python3
"""Operator latency and scale against the local control plane (hack/cluster.sh up first).

  1. RAGEngine created -> all six children exist             (target < 1 s)
  2. both Deployments available -> RAGEngine Ready=True      (target < 2 s)
  3. N RAGEngines created at once -> all Ready: total time, operator RSS
  4. steady state with N RAGEngines (issue 10 item 12): API requests per RAGEngine per minute caused by
     the operator (the API server's apiserver_request_total rate over a window with the operator
     running, minus the rate over a window with it stopped), and the operator's CPU and RSS in that window.
     Both windows open only in a quiet cluster (no namespace terminating, every RAGEngine Ready, every
     Deployment available) and are measured again if it was not quiet throughout. The running window
     (--idle, default 360 s) spans a whole resync period (300 s + up to 20 % jitter), so every RAGEngine's
     periodic reconcile falls into it once: a shorter one can miss them all right after the creation burst.

`--operator-src DIR` runs another checkout's operator (e.g. the previous release, for a before/after)
and applies that checkout's CRD first; otherwise this checkout's CRD is applied.

Runs the real console script (`ragengine-operator --namespace <bench ns>`), prints a table and
writes bench/results/operator.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.common import RESULTS, ROOT, rss_mib, write_result

KUBECONFIG = ROOT / ".cluster" / "kubeconfig"
os.environ["KUBECONFIG"] = str(KUBECONFIG)  # before kubernetes is imported: its config reads it then

from kubernetes import client as k8s  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

G, V, P = "ragengine.io", "v1alpha1", "ragengines"
SPEC = {"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}, "storage": {"volume": {"size": "1Gi"}}}
# The scale run: retrieval-only RAGEngines (engine, PVC, Service), so hundreds fit the fake nodes'
# GPUs (64 in all). Operators run with their own default resync period.
SCALE_SPEC = {"storage": {"volume": {"size": "1Gi"}}}


def children(n: str) -> list[tuple[str, str]]:
    return [("pvc", f"{n}-model-cache"), ("dep", f"{n}-inference"), ("svc", f"{n}-inference"),
            ("pvc", f"{n}-data"), ("dep", f"{n}-engine"), ("svc", n)]


class Bench:
    def __init__(self, ns: str) -> None:
        api = k8s_config.new_client_from_config(config_file=str(KUBECONFIG))
        self.core, self.apps, self.custom, self.ns = k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.CustomObjectsApi(api), ns

    def create(self, name: str, spec: dict | None = None) -> None:
        body = {"apiVersion": f"{G}/{V}", "kind": "RAGEngine", "metadata": {"name": name}, "spec": spec or SPEC}
        self.custom.create_namespaced_custom_object(G, V, self.ns, P, body)

    def exists(self, kind: str, name: str) -> bool:
        read = {"pvc": self.core.read_namespaced_persistent_volume_claim, "svc": self.core.read_namespaced_service,
                "dep": self.apps.read_namespaced_deployment}[kind]
        try:
            read(name, self.ns)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def available(self, name: str) -> bool:
        try:
            d = self.apps.read_namespaced_deployment_status(name, self.ns)
        except ApiException:
            return False
        return (d.status.available_replicas or 0) >= d.spec.replicas and (d.status.updated_replicas or 0) >= d.spec.replicas

    def ready_names(self) -> set[str]:
        out = set()
        for item in self.custom.list_namespaced_custom_object(G, V, self.ns, P)["items"]:
            st = item.get("status") or {}
            if st.get("observedGeneration") == item["metadata"]["generation"] and any(
                c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or []
            ):
                out.add(item["metadata"]["name"])
        return out


def poll(fn, timeout: float, interval: float = 0.005):
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if fn():
            return time.perf_counter()
        time.sleep(interval)
    raise TimeoutError(fn)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def apiserver_requests() -> dict[str, float]:
    """apiserver_request_total from the API server's /metrics, summed per "VERB resource" (every code)."""
    out = subprocess.run([KUBECTL, f"--kubeconfig={KUBECONFIG}", "get", "--raw", "/metrics"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    counts: dict[str, float] = {}
    for line in out.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.rindex("}")].split(",") if "=" in kv)
            key = f"{labels.get('verb', '').strip(chr(34))} {labels.get('resource', '').strip(chr(34))}"
            counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def rate_per_min(a: dict[str, float], b: dict[str, float], seconds: float) -> dict[str, float]:
    """Requests per minute between two apiserver_requests() readings, per "VERB resource"."""
    return {k: (b.get(k, 0.0) - a.get(k, 0.0)) * 60 / seconds for k in set(a) | set(b)}


def terminating_namespaces(core: k8s.CoreV1Api) -> list[str]:
    return [str(n.metadata and n.metadata.name) for n in core.list_namespace().items
            if n.status and n.status.phase == "Terminating"]


def quiet(b: Bench, expected: int) -> bool:
    """Nothing in the cluster is still settling: a namespace being collected (hundreds of deletes) or a
    RAGEngine or Deployment not yet done would show up in one window and not the other."""
    if terminating_namespaces(b.core):
        return False
    deps = b.apps.list_namespaced_deployment(b.ns, label_selector="app.kubernetes.io/managed-by=ragengine-operator").items
    return len(b.ready_names()) >= expected and all(
        ((d.status and d.status.available_replicas) or 0) >= ((d.spec and d.spec.replicas) or 0) for d in deps)


def apply_crd(path: Path) -> None:
    subprocess.run([KUBECTL, f"--kubeconfig={KUBECONFIG}", "apply", "--server-side", "--force-conflicts", "-f",
                    str(path)], capture_output=True, check=True)
    subprocess.run([KUBECTL, f"--kubeconfig={KUBECONFIG}", "wait", "--for=condition=Established",
                    "crd/ragengines.ragengine.io", "--timeout=60s"], capture_output=True, check=True)


def kubectl_path() -> str:
    out = subprocess.run([str(ROOT / "hack" / "cluster.sh"), "env"], capture_output=True, text=True, check=True).stdout
    return str(Path(out.split("PATH=")[1].split(":")[0]) / "kubectl")


KUBECTL = "kubectl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="latency samples")
    ap.add_argument("--scale", type=int, default=200, help="RAGEngines in the scale run")
    ap.add_argument("--idle", type=float, default=360.0,
                    help="seconds of the steady-state window with the operator running (>= one resync period)")
    ap.add_argument("--baseline", type=float, default=120.0, help="seconds of the window with the operator stopped")
    ap.add_argument("--quick", action="store_true", help="a small run (20 RAGEngines, 60 s windows)")
    ap.add_argument("--operator-src", type=Path, default=None, help="run the operator from this source tree")
    ap.add_argument("--label", default="current", help="name of this run in bench/results/operator.json")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.scale, args.idle, args.baseline = 2, 20, 60.0, 60.0
    global KUBECTL
    KUBECTL = kubectl_path()
    if not KUBECONFIG.exists():
        sys.exit("the local control plane is not up: run `hack/cluster.sh up`")
    apply_crd((args.operator_src or ROOT) / "crds" / "ragengine.io_ragengines.yaml")
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    b = Bench(ns)
    b.core.create_namespace({"metadata": {"name": ns}})
    log = open(RESULTS / "operator-bench.log.tmp", "wb")  # noqa: SIM115 (the operator's stdout)
    env = {**os.environ, "RAGENGINE_OPERATOR_METRICS_PORT": "0", "RAGENGINE_OPERATOR_LIVENESS_PORT": "0"}
    if args.operator_src:  # e.g. a `git archive` of the previous release
        env["PYTHONPATH"] = f"{args.operator_src / 'operator'}:{args.operator_src / 'engine'}"
        cmd = [sys.executable, "-m", "ragengine_operator", "--namespace", ns]
    else:
        cmd = [str(Path(sys.executable).with_name("ragengine-operator")), "--namespace", ns]
    op = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        b.create("warmup")  # operator start-up and first watch are not what we measure
        poll(lambda: "warmup" in b.ready_names(), 60, 0.05)
        created, ready = [], []
        for i in range(args.runs):
            n = f"lat-{i}"
            t0 = time.perf_counter()
            b.create(n)
            t1 = poll(lambda n=n: all(b.exists(k, x) for k, x in children(n)), 30, 0.02)
            created.append(t1 - t0)
            t_avail = poll(lambda n=n: b.available(f"{n}-inference") and b.available(f"{n}-engine"), 60, 0.02)
            t_ready = poll(lambda n=n: n in b.ready_names(), 30, 0.02)
            ready.append(max(0.0, t_ready - t_avail))
        rss_before = rss_mib(op.pid)
        cpu_before = cpu_s(op.pid)
        names = [f"scale-{i:03d}" for i in range(args.scale)]
        t0 = time.perf_counter()
        for n in names:
            b.create(n, SCALE_SPEC)
        t_created = time.perf_counter() - t0
        marks: dict[str, float] = {}

        def progress() -> bool:  # when did the operator's part / the cluster's part finish?
            done = set(names) <= b.ready_names()
            deps = b.apps.list_namespaced_deployment(ns, label_selector="app.kubernetes.io/managed-by=ragengine-operator").items
            now = time.perf_counter() - t0
            if len(deps) >= args.scale + 2 * (args.runs + 1):
                marks.setdefault("children", now)
                if all((d.status.available_replicas or 0) >= d.spec.replicas for d in deps):
                    marks.setdefault("available", now)
            return done

        t_all = poll(progress, 900, 2.0) - t0  # coarse: the poll itself must not load the API server
        rss_after, rss_peak = rss_mib(op.pid), rss_mib(op.pid, "VmHWM")
        cpu_scale = cpu_s(op.pid) - cpu_before
        # Steady state: a window with the operator running, then one with it stopped (SIGSTOP: its
        # watches stay open, it makes no calls); the difference of the rates is the operator's own load.
        total = args.scale + args.runs + 1
        steady = None
        for attempt in range(3):
            poll(lambda: quiet(b, total), 900, 2.0)
            r0, c0 = apiserver_requests(), cpu_s(op.pid)
            time.sleep(args.idle)
            r1, c1 = apiserver_requests(), cpu_s(op.pid)
            idle_rss = rss_mib(op.pid)
            op.send_signal(signal.SIGSTOP)
            try:
                time.sleep(args.baseline)
                r2 = apiserver_requests()
            finally:
                op.send_signal(signal.SIGCONT)
            on, off = rate_per_min(r0, r1, args.idle), rate_per_min(r1, r2, args.baseline)
            by_kind = {k: round((on.get(k, 0.0) - off.get(k, 0.0)) / total, 3) for k in set(on) | set(off)}
            steady = {"attempt": attempt + 1, "on_per_min": sum(on.values()), "off_per_min": sum(off.values()),
                      "per_min": (sum(on.values()) - sum(off.values())) / total, "cpu": (c1 - c0) / args.idle,
                      "rss": idle_rss,
                      "by_request": dict(sorted(((k, v) for k, v in by_kind.items() if abs(v) >= 0.01),
                                                key=lambda kv: -abs(kv[1])))}
            if quiet(b, total):  # still quiet at the end: nothing else ran through the windows
                break
            print(f"steady-state attempt {attempt + 1}: the cluster was not quiet throughout; measuring again")
            steady = None
        if steady is None:
            sys.exit("the cluster never stayed quiet through the steady-state windows")
        per_min, idle_cpu, idle_rss = steady["per_min"], steady["cpu"], steady["rss"]
    finally:
        # delete while the operator runs (it drops kopf's finalizers), then stop it
        subprocess.run([KUBECTL, f"--kubeconfig={KUBECONFIG}", "delete", "namespace", ns, "--wait=true", "--timeout=300s"],
                       capture_output=True)
        op.send_signal(signal.SIGTERM)
        try:
            op.wait(timeout=20)
        except subprocess.TimeoutExpired:
            op.kill()
    rows = [
        ("CR created -> all 6 children exist (median / max)",
         f"{statistics.median(created):.3f} / {max(created):.3f} s", "< 1 s"),
        ("Deployments available -> Ready=True (median / max)",
         f"{statistics.median(ready):.3f} / {max(ready):.3f} s", "< 2 s"),
        (f"{args.scale} RAGEngines: POSTs done / all Deployments exist",
         f"{t_created:.1f} / {marks.get('children', -1):.1f} s", ""),
        (f"{args.scale} RAGEngines: all Deployments available", f"{marks.get('available', -1):.1f} s", ""),
        (f"{args.scale} RAGEngines created -> all Ready", f"{t_all:.1f} s", ""),
        (f"{args.scale} RAGEngines: operator CPU time", f"{cpu_scale:.1f} s", ""),
        ("operator RSS before / after / peak", f"{rss_before:.0f} / {rss_after:.0f} / {rss_peak:.0f} MiB", ""),
        (f"steady state, {total} RAGEngines: API requests / RAGEngine / min", f"{per_min:.2f}", ""),
        (f"steady state, {total} RAGEngines: operator CPU / RSS", f"{idle_cpu * 100:.1f} % / {idle_rss:.0f} MiB", ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'metric':<{width}}  {'value':<24} target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:<24} {target}")
    result = {
        "label": args.label,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "steady_state": {"ragengines": total, "window_s": args.idle, "baseline_window_s": args.baseline,
                         "quiet_before_and_after": True, "attempt": steady["attempt"],
                         "api_requests_per_min_operator_running": steady["on_per_min"],
                         "api_requests_per_min_operator_stopped": steady["off_per_min"],
                         "api_requests_per_ragengine_per_min": per_min,
                         "per_ragengine_per_min_by_request": steady["by_request"],
                         "operator_cpu_fraction": idle_cpu, "operator_rss_mib": idle_rss},
        "runs": args.runs,
        "children_created_s": created,
        "available_to_ready_s": ready,
        "scale": {"ragengines": args.scale, "all_ready_s": t_all, "posts_done_s": t_created,
                  "all_deployments_exist_s": marks.get("children"), "all_deployments_available_s": marks.get("available"),
                  "rss_mib_before": rss_before,
                  "rss_mib_after": rss_after, "rss_mib_peak": rss_peak, "operator_cpu_s": cpu_scale},
        "targets": {"children_created_s": 1.0, "available_to_ready_s": 2.0},
        "pass": statistics.median(created) < 1.0 and statistics.median(ready) < 2.0,
    }
    out = RESULTS / "operator.json"
    runs = json.loads(out.read_text()) if out.exists() else {}
    runs = runs if "runs_by_label" in runs else {"runs_by_label": {}}
    runs["runs_by_label"][args.label] = result
    write_result(out, runs)
    print(f"wrote {out.relative_to(ROOT)}")
    print_steady_states(runs["runs_by_label"])
    return 0


def print_steady_states(runs: dict[str, dict]) -> None:
    """Every stored run's steady state side by side (e.g. before-200 / after-200)."""
    print(f"\n{'steady state (stored runs)':<28} {'RAGEngines':>10} {'window':>8} {'req/RAGEngine/min':>18} "
          f"{'CPU':>7} {'RSS':>9}")
    for label, run in sorted(runs.items()):
        st = run["steady_state"]
        print(f"{label:<28} {st['ragengines']:>10} {st['window_s']:>7.0f}s {st['api_requests_per_ragengine_per_min']:>18.2f}"
              f" {st['operator_cpu_fraction'] * 100:>6.1f}% {st['operator_rss_mib']:>5.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
