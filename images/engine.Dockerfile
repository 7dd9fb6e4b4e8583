# The RAG engine, CPU variant (faiss-cpu, CPU-only torch). Build from the repository root:
#   docker build -f images/engine.Dockerfile -t ghcr.io/ragengine/engine:0.1.0 .
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# CPU-only torch first, so sentence-transformers does not pull the CUDA wheels (~4 GB).
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch
COPY pyproject.toml README.md /src/
COPY engine /src/engine
COPY operator /src/operator
RUN pip install /src

FROM python:3.11-slim
RUN useradd --uid 1000 --user-group --home-dir /home/ragengine --create-home ragengine \
 && mkdir /data && chown 1000:1000 /data
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HF_HOME=/data/models RAGENGINE_DEVICE=cpu
USER 1000:1000
WORKDIR /home/ragengine
VOLUME /data
EXPOSE 8000
# The operator passes the same command; env (RAGENGINE_*) carries the rest of EngineSettings.
ENTRYPOINT []
CMD ["ragengine", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
