#!/usr/bin/env bash
# Compile fabriclab's BPF programs (controller/bpf/*.bpf.c) to build/*.bpf.o with clang,
# when an object is missing or older than its source. Needs clang and libbpf-dev (apt).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
arch_inc="/usr/include/$(uname -m)-linux-gnu"
case "$(uname -m)" in
  x86_64) arch_def=-DFL_ARCH_X86 ;;
  aarch64) arch_def=-DFL_ARCH_ARM64 ;;
  *) arch_def= ;;   # programs that read system-call registers refuse to build (their #error)
esac
for src in controller/bpf/*.bpf.c; do
  obj="build/$(basename "${src%.c}").o"
  if [ -z "$arch_def" ] && grep -q FL_ARCH "$src"; then
    echo "fabriclab: $src reads system-call registers, which it knows on x86_64 and aarch64 only; not built"
    continue
  fi
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
    echo "fabriclab: compiling $src"
    clang -O2 -g -Wall -target bpf $arch_def -I"$arch_inc" -c "$src" -o "$obj.tmp"
    mv "$obj.tmp" "$obj"
  fi
done
