#!/usr/bin/env bash
# A root folder with an older glibc for tests/e2e/test_manylinux_e2e.py::test_wheel_runs_under_an_older_glibc:
# Debian bullseye (glibc 2.31, gcc 10's libstdc++), a CPython 3.11 built there (bullseye has 3.9 only;
# the source is Debian bookworm's python3.11 package) in /opt/py311, and torch 2.13.0's
# manylinux_2_28 wheel in /opt/site. Needs root (debootstrap, chroot) and Debian's archive; ~15 min
# on 2 cores, ~1.5 GB. Then: AOT_BUILD_OLD_GLIBC_ROOT=DIR .venv/bin/python -m pytest tests/e2e/test_manylinux_e2e.py
set -euo pipefail
root=${1:?usage: scripts/old-glibc-root.sh DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
[ -x "$root/usr/bin/gcc" ] || debootstrap --variant=minbase \
  --include=build-essential,zlib1g-dev,libffi-dev,libssl-dev,libbz2-dev,liblzma-dev,xz-utils,ca-certificates,dpkg-dev \
  bullseye "$root" http://deb.debian.org/debian
if [ ! -x "$root/opt/py311/bin/python3.11" ]; then
  echo "deb-src http://deb.debian.org/debian bookworm main" > "$root/etc/apt/sources.list.d/src.list"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  chroot "$root" sh -c 'apt-get update -qq && mkdir -p /src && cd /src && apt-get source --download-only -qq python3.11'
  chroot "$root" sh -c 'cd /src && tar xf python3.11_*.orig.tar.* && cd Python-3.11* &&
    ./configure --prefix=/opt/py311 --enable-shared LDFLAGS=-Wl,-rpath,/opt/py311/lib >/src/configure.log &&
    make -j"$(nproc)" >/src/make.log 2>&1 && make install >/src/install.log 2>&1'
fi
# torch's wheel as pip finds it here (the local file first), for CPython 3.11 on manylinux_2_28
"$repo/.venv/bin/python" -m pip install -q --target "$root/opt/site" --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --only-binary=:all: torch==2.13.0
chroot "$root" env PYTHONPATH=/opt/site /opt/py311/bin/python3.11 -c \
  "import platform, torch; print('glibc', platform.libc_ver()[1], 'torch', torch.__version__)"
