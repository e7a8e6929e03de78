#!/usr/bin/env bash
# Idempotent set-up for fabriclab (run by `make setup`, `make experiment`, `make test`).
#  1. apt packages that are missing (one apt-get update, only if something is missing)
#  2. Open vSwitch started if it does not answer (detached: none of the caller's descriptors above 2,
#     a session of its own; scripts/detached.sh)
#  3. the BPF ECN marker (controller/bpf/*.bpf.c -> build/*.bpf.o), rebuilt when its source changes
#  4. .venv from /usr/bin/python3 --system-site-packages (Debian's mininet lives there),
#     with the pinned pip packages of pyproject.toml; redone only when pyproject.toml changes
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/detached.sh

# chromium: tests/unit/test_studyreport.py renders a study's report.html headless (about 113 MB to
# download; 9 s to install on the CI machine kind)
APT_PKGS=(mininet openvswitch-switch iperf3 ethtool tcpdump iputils-ping iproute2 procps kmod
          util-linux python3-venv python3-pip python3-dev clang libbpf-dev libbpf1 chromium)

if [ "$(id -u)" != 0 ]; then
  echo "fabriclab: set-up needs root (apt, Open vSwitch): run it with sudo" >&2
  exit 2
fi

missing=()
for p in "${APT_PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fabriclab: installing apt packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if ! ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
  echo "fabriclab: starting Open vSwitch"
  if [ -d /run/systemd/system ] && detached systemctl start openvswitch-switch 2>/dev/null; then
    :
  else
    detached /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 || true
  fi
  for _ in $(seq 1 50); do ovs-vsctl --timeout=3 show >/dev/null 2>&1 && break; sleep 0.2; done
  if ! ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
    echo "fabriclab: Open vSwitch did not start (try: /usr/share/openvswitch/scripts/ovs-ctl start)" >&2
    exit 1
  fi
fi

bash scripts/build-bpf.sh

stamp=.venv/.fabriclab-installed
if [ ! -x .venv/bin/python ]; then
  echo "fabriclab: creating .venv"
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  echo "fabriclab: installing pinned Python packages"
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
  touch "$stamp"
fi
# the `fabriclab` command on root's PATH (sudo's secure_path has /usr/local/bin): a link to this
# checkout's .venv, made only where nothing else is (sudo make distclean removes it)
link=/usr/local/bin/fabriclab
if [ -L "$link" ] && [ ! -e "$link" ] && [[ "$(readlink "$link")" == */.venv/bin/fabriclab ]]; then
  rm "$link"                       # a removed checkout's link: this one's instead
fi
if [ ! -e "$link" ] && [ ! -L "$link" ]; then
  ln -s "$PWD/.venv/bin/fabriclab" "$link"
elif [ -L "$link" ] && [ "$(readlink "$link")" != "$PWD/.venv/bin/fabriclab" ]; then
  echo "fabriclab: note: $link points to $(readlink "$link"), another checkout; this one's command is $PWD/.venv/bin/fabriclab" >&2
fi
.venv/bin/python -c "import mininet.net, os_ken, pyroute2, scapy, yaml, networkx, matplotlib, scipy, pydantic" \
  || { echo "fabriclab: the Python environment is incomplete; remove .venv and rerun sudo make setup" >&2; exit 1; }
