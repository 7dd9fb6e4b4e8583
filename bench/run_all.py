"""Run every benchmark in turn; each prints its own table and writes bench/results/<name>.json.

    .venv/bin/python bench/run_all.py            # full runs
    .venv/bin/python bench/run_all.py --quick    # smaller sizes, a few minutes in all
    .venv/bin/python bench/run_all.py engine chat  # a subset
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = {
    "engine": "bench_engine.py",
    "chat": "bench_chat.py",
    "conversations": "bench_conversations.py",
    "operator": "bench_operator.py",
    "stores": "bench_stores.py",
    "sources": "bench_sources.py",
    "responsiveness": "bench_responsiveness.py",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run, of {', '.join(BENCHES)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(BENCHES))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    failures = []
    for name in args.names or list(BENCHES):
        script = HERE / BENCHES[name]
        print(f"\n=== {name} ({script.name}) ===", flush=True)
        started = time.monotonic()
        cmd = [sys.executable, str(script)] + (["--quick"] if args.quick else [])
        code = subprocess.call(cmd)
        print(f"=== {name}: exit {code} after {time.monotonic() - started:.0f} s ===", flush=True)
        if code:
            failures.append(name)
    if failures:
        print(f"\nfailed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
