#!/usr/bin/env bash
# Compile fabriclab's BPF programs (controller/bpf/*.bpf.c) to build/*.bpf.o with clang,
# when an object is missing or older than its source. Needs clang and libbpf-dev (apt).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
arch_inc="/usr/include/$(uname -m)-linux-gnu"
for src in controller/bpf/*.bpf.c; do
  obj="build/$(basename "${src%.c}").o"
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
    echo "fabriclab: compiling $src"
    clang -O2 -g -Wall -target bpf -I"$arch_inc" -c "$src" -o "$obj.tmp"
    mv "$obj.tmp" "$obj"
  fi
done
