#!/usr/bin/env bash
# A local Kubernetes cluster for the operator's tests and benchmarks: etcd + kube-apiserver +
# kube-controller-manager + kube-scheduler + kwok (fake nodes, some with nvidia.com/gpu), and one REAL
# node (containerd + kubelet on this machine, hack/node.sh) where the end-to-end tests run containers.
# Built once from Go modules (hack/control-plane/build.sh) together with the kubectl of the same
# release. The API server admits like a hardened cluster: ServiceAccount, PodSecurity and
# OwnerReferencesPermissionEnforcement are on. docs/local-control-plane.md explains it all.
#
#   hack/cluster.sh build        build the binaries into the cache (once; progress on stderr)
#   hack/cluster.sh up           build if needed, start everything, write .cluster/kubeconfig (idempotent)
#   hack/cluster.sh down         stop every component by its recorded PID, wipe etcd's data, tear the node down
#   hack/cluster.sh env          print `export KUBECONFIG=...` and PATH (for eval)
#   hack/cluster.sh status       show which components run, and the real node
#   hack/cluster.sh load-images  re-import the images `make images` built into the real node
#
# RAGENGINE_REAL_NODE=0 starts no real node (a second cluster on the same machine, or a machine that
# cannot run one: `up` says why in one line and goes on without it; the tests that need it then fail).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${RAGENGINE_CLUSTER_DIR:-$ROOT/.cluster}
PKI=$STATE/pki LOGS=$STATE/logs RUN=$STATE/run
ETCD_PORT=${ETCD_PORT:-12379} ETCD_PEER_PORT=${ETCD_PEER_PORT:-12380}
API_PORT=${API_PORT:-16443}
KCM_PORT=${KCM_PORT:-16257} SCHED_PORT=${SCHED_PORT:-16259}
KWOK_PORT=${KWOK_PORT:-16280}
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
. "$ROOT/hack/control-plane/versions.env"
BIN=${K8S_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ragengine/k8s-bin/$BIN_KEY}

NODE_IP=$(ip -4 route get 1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1)
NODE_IP=${NODE_IP:-127.0.0.1}

log() { echo "[cluster] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# A PID is ours only if it is alive and runs the binary we started (PIDs get reused).
alive() {
  local f=$RUN/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  # Read whole, then matched: `tr | grep -q` under pipefail could fail on grep's early exit. The 2>/dev/null
  # comes before the `<`, which fails first: a gone PID's missing file is a fact here, not an error to print.
  local cmd
  cmd=$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline") && [[ $cmd == *"$BIN/$1"* ]]
}

# Running its own binary within 5 s: a component just started shows the shell's command line until its fork
# has exec'd, which on a loaded machine took longer than the 0.1 s the check waited ("kwok exited" while kwok ran).
started() {
  local i
  for i in $(seq 50); do alive "$1" && return 0; sleep 0.1; done
  return 1
}

stop() {
  local c=$1 pid i
  if alive "$c"; then
    pid=$(cat "$RUN/$c.pid"); kill "$pid" 2>/dev/null || true
    for i in $(seq 50); do alive "$c" || break; sleep 0.1; done
    alive "$c" && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$RUN/$c.pid"
}

start() {  # start NAME ARGS...: detached from this shell, PID recorded
  local c=$1; shift
  setsid "$BIN/$c" "$@" > "$LOGS/$c.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$c.pid"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local t=$1 what=$2 end; shift 2
  end=$(( $(date +%s) + t ))
  until "$@" > /dev/null 2>&1; do
    [[ $(date +%s) -lt $end ]] || die "timed out after ${t}s waiting for $what (logs: $LOGS)"
    sleep 0.2
  done
}

api_ready() {
  curl -sf --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(cat "$STATE/token")" \
    "https://127.0.0.1:$API_PORT/readyz"
}

pki() {
  if [[ ! -f $PKI/ca.crt || ! -f $STATE/token ]]; then
    log "creating PKI and an admin token in $PKI"
    mkdir -p "$PKI"
    (
      cd "$PKI"
      openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=ragengine-local-ca" \
        -keyout ca.key -out ca.crt 2>/dev/null
      openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    )
    openssl rand -hex 24 > "$STATE/token"
    # token,user,uid,groups: the admin is in system:masters (a local test cluster).
    echo "$(cat "$STATE/token"),admin,admin,system:masters" > "$PKI/tokens.csv"
  fi
  # The API server's client certificate for kubelets (logs, exec, port-forward): a kubelet's API
  # authenticates it by the cluster CA and authorizes it through RBAC (system:masters).
  [[ -f $PKI/kubelet-client.crt ]] || (
    cd "$PKI"
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      -keyout kubelet-client.key -out kubelet-client.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n' > client.ext
    openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile client.ext -out kubelet-client.crt 2>/dev/null
  )
  # The serving certificate names the machine's address too (pods reach the API server there), and is
  # made again when that address changed.
  local sans="IP:127.0.0.1,IP:$NODE_IP,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  [[ -f $PKI/apiserver.crt && $(cat "$PKI/apiserver.sans" 2>/dev/null) == "$sans" ]] && return
  (
    cd "$PKI"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr 2>/dev/null
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$sans" > san.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile san.ext -out apiserver.crt 2>/dev/null
  )
  echo "$sans" > "$PKI/apiserver.sans"
}

kubeconfig() {
  cat > "$STATE/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ragengine-local
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: admin
  user: {token: "$(cat "$STATE/token")"}
contexts:
- name: ragengine-local
  context: {cluster: ragengine-local, user: admin, namespace: default}
current-context: ragengine-local
EOF
  chmod 600 "$STATE/kubeconfig"
}

all_up() { for c in "${COMPONENTS[@]}"; do alive "$c" || return 1; done; api_ready > /dev/null 2>&1; }

up() {
  BIN=$("$ROOT/hack/control-plane/build.sh")
  mkdir -p "$STATE" "$LOGS" "$RUN"
  if all_up; then log "already up: export KUBECONFIG=$STATE/kubeconfig"; node_up; return; fi
  # A partial or stale cluster: stop what still runs (by PID), then start clean.
  for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
  rm -rf "$STATE/etcd"
  pki
  local t0; t0=$(date +%s)
  log "starting etcd on 127.0.0.1:$ETCD_PORT"
  start etcd --name local --data-dir "$STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" --log-level warn
  wait_for 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  log "starting kube-apiserver on https://127.0.0.1:$API_PORT"
  # Admission as on a hardened cluster (OpenShift-like): ServiceAccount and PodSecurity (on by
  # default) plus OwnerReferencesPermissionEnforcement, which refuses blockOwnerDeletion without
  # `update` on the owner's finalizers. Tests wait for a namespace's default ServiceAccount.
  # Bound on every address and advertised at the machine's: the `kubernetes` Service then has an endpoint
  # that pods on the real node reach (the operator from its chart, source-sync Jobs).
  start kube-apiserver --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port="$API_PORT" \
    --kubelet-client-certificate="$PKI/kubelet-client.crt" --kubelet-client-key="$PKI/kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
    --authorization-mode=Node,RBAC --service-cluster-ip-range=10.96.0.0/16 \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --allow-privileged=true \
    --enable-admission-plugins=ServiceAccount,PodSecurity,OwnerReferencesPermissionEnforcement \
    --enable-priority-and-fairness=false --profiling=false --v=0
  wait_for 90 kube-apiserver api_ready
  kubeconfig
  local kc=$STATE/kubeconfig
  log "starting kube-controller-manager, kube-scheduler, kwok"
  # hostpath provisioner: PVCs bind (dev-only provisioner, dirs under /tmp/hostpath_pv), so pods with
  # volumes schedule. Controllers: all defaults (GC, deployments, PV binder, namespaces).
  start kube-controller-manager --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range=10.96.0.0/16 --use-service-account-credentials=false \
    --enable-hostpath-provisioner=true --concurrent-deployment-syncs=10 \
    --concurrent-gc-syncs=20 --kube-api-qps=200 --kube-api-burst=400 --profiling=false
  start kube-scheduler --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false --profiling=false
  # kwok manages only nodes annotated kwok.x-k8s.io/node=fake and drives their pods to Running.
  start kwok --kubeconfig="$kc" --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --manage-nodes-with-label-selector= --manage-single-node= \
    --server-address="127.0.0.1:$KWOK_PORT" \
    --cidr=10.244.0.0/16 --node-ip=10.0.0.1 --node-lease-duration-seconds=40
  for c in "${COMPONENTS[@]}"; do started "$c" || die "$c exited; see $LOGS/$c.log"; done
  KUBECONFIG=$kc "$BIN/kubectl" apply -f "$ROOT/hack/control-plane/cluster-objects.yaml" > /dev/null
  wait_for 60 "fake nodes Ready" env KUBECONFIG="$kc" "$BIN/kubectl" wait --for=condition=Ready node --all --timeout=2s
  wait_for 60 "default ServiceAccount" env KUBECONFIG="$kc" "$BIN/kubectl" get serviceaccount default -n default
  log "control plane up in $(( $(date +%s) - t0 )) s: export KUBECONFIG=$kc"
  node_up
}

node_up() {
  [[ ${RAGENGINE_REAL_NODE:-1} == 0 ]] && { log "RAGENGINE_REAL_NODE=0: no real node"; return; }
  # One more try when this machine can run the node but the first start failed (what failed is in
  # .cluster/logs/node-up.log, which the node's tests quote).
  if API_PORT=$API_PORT "$ROOT/hack/node.sh" up \
     || { "$ROOT/hack/node.sh" check > /dev/null && log "the real node did not start: once more" \
          && { "$ROOT/hack/node.sh" down || true; } && API_PORT=$API_PORT "$ROOT/hack/node.sh" up; }; then
    # With the real node the working class is the default: `local` volumes get the pod's fsGroup, the
    # hostpath provisioner's root-owned 0750 directories do not (a RAGEngine with default storage would
    # crash-loop on an unwritable /data). hack/node/local_pv.py provisions them for any node.
    local kc=$STATE/kubeconfig
    KUBECONFIG=$kc "$BIN/kubectl" annotate storageclass standard --overwrite \
      storageclass.kubernetes.io/is-default-class=false > /dev/null
    KUBECONFIG=$kc "$BIN/kubectl" annotate storageclass ragengine-local --overwrite \
      storageclass.kubernetes.io/is-default-class=true > /dev/null
  else
    log "going on without the real node (see above)"
  fi
}

down() {
  [[ ${RAGENGINE_REAL_NODE:-1} == 0 ]] || "$ROOT/hack/node.sh" down || true
  for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
  rm -rf "$STATE/etcd"
  # volumes of kube-controller-manager's dev hostpath provisioner: a fixed path shared by every local
  # cluster on the machine, so kept while another one (other ports and state dir) still runs
  pgrep -f -- "--enable-hostpath-provisioner" > /dev/null || rm -rf /tmp/hostpath_pv
  log "down"
}

case ${1:-} in
  build) "$ROOT/hack/control-plane/build.sh" > /dev/null ;;
  up) up ;;
  down) down ;;
  env) echo "export KUBECONFIG=$STATE/kubeconfig PATH=$BIN:\$PATH" ;;
  status) for c in "${COMPONENTS[@]}"; do alive "$c" && echo "$c: running (pid $(cat "$RUN/$c.pid"))" || echo "$c: stopped"; done
          [[ ${RAGENGINE_REAL_NODE:-1} == 0 ]] || API_PORT=$API_PORT "$ROOT/hack/node.sh" status ;;
  load-images) API_PORT=$API_PORT "$ROOT/hack/node.sh" load-images ;;
  *) echo "usage: $0 build|up|down|env|status|load-images" >&2; exit 2 ;;
esac
