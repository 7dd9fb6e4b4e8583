#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and helm from Go
# modules (no registry ships them) into a cache dir outside the repo, the real node's kubelet,
# kube-proxy, CoreDNS and kube-router (docs/local-control-plane.md), and versitygw, the S3 server of the
# S3 source tests (docs/sources.md). Idempotent: exits at once
# when every binary is there. Progress goes to stderr; the bin dir is printed on stdout.
# Do not edit while a build runs (bash reads scripts lazily); hack/cluster.sh sources versions.env.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"
BIN=${K8S_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ragengine/k8s-bin/$BIN_KEY}
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm
          kubelet kube-proxy coredns kube-router crictl versitygw)
NODE_STAMP="coredns=$COREDNS_VERSION kube-router=$KUBE_ROUTER_VERSION crictl=$CRICTL_VERSION"

have_all() {
  for b in "${BINARIES[@]}"; do [[ -x $BIN/$b ]] || return 1; done
  [[ $(cat "$BIN/node-versions" 2>/dev/null) == "$NODE_STAMP" ]] && [[ $(cat "$BIN/versitygw-version" 2>/dev/null) == "$VERSITYGW_VERSION" ]]
}
if have_all; then echo "$BIN"; exit 0; fi

log() { echo "[build $(date +%H:%M:%S)] $*" >&2; }
# The module proxy may lack a release (seen: k8s.io/kubernetes v1.33.5's staging modules 403 here).
trap 'log "FAILED. If a module version is not on the proxy (403/404 above), pin another patch release in $HERE/versions.env"' ERR
# GOTOOLCHAIN=local: never try to fetch another Go; pinned releases all declare go <= 1.26.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath
mkdir -p "$BIN"
WORK="$BIN/.work"; rm -rf "$WORK"; mkdir -p "$WORK"
T0=$(date +%s)

build_kube() {
  [[ -x $BIN/kube-apiserver && -x $BIN/kube-controller-manager && -x $BIN/kube-scheduler && -x $BIN/kubelet \
     && -x $BIN/kube-proxy ]] && return
  local W="$WORK/kube"; cp -r "$HERE/kube" "$W"; cd "$W"
  go mod init ragengine.local/k8sbin 2>/dev/null
  # k8s.io/kubernetes requires every staging module at v0.0.0 and replaces them with local paths,
  # which are ignored when it is a dependency: replace each with the published v0.Y.Z tag. The
  # list comes from the tag's own go.mod so a new minor with new staging modules just works.
  log "resolving k8s.io/kubernetes@$K8S_VERSION"
  local gomod; gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  { echo 'replace ('
    awk -v v="$STAGING_VERSION" '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { printf "\t%s => %s %s\n", $1, $1, v }' "$gomod"
    echo ')'; } >> go.mod
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
  go mod tidy >&2
  cp go.mod go.sum "$BIN/" 2>/dev/null || true
  local ld; ld=$(version_ldflags)
  log "compiling kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy (the long part)"
  go build -v -ldflags "$ld" -o "$BIN/" ./cmd/... 2>&1 | awk '{ n++; if (n % 50 == 0) printf "[build] %d packages compiled (last: %s)\n", n, $0 > "/dev/stderr" }'
  [[ ${PIPESTATUS[0]} -eq 0 ]]
}

version_ldflags() {  # the release's version strings, as upstream's build stamps them
  local v=${K8S_VERSION#v} maj min ld="-s -w" date p; maj=${v%%.*}; min=${v#*.}; min=${min%%.*}
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$maj -X $p.gitMinor=$min"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
  done
  echo "$ld"
}

build_kubectl() {
  [[ -x $BIN/kubectl ]] && return
  local W="$WORK/kubectl"; cp -r "$HERE/kubectl" "$W"; cd "$W"
  # k8s.io/kubectl is a published staging module: no replace directives needed, same release.
  go mod init ragengine.local/kubectlbin 2>/dev/null
  go mod edit -require="k8s.io/kubectl@$STAGING_VERSION" -require="k8s.io/component-base@$STAGING_VERSION"
  go mod tidy >&2
  log "compiling kubectl $K8S_VERSION"
  go build -ldflags "$(version_ldflags)" -o "$BIN/kubectl" .
}

build_etcd() {
  [[ -x $BIN/etcd ]] && return
  local W="$WORK/etcd"; cp -r "$HERE/etcd" "$W"; cd "$W"
  # Own module: etcd's dependency set is etcd's, not k8s's newer grpc.
  go mod init ragengine.local/etcdbin 2>/dev/null
  go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  # etcd 3.5 pins reflect2 v1.0.1 / json-iterator v1.1.11, which crash at runtime on Go >= 1.18.
  go mod edit -require=github.com/modern-go/reflect2@v1.0.2 -require=github.com/json-iterator/go@v1.1.12
  go mod tidy >&2
  log "compiling etcd $ETCD_VERSION"
  go build -ldflags "-s -w" -o "$BIN/etcd" ./cmd/etcd
}

build_plain() {  # modules without replace directives: plain go install
  local name=$1 pkg=$2
  [[ -x $BIN/$name ]] && return
  log "go install $pkg"
  GOBIN="$BIN" go install -ldflags "-s -w" "$pkg"
}

build_node_agents() {  # rebuilt when their pinned versions change (node-versions stamp)
  [[ $(cat "$BIN/node-versions" 2>/dev/null) == "$NODE_STAMP" ]] || rm -f "$BIN/coredns" "$BIN/kube-router" "$BIN/crictl"
  build_plain coredns "github.com/coredns/coredns@$COREDNS_VERSION"
  build_plain crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  build_plain kube-router "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
  echo "$NODE_STAMP" > "$BIN/node-versions"
}

build_s3_server() {  # its own stamp: a version bump rebuilds it alone
  [[ $(cat "$BIN/versitygw-version" 2>/dev/null) == "$VERSITYGW_VERSION" ]] || rm -f "$BIN/versitygw"
  build_plain versitygw "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  echo "$VERSITYGW_VERSION" > "$BIN/versitygw-version"
}

build_etcd
build_plain kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
build_plain helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
build_kube
build_kubectl
build_node_agents
build_s3_server
rm -rf "$WORK"
T1=$(date +%s)
echo "cold build: $((T1 - T0)) s on $(nproc) cores ($(date -u +%FT%TZ))" >> "$BIN/build-time.txt"
log "done in $((T1 - T0)) s -> $BIN"
have_all
echo "$BIN"
