"""FAISS under concurrent queries (issue 28): every search worker runs FAISS on one OpenMP thread, so
concurrent single-query searches do not each fan out over every core and spin against each other, while
the rest of the process (ingestion, HNSW builds) keeps the process-wide thread count. The throughput at
1 to 64 clients is measured in bench/bench_search_concurrency.py, not here."""

from __future__ import annotations

import threading

import faiss

from ragengine.index import search


def test_search_workers_use_one_openmp_thread_and_other_threads_keep_every_core():
    process_wide = faiss.omp_get_max_threads()
    workers = {search._POOL.submit(faiss.omp_get_max_threads).result() for _ in range(16)}
    assert workers == {1}
    seen: list[int] = []
    other = threading.Thread(target=lambda: seen.append(faiss.omp_get_max_threads()))  # as asyncio.to_thread's
    other.start()
    other.join()
    assert seen == [process_wide] and faiss.omp_get_max_threads() == process_wide
