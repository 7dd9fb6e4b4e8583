"""bench/bench_stores.py's output: the scale table, the ef_search curve, the replicas' throughput, and the
plot in docs/images (latency and memory against chunks, one line per store)."""

from __future__ import annotations

from pathlib import Path

from bench.common import ROOT

EF_CURVE = (64, 128, 256, 512)


def label(row: dict) -> str:
    """The store, and PostgreSQL's cache size where the row says (it is measured at two)."""
    return f"{row['store']} (shared_buffers {row['shared_buffers']})" if row.get("shared_buffers") else row["store"]


def plot(rows: list[dict], path: Path) -> None:
    """Latency (fused p99, dense p99) and memory (RSS, disk) against chunks, one line per store."""
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = [("retrieve_p99_ms", "hybrid top-10 p99 (ms)"), ("load_chunks_per_s", "load (chunks/s)"),
              ("index_rss_mib", "index memory in the engine (MiB, solid) / on disk (MiB, dashed)")]
    for ax, (key, title) in zip(axes, panels, strict=True):
        for store in dict.fromkeys(label(r) for r in rows):
            mine = sorted((r for r in rows if label(r) == store and key in r), key=lambda r: r["chunks"])
            line = ax.plot([r["chunks"] for r in mine], [r[key] for r in mine], marker="o", label=store)[0]
            if key == "index_rss_mib":
                ax.plot([r["chunks"] for r in mine], [r["disk_mib"] for r in mine], marker="s", linestyle="--",
                        color=line.get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("chunks")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def fmt_row(r: dict) -> str:
    legs = " | ".join(f"{r[f'{leg}_p50_ms']:.2f} / {r[f'{leg}_p99_ms']:.2f}" if f"{leg}_p50_ms" in r
                      else "in process" if leg != "keyword_sql" else "-" for leg in ("dense", "keyword", "keyword_sql"))
    build = f"{r['hnsw_build_s']:.0f} s" if r.get("hnsw_build_s") else "-"
    memory = f"{r['index_rss_mib']:,.0f}" if "index_rss_mib" in r else "-"  # rows measured before it was
    return (f"| {label(r)} | {r['chunks']:,} | {r['load_chunks_per_s']:,.0f} | {build} | {legs} | "
            f"{r['retrieve_p50_ms']:.2f} / {r['retrieve_p99_ms']:.2f} | {r['top300_p99_ms']:.0f} | "
            f"{r['recall_at_10']:.3f} | {memory} | {r['disk_mib']:,.0f} |")


def report(results: dict) -> None:
    """The scale table, the ef_search curve and the replicas' throughput; the plot in docs/images."""
    print("\n| store | chunks | load chunks/s | HNSW build | dense p50 / p99 (ms) | keyword p50 / p99 (ms) "
          "| SQL keyword leg p50 / p99 (ms) | hybrid top-10 p50 / p99 (ms) | top-300 p99 (ms) | dense recall@10 "
          "| index memory (MiB) | disk (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results["stores"]:
        print(fmt_row(r))
    curves = [r for r in results["stores"] if r.get("ef_curve")]
    if curves:
        print("\n| store | chunks | " + " | ".join(f"ef_search {ef}: recall / dense p99 (ms)" for ef in EF_CURVE) + " |")
        print("|---|---|" + "---|" * len(EF_CURVE))
        for r in curves:
            print(f"| {label(r)} | {r['chunks']:,} | " + " | ".join(
                f"{c['recall_at_10']:.3f} / {c['dense_p99_ms']:.1f}" for c in r["ef_curve"]) + " |")
    if results["replicas"]:
        print("\n| engine processes on one PostgreSQL | /retrieve req/s (concurrency 8) |\n|---|---|")
        for r in results["replicas"]:
            print(f"| {r['processes']} | {r['retrieve_req_per_s']:.1f} |")
    plot(results["stores"], ROOT / "docs" / "images" / "stores-scale.svg")
