# syntax=docker/dockerfile:1
# The source-sync worker (`ragengine-operator sync-source`, docs/sources.md): the image of the sync Jobs the
# operator starts in a RAGEngine's namespace. It fetches (git and ssh from Debian, HTTP), parses (the
# `documents` extra: PDF, Word, PowerPoint, Excel) and pushes to the engine's API: the `sync` extra of
# uv.lock. Neither kopf nor the Kubernetes client (the worker never talks to the API server), no FastAPI,
# FAISS or torch: the build checks. Runs as uid 1000 with a read-only root filesystem (/tmp is a volume).
#
#   make images                      # podman: localhost/ragengine-sync:dev (docs/images.md)
#   docker build -f images/sync.Dockerfile -t <registry>/ragengine-sync:<tag> .
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
 && /opt/uv/bin/uv export -q --frozen --no-emit-project --extra sync -o /tmp/sync.txt \
 && /opt/uv/bin/uv pip install -q --python /opt/venv/bin/python -r /tmp/sync.txt
# the README (the package's long description) only now: an edit of it rebuilds no dependency layer
COPY README.md /src/
COPY engine /src/engine
COPY operator /src/operator
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi; \
    /opt/uv/bin/uv pip install -q --python /opt/venv/bin/python --no-deps --no-cache /src \
 && /opt/venv/bin/python -c "import ragengine_operator.sources.worker, ragengine_operator.sources.traced, ragengine_operator.sources.s3, ragengine_operator.sources.s3_identity, httpx_auth, ragengine.parsing.formats, docx, pptx, openpyxl, pdfplumber, defusedxml" \
 && for absent in kopf kubernetes fastapi faiss torch; do \
      ! /opt/venv/bin/python -c "import $absent" 2>/dev/null || { echo "$absent must not be in the sync image"; exit 1; }; done \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
# git sources (http(s) and ssh); the CA certificates for https
RUN apt-get update && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/cache/debconf/*-old /var/log/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/* \
 && groupadd --gid 1000 ragengine && useradd --uid 1000 --gid 1000 --no-create-home --home-dir /tmp ragengine
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
USER 1000:1000
# The operator's Jobs give the same command (manifests/sync_job.py) and the request in their environment.
ENTRYPOINT ["ragengine-operator", "sync-source"]
# Last, so that a new revision does not rebuild the layers above.
ARG VERSION=dev
ARG SOURCE=https://github.com/ragengine/ragengine
ARG REVISION=unknown
LABEL org.opencontainers.image.title="ragengine-sync" \
      org.opencontainers.image.description="ragengine's source-sync worker: git, HTTP and ConfigMap sources fetched, parsed (PDF, Office) and pushed to the engine" \
      org.opencontainers.image.version="${VERSION}" org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" org.opencontainers.image.licenses="Apache-2.0"
