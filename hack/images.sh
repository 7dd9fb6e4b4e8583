#!/usr/bin/env bash
# Build and push ragengine's images with podman (docker builds the same Dockerfiles: docs/images.md).
#
#   hack/images.sh build [engine|operator|sync]...   build (default: all three), print each image's size
#   hack/images.sh push  [engine|operator|sync]...   push to $IMAGE_REGISTRY (after build)
#   hack/images.sh names                        print the image references, one per line
#   hack/images.sh build-previous               build the previous release's images (hack/previous-release.env)
#                                               from its own Dockerfiles, in a git worktree of that commit, tagged
#                                               previous-<commit>: what the helm upgrade test starts from
#
# IMAGE_REGISTRY (default localhost) and IMAGE_TAG (default dev) name the images:
# $IMAGE_REGISTRY/ragengine-engine:$IMAGE_TAG, $IMAGE_REGISTRY/ragengine-operator:$IMAGE_TAG and
# $IMAGE_REGISTRY/ragengine-sync:$IMAGE_TAG (the source-sync Jobs' worker).
# IMAGE_BASE: the Python base image; `auto` (default) uses python:3.11-slim when podman has it or can
# pull it, else a base made from Debian's packages (hack/images/debian-base.sh; no registry needed).
# Layers are cached: a second build with unchanged sources takes seconds. The host's uv cache is lent to
# the build when there is one (a cold build then downloads nothing the host already has).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REGISTRY=${IMAGE_REGISTRY:-localhost}
TAG=${IMAGE_TAG:-dev}
BASE=${IMAGE_BASE:-auto}
log() { echo "[images] $*" >&2; }

name() { echo "$REGISTRY/ragengine-$1:$TAG"; }

base_image() {
  [[ $BASE != auto ]] && { echo "$BASE"; return; }
  if podman image exists docker.io/library/python:3.11-slim \
     || timeout 60 podman pull -q docker.io/library/python:3.11-slim > /dev/null 2>&1; then
    echo docker.io/library/python:3.11-slim
  else
    log "no registry reachable for python:3.11-slim: using a base built from Debian's packages"
    "$ROOT/hack/images/debian-base.sh"
  fi
}

build() {
  local what=$1 base=$2 t0 args=()
  t0=$(date +%s)
  args=(--network host --layers -f "$ROOT/images/$what.Dockerfile" -t "$(name "$what")"
        --build-arg "BASE_IMAGE=$base" --build-arg "VERSION=$TAG"
        --build-arg "REVISION=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)")
  # A TLS-intercepting proxy's CA (this machine has one): a build secret, never a layer.
  for ca in "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    [[ -n $ca && -s $ca ]] && { args+=(--secret "id=ca,src=$ca"); break; }
  done
  # No download.pytorch.org here: torch for the export stage from PyPI (the same version, CUDA build).
  [[ $what == engine ]] && args+=(--build-arg "TORCH_INDEX_URL=${TORCH_INDEX_URL-}")
  local uv_cache=${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uv}
  [[ -d $uv_cache ]] && args+=(--volume "$uv_cache:/root/.cache/uv")
  log "building $(name "$what") on $base"
  podman build "${args[@]}" "$ROOT" >&2
  if [[ $what == engine ]]; then
    # The engine's export stage has torch (and no passwd entry for uid 1000): the tests run the operator's
    # vLLM environment in it (tests/images/test_vllm_user.py). Cached: this adds seconds, and is never pushed.
    podman build "${args[@]/$(name engine)/localhost/ragengine-torch:$TAG}" --target export "$ROOT" > /dev/null
  fi
  # The stage the final image copies its environment from, tagged so that the prune below keeps its layers
  # (untagged, it was dropped after every build, and the next build installed and compiled it all again:
  # about 80 s of every `make images` for the engine). Cached: seconds; never pushed.
  local stage=build; [[ $what == engine ]] && stage=app
  podman build "${args[@]/$(name "$what")/localhost/ragengine-$what-$stage:$TAG}" --target "$stage" "$ROOT" > /dev/null
  log "$(name "$what"): $(podman image inspect "$(name "$what")" --format '{{.Size}}' \
        | awk '{printf "%.0f MB", $1/1e6}') in $(( $(date +%s) - t0 )) s"
}

cmd=${1:-build}; shift || true
asked=("$@")
what=("$@"); [[ ${#what[@]} -eq 0 ]] && what=(engine operator sync)
case $cmd in
  build)
    command -v podman > /dev/null || { log "podman is missing: run hack/install-system.sh"; exit 1; }
    base=$(base_image)
    for w in "${what[@]}"; do build "$w" "$base"; done
    # Each rebuild leaves the images it replaced untagged (the torch stage alone is 7 GB): drop them.
    podman image prune -f > /dev/null ;;
  push) for w in "${what[@]}"; do podman push "$(name "$w")"; done ;;
  names) for w in "${what[@]}"; do name "$w"; done ;;
  build-previous)
    . "$ROOT/hack/previous-release.env"
    git -C "$ROOT" cat-file -e "$PREVIOUS_RELEASE^{commit}" 2>/dev/null \
      || { log "commit $PREVIOUS_RELEASE (hack/previous-release.env) is not in this clone: git fetch --unshallow"; exit 1; }
    tree=$ROOT/.cache/previous-release/${PREVIOUS_RELEASE:0:12}
    if [[ $(git -C "$tree" rev-parse HEAD 2>/dev/null) != "$PREVIOUS_RELEASE" ]]; then
      rm -rf "$tree"; git -C "$ROOT" worktree prune
      git -C "$ROOT" worktree add --detach "$tree" "$PREVIOUS_RELEASE" > /dev/null
    fi
    # A release's images are made from one commit and never change: kept once built (REBUILD_PREVIOUS=1
    # builds them again), which saves make test about 80 s on every run.
    kept=1
    for image in $(IMAGE_TAG=previous-${PREVIOUS_RELEASE:0:12} bash "$tree/hack/images.sh" names ${asked[@]+"${asked[@]}"}); do
      podman image exists "$image" || kept=0
    done
    if [[ $kept == 1 && ${REBUILD_PREVIOUS:-0} != 1 ]]; then
      log "the previous release ${PREVIOUS_RELEASE:0:12}: its images are already built (REBUILD_PREVIOUS=1 rebuilds them)"
      exit 0
    fi
    log "the previous release ${PREVIOUS_RELEASE:0:12}: its own images.sh and Dockerfiles"
    # only what was asked for: by default, the images that release has (its own default list; it may
    # predate an image, as releases before the sync image do)
    IMAGE_TAG=previous-${PREVIOUS_RELEASE:0:12} bash "$tree/hack/images.sh" build ${asked[@]+"${asked[@]}"} ;;
  *) echo "usage: $0 build|push|names|build-previous [engine|operator|sync]..." >&2; exit 2 ;;
esac
