"""The evaluation scripts' ending: results to JSON, then one table row per (set, mode)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bench.common import write_result


def write_and_print(out: Path, results: dict, started: float, header: str, cells: Callable[[dict], str]) -> None:
    """``results``: {"sets": {set: {"chunks", "modes": {mode: metrics}}}, "missing": {set: why}};
    ``cells(metrics)``: the row's cells after the set and the mode."""
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    write_result(out, results)
    print(header)
    for set_name, r in results["sets"].items():
        for mode, m in r["modes"].items():
            print(f"| {set_name} ({r['chunks']}) | {mode} | {cells(m)} |")
    for set_name, why in results["missing"].items():
        print(f"{set_name}: not installed ({why})")
