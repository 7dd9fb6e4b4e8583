#!/usr/bin/env bash
# The local cluster's one REAL node, beside kwok's fake ones: containerd + runc + kubelet on this machine,
# with kube-proxy (Services), CoreDNS (cluster DNS), kube-router's firewall (NetworkPolicy) and a small
# provisioner of `local` PVs (volumes a uid-1000 pod can write), all run as host processes. hack/cluster.sh
# calls it after the control plane is up; docs/local-control-plane.md explains the whole.
#
#   hack/node.sh up            start the node (idempotent); imports the pause image and the local images
#   hack/node.sh down          stop it and remove what it made: pods, processes, iptables chains and ipsets,
#                              the bridge, mounts (containerd's image store is kept as a cache)
#   hack/node.sh status        one line per component
#   hack/node.sh load-images   (re)import the images `make images` built into the node's containerd
#   hack/node.sh check         exit 0 if this machine can run the node, else say why in one line
#
# The node is tainted `node.ragengine.io/real=true:NoSchedule` and labelled `node.ragengine.io/real=true`:
# only pods that ask for it (the end-to-end tests, the chart's operator in them) run there; everything
# else keeps landing on kwok's nodes. One real node per machine (kube-proxy and the firewall own global
# iptables state): a second checkout's `up` says so and leaves the first alone.
set -eEuo pipefail  # -E: the ERR trap of `up` also fires inside the functions it calls
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${RAGENGINE_CLUSTER_DIR:-$ROOT/.cluster}
. "$ROOT/hack/control-plane/versions.env"
BIN=${K8S_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ragengine/k8s-bin/$BIN_KEY}
PKI=$STATE/pki LOGS=$STATE/logs RUN=$STATE/run NODE=$STATE/node
NODE_NAME=${RAGENGINE_NODE_NAME:-ragengine-node}
POD_CIDR=10.85.0.0/16 GATEWAY=10.85.0.1 BRIDGE=rgn0
SERVICE_CIDR=10.96.0.0/16
SOCK=$NODE/containerd.sock
PAUSE_IMAGE=localhost/ragengine-pause:1.0
LOCK=/run/ragengine-node.owner  # machine-wide: which checkout runs the real node
COMPONENTS=(containerd kubelet kube-proxy coredns kube-router local-pv)
. "$ROOT/hack/previous-release.env"
PREVIOUS_TAG=previous-${PREVIOUS_RELEASE:0:12}  # hack/images.sh build-previous: the helm upgrade test's start
# (the previous release has no sync image: its sync Jobs run its operator image)
IMAGES=(localhost/ragengine-engine:dev localhost/ragengine-operator:dev localhost/ragengine-sync:dev
        "localhost/ragengine-engine:$PREVIOUS_TAG" "localhost/ragengine-operator:$PREVIOUS_TAG")

# `up` also writes its lines to $LOGS/node-up.log: the node's tests quote it when the node is missing (a CI
# log shows the tests' failures, rarely this script's output).
UP_LOG=""
log() { echo "[node] $*" >&2; [[ -z $UP_LOG ]] || echo "[node] $*" >> "$UP_LOG"; }
die() { log "ERROR: $*"; exit 1; }

node_ip() { ip -4 route get 1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1; }

# Why this machine cannot run the node, in one line; nothing when it can.
why_not() {
  [[ $(id -u) == 0 ]] || { echo "the real node needs root (containerd, kubelet, iptables)"; return; }
  local c
  for c in containerd runc iptables ip6tables ipset conntrack ip gcc podman; do
    command -v "$c" > /dev/null || { echo "$c is missing: run hack/install-system.sh"; return; }
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || { echo "the CNI plugins are missing: run hack/install-system.sh"; return; }
  for c in kubelet kube-proxy coredns kube-router crictl; do
    [[ -x $BIN/$c ]] || { echo "$BIN/$c is missing: run hack/control-plane/build.sh"; return; }
  done
  [[ -d /sys/fs/cgroup/memory || -f /sys/fs/cgroup/cgroup.controllers ]] || { echo "no memory cgroup controller"; return; }
  [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] || { echo "no br_netfilter (bridged pod traffic would skip kube-proxy's rules)"; return; }
  [[ -n $(node_ip) && $(node_ip) != 127.* ]] || { echo "no non-loopback IPv4 address for the node (ip -4 route get 1)"; return; }
  [[ -x $ROOT/.venv/bin/python ]] || { echo "the local PV provisioner needs the project's .venv: run make install"; return; }
  if [[ -f $LOCK ]] && [[ $(cat "$LOCK") != "$STATE" ]] && pgrep -f -- "--config $(cat "$LOCK")/node/containerd.toml" > /dev/null; then
    echo "another checkout's cluster ($(cat "$LOCK")) runs this machine's real node"; return
  fi
}

alive() {
  local f=$RUN/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  # Read whole, then matched: `tr | grep -q` under pipefail could fail on grep's early exit. The 2>/dev/null
  # comes before the `<`, which fails first: a gone PID's missing file is a fact here, not an error to print.
  local cmd
  cmd=$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline") && [[ $cmd == *"$2"* ]]
}
ident() {  # what a component's command line contains (PIDs get reused: check it is still ours)
  case $1 in
    containerd) echo "$NODE/containerd.toml" ;;
    local-pv) echo "local_pv.py" ;;
    *) echo "$BIN/$1" ;;
  esac
}
up_() { alive "$1" "$(ident "$1")"; }
# Running its own command within 5 s: a component just started shows this shell's command line until its fork
# has exec'd (on a loaded machine longer than the 1 s the check waited: the node was given up for an "exited"
# component that was starting).
started() {
  local i
  for i in $(seq 50); do up_ "$1" && return 0; sleep 0.1; done
  return 1
}

start() {  # start NAME CMD...: detached, PID recorded, log in $LOGS/NAME.log
  local c=$1; shift
  setsid "$@" > "$LOGS/$c.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$c.pid"
}

stop() {
  local c=$1 pid i
  if up_ "$c"; then
    pid=$(cat "$RUN/$c.pid"); kill "$pid" 2>/dev/null || true
    for i in $(seq 100); do up_ "$c" || break; sleep 0.1; done
    up_ "$c" && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$RUN/$c.pid"
}

wait_for() {  # wait_for SECONDS WHAT CMD...
  local t=$1 what=$2 end; shift 2
  end=$(( $(date +%s) + t ))
  until "$@" > /dev/null 2>&1; do
    [[ $(date +%s) -lt $end ]] || { up_failed "$LINENO" "waiting ${t}s for $what"; die "timed out after ${t}s waiting for $what (logs: $LOGS)"; }
    sleep 0.2
  done
}

kctl() { KUBECONFIG=$STATE/kubeconfig "$BIN/kubectl" "$@"; }
crictl_() { "$BIN/crictl" --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" --timeout 30s "$@"; }

cert() {  # cert NAME SUBJECT [SAN]: a key and a certificate signed by the cluster CA
  local name=$1 subj=$2 san=${3:-} ext
  [[ -f $PKI/$name.crt ]] && return
  ext=$(mktemp)
  { [[ -n $san ]] && echo "subjectAltName=$san"
    echo "basicConstraints=CA:FALSE"
    [[ $name == kubelet-serving ]] && echo "extendedKeyUsage=serverAuth" || echo "extendedKeyUsage=clientAuth"; } > "$ext"
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$PKI/$name.key" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 \
    -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$ext" "$PKI/$name.csr"
}

kubeconfig_for() {  # kubeconfig_for NAME: a kubeconfig with the client certificate NAME
  cat > "$NODE/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:${API_PORT:-16443}", certificate-authority: "$PKI/ca.crt"}}]
users: [{name: $1, user: {client-certificate: "$PKI/$1.crt", client-key: "$PKI/$1.key"}}]
contexts: [{name: local, context: {cluster: local, user: $1}}]
current-context: local
EOF
  chmod 600 "$NODE/$1.kubeconfig"
}

containerd_config() {
  # containerd's defaults, then: its own paths; restrict_oom_score_adj (root here lacks CAP_SYS_RESOURCE,
  # so lowering oom_score_adj fails and every sandbox with it); a local pause image; Debian's CNI plugins
  # and runc.
  containerd config default | sed \
    -e "s#^root = .*#root = \"$NODE/containerd/root\"#" \
    -e "s#^state = .*#state = \"$NODE/containerd/state\"#" \
    -e "s#address = \"/run/containerd/containerd.sock\"#address = \"$SOCK\"#" \
    -e "s#restrict_oom_score_adj = false#restrict_oom_score_adj = true#" \
    -e "s#sandbox_image = .*#sandbox_image = \"$PAUSE_IMAGE\"#" \
    -e "s#bin_dir = \"/opt/cni/bin\"#bin_dir = \"/usr/lib/cni\"#" \
    -e "s#conf_dir = \"/etc/cni/net.d\"#conf_dir = \"$NODE/cni/net.d\"#" \
    -e "s#BinaryName = \"\"#BinaryName = \"$(command -v runc)\"#" \
    -e "s#path = \"/opt/containerd\"#path = \"$NODE/containerd/opt\"#" \
    > "$NODE/containerd.toml"
  cat > "$NODE/cni/net.d/10-ragengine.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "ragengine", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$NODE/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GATEWAY"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
EOF
}

pause_image() {  # a static C program as a one-file image: no registry needed
  podman image exists "$PAUSE_IMAGE" && return
  local work; work=$(mktemp -d)
  gcc -Os -static -o "$work/pause" "$ROOT/hack/control-plane/node/pause/pause.c"
  strip "$work/pause" 2>/dev/null || true
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$work/Containerfile"
  podman build -q -t "$PAUSE_IMAGE" "$work" > /dev/null
  rm -rf "$work"
}

import_image() {  # import_image REF: into containerd's k8s.io namespace, unless it already has this image
  local ref=$1 want have tar
  podman image exists "$ref" || { log "$ref not built (make images): skipped"; return; }
  want=$(podman image inspect "$ref" --format '{{.Id}}')
  have=$(crictl_ inspecti -o go-template --template '{{.status.id}}' "$ref" 2>/dev/null || true)
  [[ $have == "sha256:$want" || $have == "$want" ]] && return
  tar=$(mktemp "$NODE/image.XXXXXX.tar")
  podman save -q --format docker-archive -o "$tar" "$ref"
  ctr --address "$SOCK" -n k8s.io images import --no-unpack=false "$tar" > /dev/null
  rm -f "$tar"
  log "imported $ref"
}

load_images() {
  up_ containerd || die "the node is not up (hack/cluster.sh up)"
  pause_image
  import_image "$PAUSE_IMAGE"
  local ref; for ref in "${IMAGES[@]}"; do import_image "$ref"; done
}

all_up() { for c in "${COMPONENTS[@]}"; do up_ "$c" || return 1; done; }

FAILED=0
up_failed() {  # up_failed LINE COMMAND: what failed, and the last lines of this start's logs that say why
  [[ $FAILED == 0 ]] || return 0  # once: the ERR trap fires again in each caller the failure returns through
  FAILED=1
  log "ERROR: hack/node.sh line $1 failed: $2"
  local c l; for c in containerd kubelet; do
    [[ $LOGS/$c.log -nt $RUN/node-up.started ]] || continue  # a log of an earlier start says nothing of this one
    log "the last lines of $LOGS/$c.log:"
    tail -n 8 "$LOGS/$c.log" | while IFS= read -r l; do log "    $l"; done
  done
  return 0
}

up() {
  local why; why=$(why_not)
  [[ -z $why ]] || { log "cannot start the real node: $why"; return 1; }
  mkdir -p "$NODE"/{cni/net.d,cni/ipam,containerd,kubelet,volumes} "$LOGS" "$RUN"
  UP_LOG=$LOGS/node-up.log; echo "--- hack/node.sh up, $(date -u +%FT%TZ)" >> "$UP_LOG"
  touch "$RUN/node-up.started"
  trap 'up_failed $LINENO "$BASH_COMMAND"' ERR
  if all_up; then load_images; log "already up"; return; fi
  down_processes
  local ip t0; ip=$(node_ip); t0=$(date +%s)
  echo "$STATE" > "$LOCK"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  cert kubelet-serving "/CN=$NODE_NAME" "IP:$ip,DNS:$NODE_NAME"
  cert kube-proxy "/CN=system:kube-proxy"
  kubeconfig_for kubelet; kubeconfig_for kube-proxy
  containerd_config
  # The bridge exists before the first pod, so CoreDNS can bind the gateway address.
  ip link show "$BRIDGE" > /dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr show dev "$BRIDGE" | grep -q "$GATEWAY/" || ip addr add "$GATEWAY/16" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 > /dev/null

  log "starting containerd ($SOCK)"
  start containerd containerd --config "$NODE/containerd.toml"
  wait_for 30 containerd ctr --address "$SOCK" version
  load_images

  cat > "$NODE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs            # containerd 1.6 cannot report its driver; cgroupfs is its default
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
clusterDNS: [$GATEWAY]            # CoreDNS on the host, bound to the bridge's gateway
clusterDomain: cluster.local
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:                   # never anonymous: the API server's client certificate, or a token
  anonymous: {enabled: false}     # checked by TokenReview
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}    # SubjectAccessReview against the cluster's RBAC
registerWithTaints: [{key: node.ragengine.io/real, value: "true", effect: NoSchedule}]
maxPods: 60
serializeImagePulls: false
# A ConfigMap or Secret volume is refreshed at the pod's next sync: every minute at the kubelet's default, 10 s
# here (a test node with a few pods), so a test of a mounted edit waits seconds, not a minute per edit.
syncFrequency: 10s
# A developer's disk is shared with podman's image store, whose builds take gigabytes for a while: at the
# kubelet's own thresholds (5% free) a build beside a run put the node under disk pressure, and its image
# garbage collection removed every image it was not running (the previous release's included, which the
# next start imported again). Absolute floors instead, for a node that holds only test pods.
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
evictionHard: {memory.available: 200Mi, nodefs.available: 2Gi, imagefs.available: 2Gi}
EOF
  log "starting kubelet as $NODE_NAME on $ip"
  start kubelet "$BIN/kubelet" --config="$NODE/kubelet.yaml" --kubeconfig="$NODE/kubelet.kubeconfig" \
    --root-dir="$NODE/kubelet" --cert-dir="$NODE/kubelet/pki" --hostname-override="$NODE_NAME" \
    --node-ip="$ip" --node-labels=node.ragengine.io/real=true --v=1
  log "starting kube-proxy, CoreDNS, the local PV provisioner, then kube-router's firewall"
  start kube-proxy "$BIN/kube-proxy" --kubeconfig="$NODE/kube-proxy.kubeconfig" --hostname-override="$NODE_NAME" \
    --cluster-cidr="$POD_CIDR" --proxy-mode=iptables --conntrack-max-per-core=0 \
    --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256
  cat > "$NODE/Corefile" <<EOF
.:53 {
    bind $GATEWAY
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $STATE/kubeconfig ragengine-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
}
EOF
  start coredns "$BIN/coredns" -conf "$NODE/Corefile"
  start local-pv "$ROOT/.venv/bin/python" "$ROOT/hack/node/local_pv.py" --kubeconfig "$STATE/kubeconfig" \
    --node "$NODE_NAME" --dir "$NODE/volumes"
  wait_for 180 "node $NODE_NAME Ready" kctl wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
  # The firewall looks its node up at start: after the kubelet registered it.
  start kube-router "$BIN/kube-router" --kubeconfig="$STATE/kubeconfig" --hostname-override="$NODE_NAME" \
    --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
    --service-cluster-ip-range="$SERVICE_CIDR" --metrics-port=0 --health-port=0
  sleep 1
  for c in "${COMPONENTS[@]}"; do started "$c" || die "$c exited; see $LOGS/$c.log"; done
  log "real node $NODE_NAME Ready in $(( $(date +%s) - t0 )) s"
}

# Stop every node process (kubelet first, so it does not recreate what is being removed).
down_processes() {
  local c
  for c in local-pv kube-router coredns kube-proxy kubelet; do stop "$c"; done
  if up_ containerd; then
    # Pods go through CRI, so CNI tears their network down (veths, IP reservations, NAT rules).
    crictl_ rmp --all --force > /dev/null 2>&1 || true
    stop containerd
  fi
  pkill -f -- "containerd-shim-runc-v2 .*-address $SOCK" 2>/dev/null || true
}

iptables_clean() {  # KUBE-* chains (kube-proxy, kube-router) and their jumps, in every table, v4 and v6
  local ipt table chain
  for ipt in iptables ip6tables; do
    for table in filter nat mangle raw; do
      { "$ipt" -t "$table" -S 2>/dev/null | grep -E -- '-j KUBE-' | grep -vE '^-A KUBE-' || true; } \
        | sed 's/^-A /-D /' | while read -r rule; do
          eval "$ipt -t $table $rule" 2>/dev/null || true
        done
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}'); do
        "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}'); do
        "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
  for set in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)' || true); do ipset destroy "$set" 2>/dev/null || true; done
}

down() {
  local owner=""; [[ -f $LOCK ]] && owner=$(cat "$LOCK")
  down_processes
  if [[ -z $owner || $owner == "$STATE" ]]; then  # global state is ours to remove only if we made it
    iptables_clean
    ip link del "$BRIDGE" 2>/dev/null || true
    rm -f "$LOCK"
  fi
  # Mounts the kubelet and containerd made under the node's directory (volumes, rootfs, netns), deepest first.
  { awk -v d="$NODE/" 'index($2, d) == 1 {print $2}' /proc/mounts || true; } | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$NODE/kubelet" "$NODE/containerd/state" "$NODE/cni/ipam" "$NODE/volumes"
  log "down (containerd's images kept in $NODE/containerd/root)"
}

status() {
  local c
  for c in "${COMPONENTS[@]}"; do
    up_ "$c" && echo "$c: running (pid $(cat "$RUN/$c.pid"))" || echo "$c: stopped"
  done
  if up_ kubelet; then kctl get node "$NODE_NAME" --no-headers 2>/dev/null | awk '{print "node " $1 ": " $2}'; fi
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  load-images) load_images ;;
  check) why=$(why_not); [[ -z $why ]] || { echo "$why"; exit 1; } ;;
  *) echo "usage: $0 up|down|status|load-images|check" >&2; exit 2 ;;
esac
