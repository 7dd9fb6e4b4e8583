#!/usr/bin/env python3
"""How fast the operator reports a failing container, against the local control plane (hack/cluster.sh up).

The timing that tests/operator/integration/test_production.py::test_container_failure_is_reported_at_once
used to assert (``took < 15``): kwok runs no containers, so the benchmark plays the kubelet and writes an
engine pod's status as CrashLoopBackOff (OOMKilled last time), then measures the time until the RAGEngine
reports ``Degraded=True`` with reason CrashLoopBackOff. Without the operator's own pod watch this would wait
for the Deployment's 10-minute progress deadline.

    .venv/bin/python -m bench.bench_failure_report [--runs 5]

Runs the real console script (``ragengine-operator --namespace <bench ns>``, default resync period),
prints a table and writes bench/results/failure_report.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench import bench_operator as ops  # (its cluster helpers; it sets KUBECONFIG)
from bench.common import RESULTS, ROOT, machine, write_result


def degraded_reason(b: ops.Bench, n: str) -> str | None:
    item = b.custom.get_namespaced_custom_object(ops.G, ops.V, b.ns, ops.P, n)
    for cond in (item.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Degraded" and cond["status"] == "True":
            return cond["reason"]
    return None


def crash(b: ops.Bench, n: str) -> None:
    """What a kubelet writes for a container in CrashLoopBackOff after an OOM kill."""
    from ragengine_operator import constants as c

    (pod,) = b.core.list_namespaced_pod(b.ns, label_selector=f"{c.SELECTOR_NAME}={n},{c.SELECTOR_COMPONENT}=engine").items
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"name": "engine", "ready": False, "restartCount": 3, "image": pod.spec.containers[0].image, "imageID": "",
              "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
              "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "startedAt": now, "finishedAt": now}}}
    conditions = [{"type": t, "status": "False", "lastTransitionTime": now, "reason": "ContainersNotReady"}
                  for t in ("Ready", "ContainersReady")]
    b.core.patch_namespaced_pod_status(pod.metadata.name, b.ns, {"status": {"containerStatuses": [status],
                                                                           "conditions": conditions}})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 runs")
    args = ap.parse_args()
    runs = 2 if args.quick else args.runs
    if not ops.KUBECONFIG.exists():
        sys.exit("the local control plane is not up: run `hack/cluster.sh up`")
    ops.KUBECTL = ops.kubectl_path()
    ops.apply_crd(ROOT / "crds" / "ragengine.io_ragengines.yaml")
    ns = f"bench-fail-{uuid.uuid4().hex[:6]}"
    b = ops.Bench(ns)
    b.core.create_namespace({"metadata": {"name": ns}})
    env = {**os.environ, "RAGENGINE_OPERATOR_METRICS_PORT": "0", "RAGENGINE_OPERATOR_LIVENESS_PORT": "0"}
    with open(RESULTS / "failure-report.log.tmp", "wb") as log:
        op = subprocess.Popen([str(Path(sys.executable).with_name("ragengine-operator")), "--namespace", ns],
                              stdout=log, stderr=subprocess.STDOUT, env=env)
    seconds = []
    try:
        for i in range(runs):
            n = f"crash-{i}"
            b.create(n, {})
            ops.poll(lambda n=n: n in b.ready_names(), 120, 0.05)
            t0 = time.perf_counter()
            crash(b, n)
            t1 = ops.poll(lambda n=n: degraded_reason(b, n) == "CrashLoopBackOff", 600, 0.02)
            seconds.append(t1 - t0)
    finally:
        op.terminate()
        op.wait(timeout=30)
        b.core.delete_namespace(ns)
        (RESULTS / "failure-report.log.tmp").unlink(missing_ok=True)
    result = {"runs": runs, "seconds": seconds, "p50_s": statistics.median(seconds), "max_s": max(seconds),
              "machine": machine()}
    print(f"\n{'container failure written -> Degraded=True':<44} {'p50':>8} {'max':>8}   (n={runs})")
    print(f"{'CrashLoopBackOff (OOMKilled)':<44} {result['p50_s']:>7.2f}s {result['max_s']:>7.2f}s")
    out = RESULTS / "failure_report.json"
    write_result(out, result)
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
