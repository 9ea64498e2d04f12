#!/usr/bin/env bash
# An aarch64 userland run with qemu-user on this x86-64 host, for tests/e2e/test_aarch64_e2e.py:
# Debian bookworm's arm64 python3.11 (packages unpacked, no second stage), torch 2.13.0's
# aarch64 wheel from PyPI in DIR/opt/site, stand-ins for the CUDA libraries that wheel links
# against (tests/aarch64/cuda_stubs.py; nvidia-cudnn-cu13 has no aarch64 build on this index),
# and an arm64 /proc/cpuinfo and /sys/devices/system/cpu under DIR: qemu-user passes the host's
# x86 ones through, on which torch's CPU detection crashes. Needs root and Debian's archive and
# PyPI; ~5 min, ~1.5 GB. Then:
#   AOT_BUILD_AARCH64_ROOT=DIR .venv/bin/python -m pytest tests/e2e/test_aarch64_e2e.py
set -euo pipefail
root=${1:?usage: scripts/aarch64-qemu-root.sh DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
missing=()
for tool in debootstrap:debootstrap qemu-aarch64:qemu-user aarch64-linux-gnu-g++:g++-aarch64-linux-gnu; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -x "$root/usr/bin/python3.11" ]; then
  debootstrap --foreign --arch=arm64 --variant=minbase --include=python3.11 bookworm "$root" http://deb.debian.org/debian
  for deb in "$root"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$root"; done
fi
# libstdc++ of Debian's arm64 cross packages (the same gcc 12 build as bookworm's libstdc++6)
cp -a /usr/aarch64-linux-gnu/lib/libstdc++.so.6* "$root/usr/lib/aarch64-linux-gnu/"
mkdir -p "$root/proc" "$root/sys/devices/system/cpu/cpu0" "$root/sys/devices/system/cpu/cpu1"
: > "$root/proc/cpuinfo"
for c in 0 1; do
  printf 'processor\t: %s\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n' "$c" >> "$root/proc/cpuinfo"
done
for f in possible present online; do echo "0-1" > "$root/sys/devices/system/cpu/$f"; done
site="$root/opt/site"
if [ ! -f "$site/torch/lib/libtorch_cpu.so" ]; then
  pip=("$repo/.venv/bin/python" -m pip install -q --target "$site" --platform manylinux_2_28_aarch64
       --python-version 3.11 --only-binary=:all: --no-deps)
  "${pip[@]}" torch==2.13.0
  "${pip[@]}" filelock typing-extensions sympy mpmath networkx jinja2 MarkupSafe fsspec
fi
"$repo/.venv/bin/python" "$repo/tests/aarch64/cuda_stubs.py" "$site/torch/lib" "$root/opt/cuda-stubs" >/dev/null
qemu-aarch64 -L "$root" -E LD_LIBRARY_PATH="$root/opt/cuda-stubs" -E PYTHONPATH="$site" "$root/usr/bin/python3.11" \
  -c "import platform, torch; print(platform.machine(), 'torch', torch.__version__, float(torch.ones(2, 3).sum()))"
