"""A FAISS engine replaced under load, timed as Kubernetes does it (docs/engine.md, Durability).

    .venv/bin/python -m bench.bench_handover            # the operator's timings: preStop 5 s, drain 5 s
    .venv/bin/python -m bench.bench_handover --quick    # preStop 1 s, drain 1 s

Two real engine processes on one data folder (tests/support/engine_process.py): the old one, and its
replacement, which starts as a stand-by. Clients query and write through both by turns, as through a
Service (tests/support/service_client.py). Once the stand-by is ready, as a rolling update then does: a
marker document is written to the old engine; the old one leaves the Service; after the preStop sleep it
gets SIGTERM (it drains, writes its final snapshot and gives the folder up) and the clients go on with the
new one alone. Prints a table and writes bench/results/handover.json:

- the hand-over: SIGTERM to the new process serving writes;
- the longest any acknowledged write took (the new one's writes are held from the moment it is ready);
- the stale window: the marker, acknowledged by the old process after the stand-by had loaded the folder,
  is not seen by reads on the new one until it took over;
- requests, and failures (the test, tests/engine/test_handover.py, requires none).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import RESULTS, write_result
from ragengine.index.writer_lock import WriterLock
from tests.support.engine_process import engine_process
from tests.support.service_client import ServiceClient

OUT = RESULTS / "handover.json"
MARKER = {"doc_id": "marker", "text": "The marker written after the stand-by loaded the folder, about narwhals."}


def sees_marker(base: str) -> bool:
    resp = httpx.post(f"{base}/retrieve", json={"index_name": "durable", "query": MARKER["text"], "max_node_count": 3},
                      timeout=60)
    return resp.status_code == 200 and "marker" in [r["doc_id"] for r in resp.json()["results"]]


def run(prestop_s: float, drain_s: float) -> dict:
    settings = {"shutdown_drain_seconds": str(drain_s)}
    seed = [{"doc_id": f"seed{i}", "text": f"Seed document {i} about otters and rivers."} for i in range(20)]
    with tempfile.TemporaryDirectory(prefix="bench-handover-") as work, \
            engine_process(Path(work), settings=settings, llm=False) as old:
        httpx.post(f"{old.base_url}/index", json={"index_name": "durable", "documents": seed}, timeout=120).raise_for_status()
        started = time.monotonic()
        with engine_process(Path(work), settings=settings, llm=False) as new:
            standby_start_s = time.monotonic() - started
            with ServiceClient(old.base_url, new.base_url) as client:
                time.sleep(1.0)  # both serve: reads on both, the new one's writes held
                marker_sent = time.monotonic()
                httpx.post(f"{old.base_url}/index", json={"index_name": "durable", "documents": [MARKER]},
                           timeout=60).raise_for_status()
                acked = time.monotonic()
                client.old_stopping.set()  # out of the Service's endpoints, then the preStop sleep
                time.sleep(prestop_s)
                lock = WriterLock(Path(work) / "data" / "indexes")
                sigterm = time.monotonic()
                old.process.send_signal(signal.SIGTERM)
                took_over = seen = released = None
                while took_over is None or seen is None:  # reads on the new one go on while it takes over
                    if released is None and f"pid={old.pid} " not in lock.holder():  # the new one wrote its own
                        released = time.monotonic()
                    if took_over is None and "handover" not in httpx.get(f"{new.base_url}/health", timeout=30).json():
                        took_over = time.monotonic()
                    if seen is None and sees_marker(new.base_url):
                        seen = time.monotonic()
                    time.sleep(0.02)
                time.sleep(1.0)
            old.process.wait(60)
    held = [(sent, done) for base, sent, done in client.writes if base == new.base_url and sent < took_over]
    return {"prestop_s": prestop_s, "drain_s": drain_s, "standby_start_s": round(standby_start_s, 2),
            "handover_s": round(took_over - sigterm, 2),
            "old_let_go_s": round(released - sigterm, 2), "longest_write_s": round(client.longest_write_s, 2),
            "held_writes": len(held), "held_done_after_take_over_s": round(max((d - took_over for _, d in held), default=0), 2),
            "marker_write_s": round(acked - marker_sent, 2),
            "stale_window_s": round(seen - acked, 2), "reads": client.counts["read"],
            "writes": client.counts["write"], "failures": len(client.failures), "failure_examples": client.failures[:3]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="preStop and drain of 1 s")
    args = parser.parse_args()
    result = run(1.0, 1.0) if args.quick else run(5.0, 5.0)
    rows = [("stand-by started (process start to serving reads)", f"{result['standby_start_s']:.1f} s"),
            ("hand-over (SIGTERM to the new process serving writes)", f"{result['handover_s']:.1f} s"),
            ("  until the new one held the lock (the old one's drain, shutdown, snapshot)", f"{result['old_let_go_s']:.1f} s"),
            ("longest acknowledged write", f"{result['longest_write_s']:.1f} s"),
            ("held writes acknowledged by the new one, the last after the take-over",
             f"{result['held_writes']}, {result['held_done_after_take_over_s']:.1f} s"),
            ("stale window (a write to the old one, unseen on the new until the take-over)",
             f"{result['stale_window_s']:.1f} s"),
            ("requests (reads / writes)", f"{result['reads']} / {result['writes']}"),
            ("failed requests", str(result["failures"]))]
    print(f"\nFAISS engine replaced under load (preStop {result['prestop_s']:g} s, drain {result['drain_s']:g} s)")
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    write_result(OUT, result, indent=1)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
