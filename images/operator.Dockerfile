# syntax=docker/dockerfile:1
# The RAGEngine operator: kopf, the Kubernetes client and the operator package, from the `operator` extra of
# uv.lock. No document parsers and no git: the operator schedules source syncs and never fetches or parses
# them (sync_mode job runs each in a Job of images/sync.Dockerfile's image); no FastAPI, FAISS, ONNX Runtime
# or torch either. The build checks all of that. Runs as uid 1000 with a read-only root filesystem (/tmp is
# a volume).
#
#   make images                      # podman: localhost/ragengine-operator:dev (docs/images.md)
#   docker build -f images/operator.Dockerfile -t <registry>/ragengine-operator:<tag> .
#
# BASE_IMAGE and the `ca` build secret: as in images/engine.Dockerfile.
ARG BASE_IMAGE=python:3.11-slim
ARG UV_VERSION=0.13.9

# (the same instructions as the other images' `uv` stage: one cached layer for all three)
FROM ${BASE_IMAGE} AS uv
ARG UV_VERSION
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi; \
    python3 -m venv /opt/uv && /opt/uv/bin/pip install -q "uv==${UV_VERSION}"
ENV UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=/nonexistent

FROM uv AS build
COPY pyproject.toml uv.lock /src/
RUN --mount=type=secret,id=ca --mount=type=cache,target=/root/.cache/uv \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi; \
    cd /src && python3 -m venv --without-pip /opt/venv \
 && /opt/uv/bin/uv export -q --frozen --no-emit-project --extra operator -o /tmp/operator.txt \
 && /opt/uv/bin/uv pip install -q --python /opt/venv/bin/python -r /tmp/operator.txt
# the README (the package's long description) only now: an edit of it rebuilds no dependency layer
COPY README.md /src/
COPY engine /src/engine
COPY operator /src/operator
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi; \
    /opt/uv/bin/uv pip install -q --python /opt/venv/bin/python --no-deps --no-cache /src \
 && /opt/venv/bin/python -c "import ragengine_operator.handlers, ragengine_operator.runtime, ragengine_operator.__main__" \
 && for absent in fastapi faiss docx pptx openpyxl pdfplumber pdfminer PIL lxml; do \
      ! /opt/venv/bin/python -c "import $absent" 2>/dev/null || { echo "$absent must not be in the operator image"; exit 1; }; done \
 && rm -rf /opt/venv/lib/python3.11/site-packages/kubernetes/aio `# the asyncio client (41 MB): kopf has its own` \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
RUN groupadd --gid 1000 ragengine && useradd --uid 1000 --gid 1000 --no-create-home --home-dir /tmp ragengine
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
USER 1000:1000
EXPOSE 8080 8081
ENTRYPOINT ["ragengine-operator"]
# Last, so that a new revision does not rebuild the layers above.
ARG VERSION=dev
ARG SOURCE=https://github.com/ragengine/ragengine
ARG REVISION=unknown
LABEL org.opencontainers.image.title="ragengine-operator" \
      org.opencontainers.image.description="ragengine's Kubernetes operator (kopf)" \
      org.opencontainers.image.version="${VERSION}" org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" org.opencontainers.image.licenses="Apache-2.0"
