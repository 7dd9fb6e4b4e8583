"""The engine benchmark's table, printed from its results."""

from __future__ import annotations


def print_table(r: dict) -> None:
    rows = []
    for backend, w in r.get("workload", {}).items():
        rows.append((f"engine ({backend}): start-up to /health", f"{w['startup_s']:.2f} s", "target <= 8 s"))
        rows.append((f"engine ({backend}): ingestion, {w['passages']} passages",
                     f"{w['ingest_passages_per_s']:.1f} passages/s", ""))
        rows.append((f"engine ({backend}): /retrieve p50 / p99",
                     f"{w['retrieve_p50_ms']:.2f} / {w['retrieve_p99_ms']:.2f} ms", ""))
        rows.append((f"engine ({backend}): peak RSS", f"{w['peak_rss_mib']:.0f} MiB", "target <= 900 MiB"))
    if "ingest" in r:
        i = r["ingest"]
        rows.append((f"ingestion chunks/s (engine / raw {i.get('backend', 'model')})",
                     f"{i['engine_chunks_per_s']:.1f} / {i['raw_model_chunks_per_s']:.1f}",
                     f"ratio {i['ratio']:.2f} (target >= 0.9)"))
        if "torch_fp32_tokens_per_s" in i:
            threads = ", ".join(f"{k[:-len('_tokens_per_s')]} {v:.0f}" for k, v in i.items()
                                if k.startswith(("onnx_", "openvino_")))
            rows.append(("ingestion tokens/s: engine / torch fp32 model", f"{i['engine_tokens_per_s']:.0f} / "
                         f"{i['torch_fp32_tokens_per_s']:.0f}", f"x{i['vs_torch']:.2f} (target >= 1.5); raw: {threads}"))
    if "query_embed_p50_ms" in r:
        rows.append(("query embedding p50 (raw model)", f"{r['query_embed_p50_ms']:.2f} ms", ""))
    for label in ("small", "large"):
        if f"retrieve_{label}" in r:
            x = r[f"retrieve_{label}"]
            rows.append((f"/retrieve p50 / p99 @ {x['chunks']} chunks ({x['kind']})", f"{x['p50_ms']:.2f} / {x['p99_ms']:.2f} ms",
                         f"target p50 <= {x['target_p50_ms']:.2f} ms; in-server mean: embed "
                         f"{x['server_query_embed_mean_ms']:.2f}, whole retrieval {x['server_retrieve_mean_ms']:.2f} ms"))
    if "rss" in r:
        x = r["rss"]
        rows.append((f"RSS @ {x['chunks']} chunks: total / empty engine", f"{x['rss_mib']:.0f} / {x['baseline_rss_mib']:.0f} MiB",
                     f"data {x['data_mib']:.0f} MiB; (RSS-empty)/data {x['delta_over_data']:.2f}, "
                     f"RSS/data {x['total_over_data']:.2f} (target <= 1.3)"))
    if "hnsw" in r:
        h = r["hnsw"]
        c = h["chosen"]
        rows.append((f"HNSW alone @ {h['built_vectors']} vectors (M={h['m']}, efC={h['ef_construction']})",
                     f"p50 {c['p50_ms']:.3f} ms, recall@10 {c['recall_at_10']:.3f} (efSearch {c['ef_search']})",
                     f"built in {h['build_s']:.0f} s; target <= 5 ms, >= 0.95"))
    if "quality" in r and "dense" in r["quality"]:
        for mode in ("dense", "bm25", "hybrid", "hybrid+rerank"):
            x = r["quality"][mode]
            val = f"MRR@10 {x['mrr_at_10']:.3f}, Recall@10 {x['recall_at_10']:.3f}" if "mrr_at_10" in x else x.get("n/a", "n/a")
            rows.append((f"debian-faq {mode} ({r['quality']['questions']} questions)", val, ""))
    width = max(len(a) for a, _, _ in rows)
    print()
    for a, b, c in rows:
        print(f"{a:<{width}}  {b:<40} {c}")
