#!/usr/bin/env bash
# For a GPU machine that cannot reach a package mirror: downloads (here) the Debian packages the build
# needs and unpacks them into .deps/root, which tests/gpu/check.sh then builds against
# (make SYSROOT=.deps/root). .deps/ is ignored by git; carry it to the GPU machine.
set -eu
cd "$(dirname "$0")/../.."
mkdir -p .deps/debs .deps/root
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >>.git/info/exclude
cd .deps/debs
apt-get download libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libjansson-dev libjansson4 \
    libpcre2-dev libpcre2-8-0 libncurses-dev libncursesw6 libtinfo6 libreadline-dev libreadline8 libgfortran5 \
    libzip-dev libzip4 libcurl4-openssl-dev libcurl4 libssl-dev libssl3 \
    >/dev/null
for f in *.deb; do dpkg -x "$f" ../root; done
cd ..
rm -rf debs root/usr/share
find root -name '*.a' -delete   # shared libraries only: what travels is limited to 64 MiB
du -sh root
