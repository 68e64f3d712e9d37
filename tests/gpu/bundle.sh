#!/usr/bin/env bash
# usage: tests/gpu/bundle.sh DIR
# Builds kvchat and the unit tests here for Hopper (sm_90 machine code and compute_90 PTX, x86-64-v3
# host code) and writes them to DIR with every shared library they need that a bare CUDA machine
# lacks, found beside them through an rpath of $ORIGIN. What the bundle takes from the machine it
# runs on: glibc, the NVIDIA driver (libcuda) and the CUDA toolkit's cuBLAS and cuBLASLt (the
# toolkit is 13.x here and on the lent H200s). OpenBLAS is cut down from its static archive to the
# objects the binaries call (36 MB shared, about 25 MB so), to keep the bundle under what a device
# call carries. tests/gpu/check.sh DIR is then the whole GPU check; tests/gpu/test_bundle.sh runs
# the bundle here with every other library hidden. DIR.tar.xz beside it is the bundle as it
# travels (the device machine receives 64 MiB at most, the repository included); the check takes
# either.
set -euo pipefail
die() { echo "bundle: $*" >&2; exit 1; }
case ${1:-} in -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# = 1 ] && [ "${1:0:1}" != - ] || { echo "bundle: usage: tests/gpu/bundle.sh DIR" >&2; exit 2; }
out=$1
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA_HOME/bin/nvcc" ] || die "$CUDA_HOME/bin/nvcc not found (the CUDA toolkit)"
archive=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a
[ -f $archive ] || die "$archive not found (Debian's libopenblas-pthread-dev)"
# the libraries the machine provides: glibc's, the driver's, the toolkit's cuBLAS
glibc='ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libmvec.so.1 libpthread.so.0 libdl.so.2 librt.so.1
       libresolv.so.2 libutil.so.1 libanl.so.1 libnsl.so.1 libBrokenLocale.so.1'
provided() {
    case " $(echo $glibc) " in *" $1 "*) return 0 ;; esac
    case $1 in libcuda.so.* | libcublas.so.* | libcublasLt.so.*) return 0 ;; esac
    return 1
}

B=build/bundle
echo "bundle: building in $B (sm_90, x86-64-v3)" >&2
make -s -j"$(nproc)" BUILD=$B ARCH=x86-64-v3 CUDA=1 BUNDLE=1 CUDA_HOME="$CUDA_HOME" \
    CUDA_ARCH="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90" \
    $B/kvchat $B/libkvchat-cuda.so $B/unit_tests >&2
for f in kvchat libkvchat-cuda.so; do
    readelf -d $B/$f | grep -q 'RPATH.*\$ORIGIN' || die "$B/$f has no \$ORIGIN rpath"
done

rm -rf "$out.new"
mkdir -p "$out.new"
for bin in kvchat libkvchat-cuda.so unit_tests; do
    strip --strip-debug -o "$out.new/$bin" $B/$bin
done
# the symbols the binaries take from OpenBLAS, and a libopenblas.so.0 of only the objects they need
names() { nm -D "$@" | awk '{print $NF}' | sed 's/@.*//' | sort -u; }
syms=$(comm -12 <(names --undefined-only $B/kvchat $B/unit_tests) \
    <(names --defined-only "$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0)"))
[ -n "$syms" ] || die "no OpenBLAS symbols found in the binaries"
gcc -shared -o "$out.new/libopenblas.so.0" -Wl,-soname,libopenblas.so.0 -Wl,--no-undefined -Wl,-s \
    $(printf -- '-Wl,-u,%s ' $syms) $archive -lpthread -lm
# every other library the binaries load (ldd's list is the whole closure), unless the GPU machine
# provides it
bins="$out.new/kvchat $out.new/libkvchat-cuda.so $out.new/unit_tests"
ldd $bins | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        provided "$name" || [ -e "$out.new/$name" ] || cp -L "$path" "$out.new/$name"
    done
missing=$(ldd $bins | grep 'not found' | sort -u || true)
[ -z "$missing" ] || die "libraries not found: $missing"
cp -r assets "$out.new/assets"
git rev-parse --short HEAD >"$out.new/COMMIT" 2>/dev/null || echo unknown >"$out.new/COMMIT"
git diff --quiet HEAD 2>/dev/null || echo "(with uncommitted changes)" >>"$out.new/COMMIT"
rm -rf "$out"
mv "$out.new" "$out"
XZ_OPT=-T0 tar -C "$(dirname "$out")" -cJf "$out.tar.xz.new" "$(basename "$out")"
mv "$out.tar.xz.new" "$out.tar.xz"
mib() { du -sb "$1" | awk '{printf "%.1f MiB", $1 / 1048576}'; }
echo "bundle: $out, $(mib "$out") in $(ls "$out" | wc -l) files;" \
    "$out.tar.xz, $(mib "$out.tar.xz")" >&2
