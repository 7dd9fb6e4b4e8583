# The RAGEngine operator. Build from the repository root:
#   docker build -f images/operator.Dockerfile -t ghcr.io/ragengine/operator:0.1.0 .
# Only the operator's dependencies: it imports ragengine.settings (pydantic only) and ragengine.filetypes
# (the source sync's text extraction: stdlib + pypdf), never FAISS/torch. git: the git sources.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY pyproject.toml README.md /src/
COPY engine /src/engine
COPY operator /src/operator
RUN pip install "kopf>=1.37" "kubernetes>=37" "pyyaml>=6" "httpx>=0.27" "pydantic>=2.7" "pydantic-settings>=2.3" \
        "prometheus-client>=0.20" "pathspec>=0.12" "pypdf>=5.0" \
 && pip install --no-deps /src \
 && python -c "import ragengine_operator.handlers" \
 && useradd --uid 1000 --user-group --no-create-home operator
USER 1000:1000
EXPOSE 8080 8081
ENTRYPOINT ["ragengine-operator"]
