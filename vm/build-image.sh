#!/usr/bin/env bash
# Build the stock-kernel VM image for fabriclab's VM lane (`make vm-image`).
#
# A debootstrapped Debian bookworm with the stock cloud kernel, Open vSwitch,
# Mininet and fabriclab's pinned Python packages (in /opt/fabriclab/venv),
# installed from the host through chroot, so the guest needs no network.
# Cached outside the checkout in $FABRICLAB_VM_CACHE (default
# /var/cache/fabriclab/vm/<recipe hash>/): rootfs.img, vmlinuz, initrd.img.
# The recipe hash covers this script, vm/guest-init.sh, pyproject.toml and constraints.txt;
# an unchanged recipe is not rebuilt. Prints the image directory last.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "fabriclab: building the VM image needs root (debootstrap, chroot): run it with sudo" >&2
  exit 2
fi

CACHE=${FABRICLAB_VM_CACHE:-/var/cache/fabriclab/vm}
SUITE=bookworm
IMG_SIZE=${FABRICLAB_VM_IMG_SIZE:-3G}
GUEST_PKGS=make,git,systemd-sysv,iproute2,openvswitch-switch,mininet,python3,python3-venv,python3-pip,iperf3,ethtool,iputils-ping,kmod,udev,procps,util-linux,tcpdump,e2fsprogs

recipe=$(cat vm/build-image.sh vm/guest-init.sh pyproject.toml constraints.txt | sha256sum | cut -c1-16)
out="$CACHE/$recipe"
if [ -f "$out/rootfs.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
  echo "fabriclab: VM image up to date ($out)" >&2
  echo "$out"
  exit 0
fi

host_pkgs=(debootstrap qemu-system-x86 e2fsprogs python3-pip python3-dev gcc)
missing=()
for p in "${host_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fabriclab: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# The Debian mirror this host already uses (deb822 or one-line format).
mirror=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
         | grep -v security | head -1 || true)
[ -n "$mirror" ] || mirror=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' \
         | grep -v security | head -1 || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/build.XXXXXX")
root="$work/root"
cleanup() {
  for m in proc sys dev/pts dev; do umount -l "$root/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

echo "fabriclab: debootstrap $SUITE from $mirror (about a minute)" >&2
debootstrap --variant=minbase --include="$GUEST_PKGS" "$SUITE" "$root" "$mirror" >&2

# The chroot gets its own /dev (a tmpfs with the few nodes apt needs and a
# private devpts instance), never the host's: nothing run inside can touch
# the host's terminals or devices.
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount -t tmpfs -o mode=0755 devtmp "$root/dev"
mknod -m 0666 "$root/dev/null" c 1 3
mknod -m 0666 "$root/dev/zero" c 1 5
mknod -m 0666 "$root/dev/full" c 1 7
mknod -m 0666 "$root/dev/random" c 1 8
mknod -m 0666 "$root/dev/urandom" c 1 9
mknod -m 0666 "$root/dev/tty" c 5 0
mkdir -p "$root/dev/pts"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# services must not start inside the chroot
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"

echo "fabriclab: installing the stock cloud kernel" >&2
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  linux-image-cloud-amd64 initramfs-tools >&2

echo "fabriclab: installing pinned Python packages into /opt/fabriclab/venv" >&2
deps=$(python3 - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    p = tomllib.load(f)["project"]
print(" ".join(p["dependencies"] + p["optional-dependencies"]["test"]))
PY
)
# Wheels are built on the host (same Debian release, Python and architecture as
# the guest) with the host's own pip configuration, then installed offline.
mkdir -p "$root/opt/fabriclab/wheels"
# shellcheck disable=SC2086
/usr/bin/python3 -m pip wheel -q --disable-pip-version-check -w "$root/opt/fabriclab/wheels" -c constraints.txt $deps >&2
chroot "$root" /usr/bin/python3 -m venv --system-site-packages /opt/fabriclab/venv
# shellcheck disable=SC2086
chroot "$root" /opt/fabriclab/venv/bin/pip install -q --disable-pip-version-check --no-index \
  --find-links /opt/fabriclab/wheels $deps >&2
rm -rf "$root/opt/fabriclab/wheels"
chroot "$root" /opt/fabriclab/venv/bin/python -c "import mininet.net, os_ken, pyroute2, scapy, yaml, networkx, matplotlib, scipy, pydantic"

install -m 0755 vm/guest-init.sh "$root/usr/local/sbin/fabriclab-vm-init"
echo fabriclab-vm > "$root/etc/hostname"
rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf"
chroot "$root" apt-get clean

for m in dev/pts dev sys proc; do umount "$root/$m"; done

kernel=$(ls "$root"/boot/vmlinuz-* | sort | tail -1)
initrd=$(ls "$root"/boot/initrd.img-* | sort | tail -1)
mkdir -p "$work/out"
cp "$kernel" "$work/out/vmlinuz"
cp "$initrd" "$work/out/initrd.img"
basename "$kernel" | sed 's/^vmlinuz-//' > "$work/out/kernel-version"
echo "fabriclab: writing the ${IMG_SIZE} ext4 image" >&2
mkfs.ext4 -q -L fabriclab-root -d "$root" -F "$work/out/rootfs.img" "$IMG_SIZE"
rm -rf "$out"
mv "$work/out" "$out"
# images of older recipes are of no further use
for old in "$CACHE"/*/; do
  case "$old" in "$out/"|"$CACHE"/build.*) ;; *) [ -f "$old/rootfs.img" ] && rm -rf "$old" ;; esac
done
echo "fabriclab: VM image ready ($out)" >&2
echo "$out"
