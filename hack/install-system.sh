#!/usr/bin/env bash
# Debian packages the tests use as real servers or tools, installed only when missing: git (git http-backend
# serves the git sources' test repositories), openssh-server (sshd for git over SSH) and strace
# (tests/engine/test_fsync.py watches the engine's fsync calls); podman, runc and
# debootstrap for the images (make images); containerd, the CNI plugins, iptables, ipset and conntrack for
# the local cluster's real node (hack/node.sh); Tesseract with its English data, the OCR of scanned pages
# and images (issue 29; docs/documents.md); Chromium, the real browser the console's tests drive through
# Playwright's Python package (tests/console; never `playwright install`, which downloads a browser build), and
# fonts-dejavu-core so its pages render text (screenshots in docs/console.md).
set -euo pipefail
missing=()
command -v git >/dev/null || missing+=(git)
[ -x /usr/lib/git-core/git-http-backend ] || [ -x /usr/libexec/git-core/git-http-backend ] || missing+=(git)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
command -v strace >/dev/null || missing+=(strace)
command -v tesseract >/dev/null || missing+=(tesseract-ocr)
ls /usr/share/tesseract-ocr/*/tessdata/eng.traineddata >/dev/null 2>&1 || missing+=(tesseract-ocr-eng)
command -v chromium >/dev/null || missing+=(chromium)
[ -d /usr/share/fonts/truetype/dejavu ] || missing+=(fonts-dejavu-core)
for cmd in podman runc debootstrap containerd iptables ipset conntrack gcc; do
  command -v $cmd >/dev/null || missing+=($cmd)
done
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v ip >/dev/null || missing+=(iproute2)
# podman's defaults ask for more file and process limits than this VM's shell has, and crun refuses its
# hybrid cgroups: runc and capped ulimits, for every podman command on the machine.
conf=/etc/containers/containers.conf.d/50-ragengine.conf
write_conf() {
  $sudo mkdir -p "$(dirname $conf)"
  printf '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n[engine]\nruntime = "runc"\n' \
    | $sudo tee $conf >/dev/null
}
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
[ -f $conf ] || write_conf
[ ${#missing[@]} -eq 0 ] && exit 0
echo "==> installing Debian packages: ${missing[*]}"
$sudo apt-get update -q >/dev/null || true  # a stale package list: the install below says what failed
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
