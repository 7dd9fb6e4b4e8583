# The RAG engine, GPU variant: CUDA 12 runtime, faiss-gpu, CUDA torch (embeddings and FAISS on GPU).
# Embeddings run on sentence-transformers (the `gpu` extra: the engine and torch); ONNX Runtime is installed
# but idle. Every vector store the operator can configure is installed, the operator's dependencies are not.
#   docker build -f images/engine-gpu.Dockerfile -t ghcr.io/ragengine/engine:0.1.0-gpu .
# Use it with spec.engine.image and spec.engine.resources.limits["nvidia.com/gpu"]: 1.
FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends software-properties-common \
 && add-apt-repository -y ppa:deadsnakes/ppa \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml README.md /src/
COPY engine /src/engine
COPY operator /src/operator
# faiss-cpu and faiss-gpu both provide the `faiss` module: swap one for the other.
RUN pip install "/src[gpu,postgres,milvus]" \
 && pip uninstall -y faiss-cpu \
 && pip install "faiss-gpu-cu12>=1.9"
RUN useradd --uid 1000 --user-group --create-home ragengine && mkdir /data && chown 1000:1000 /data
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HOME=/data/models RAGENGINE_DEVICE=cuda RAGENGINE_EMBEDDING_BACKEND=torch
USER 1000:1000
VOLUME /data
EXPOSE 8000
CMD ["ragengine", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
