# The RAG engine, GPU variant: embeddings on the GPU with torch + sentence-transformers, built from uv.lock.
#   docker build -f images/engine-gpu.Dockerfile -t ghcr.io/ragengine/engine:0.1.0-gpu .
# Use it with spec.engine.image and spec.engine.resources.limits["nvidia.com/gpu"]: 1.
#
# One CUDA major, 12: the `gpu` extra pins torch 2.10.0, PyPI's last CUDA 12 build (12.8), whose wheels
# bring the CUDA runtime, cuBLAS and cuDNN (nvidia-*-cu12); the node's NVIDIA container toolkit brings
# the driver. Driver R570+ (R525+ through CUDA's minor-version compatibility); GPUs from Volta (sm_70)
# to Blackwell, as torch's cu128 build lists them (docs/engine.md). No CUDA base image: nothing in it
# would be used. No faiss-gpu: the engine's indexes stay on faiss-cpu (docs/engine.md says why).
# RAGENGINE_DEVICE=auto: without a visible GPU (no GPU limit, a driver too old) the engine logs that it
# runs on the CPU and does, instead of failing to start.
FROM python:3.11-slim AS build
# uv's version is the one that wrote uv.lock's format; --frozen installs exactly what the lock says.
RUN pip install --no-cache-dir uv==0.13.9
ENV UV_PROJECT_ENVIRONMENT=/opt/venv UV_LINK_MODE=copy UV_COMPILE_BYTECODE=0 UV_PYTHON_DOWNLOADS=never
WORKDIR /src
COPY pyproject.toml uv.lock /src/
RUN uv sync --frozen --no-dev --no-install-project --extra gpu --extra postgres --extra milvus
# the README (the package's long description) only now: an edit of it rebuilds no dependency layer
COPY README.md /src/
COPY engine /src/engine
COPY operator /src/operator
# The project itself, without dependencies (the lock already put them there); then check the image is
# what it claims: one CUDA major, no faiss-gpu, no operator dependencies.
RUN uv pip install --python /opt/venv/bin/python --no-deps /src \
 && /opt/venv/bin/python -c "import torch, faiss; assert torch.version.cuda.startswith('12.'), torch.version.cuda; \
assert not hasattr(faiss, 'StandardGpuResources')" \
 && ! /opt/venv/bin/python -c "import kopf" 2>/dev/null

FROM python:3.11-slim
RUN useradd --uid 1000 --user-group --home-dir /home/ragengine --create-home ragengine \
 && mkdir /data && chown 1000:1000 /data
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HF_HOME=/data/models RAGENGINE_DEVICE=auto RAGENGINE_EMBEDDING_BACKEND=torch
USER 1000:1000
WORKDIR /home/ragengine
VOLUME /data
EXPOSE 8000
ENTRYPOINT []
CMD ["ragengine", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
