# The RAGEngine operator. Build from the repository root:
#   docker build -f images/operator.Dockerfile -t ghcr.io/ragengine/operator:0.1.0 .
# Only the operator's dependencies (the `operator` extra): it imports ragengine.settings (pydantic only) and
# ragengine.filetypes (source sync), never FastAPI, FAISS, ONNX Runtime or torch; the build fails if one of them is there.
FROM python:3.11-slim
# git (+ ssh for git over SSH): the git sources
RUN apt-get update && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY pyproject.toml README.md /src/
COPY engine /src/engine
COPY operator /src/operator
RUN pip install "/src[operator]" \
 && python -c "import ragengine_operator.handlers" \
 && ! python -c "import fastapi" 2>/dev/null && ! python -c "import faiss" 2>/dev/null \
 && useradd --uid 1000 --user-group --no-create-home operator
USER 1000:1000
EXPOSE 8080 8081
ENTRYPOINT ["ragengine-operator"]
