# The GPU check's bundle (tests/gpu/bundle.sh), checked here (sourced by run.sh with KV, the CPU
# build, TMP and PYTHON): it is small enough to carry to a device, and it runs in a root that holds
# glibc, the toolkit's cuBLAS and the bundle alone, so that no other library on this machine can be
# what it loads. There, its CPU backend gives this build's greedy ids, its unit tests pass, and
# --device cuda (no driver in that root) ends with one clear line.

B=$TMP/bundle
R=$TMP/root
cuda=${CUDA_HOME:-/usr/local/cuda}/lib64
# hidden CMD...: CMD in the root, whose only libraries are glibc, cuBLAS and the bundle's (HB:
# another bundle), in a mount namespace of its own, so that the bind mounts vanish with it
hidden() {
    unshare -m sh -c "mount --bind '${HB:-$B}' '$R/bundle' && mount --bind /dev '$R/dev' &&
        mount --bind /proc '$R/proc' &&
        mount --bind '$cuda/libcublas.so.13' '$R/usr/local/cuda/lib64/libcublas.so.13' &&
        mount --bind '$cuda/libcublasLt.so.13' '$R/usr/local/cuda/lib64/libcublasLt.so.13' &&
        exec env -i HOME=/tmp KVCHAT_ASSETS=/bundle/assets KVCHAT_SELFTEST=0 \
            $(command -v chroot) '$R' \"\$@\"" hidden "$@"
}
if [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    skip "gpu-bundle/built and run with every other library hidden" "no CUDA toolkit (nvcc) here"
elif ! tests/gpu/bundle.sh "$B" >"$TMP/bundle.log" 2>&1; then
    fail "gpu-bundle/tests/gpu/bundle.sh builds it" "$(tail -3 "$TMP/bundle.log" | tr '\n' ' ')"
else
    made=$(tail -1 "$TMP/bundle.log" | sed 's/^[^,]*, //')
    pass "gpu-bundle/tests/gpu/bundle.sh builds it ($made)"
    # what one device call carries: the bundle compressed and the repository's tracked files (the
    # shipped models among them), 64 MiB in all; kept under 60
    tracked=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
    carried=$(($(stat -c %s "$B.tar.xz") + tracked))
    check "gpu-bundle/it travels with the repository in $((carried >> 20)) MiB (under 60)" \
        test $carried -lt $((60 << 20))
    # the check unpacks it there: past the archive, it stops only for want of a GPU here
    expect_error "gpu-bundle/the check takes the archive, unpacked" 2 "no NVIDIA GPU here" \
        tests/gpu/check.sh "$B.tar.xz"
    head -c 100000 "$B.tar.xz" >"$TMP/cut.tar.xz"
    expect_error "gpu-bundle/a cut archive is refused, named" 2 "cut.tar.xz: not a bundle archive" \
        tests/gpu/check.sh "$TMP/cut.tar.xz"
    # the CUDA libraries are loaded with the backend, at the first use of a GPU (issue 63: the
    # binary held 225 MiB of cuBLAS from its first instruction, and under ulimit -v 700 MB did not
    # start): the binary needs none of them, and --version runs in 200 MB
    same "gpu-bundle/kvchat links no CUDA library (its backend does)" "0 1" \
        "$(ldd "$B/kvchat" | grep -cE 'libcudart|libcublas') \
$(ldd "$B/libkvchat-cuda.so" | grep -c 'libcublas\.')"
    check "gpu-bundle/kvchat --version runs under ulimit -v 200 MB" \
        bash -c 'ulimit -v 204800 && exec "$1" --version' _ "$B/kvchat"
    if ! unshare -m true 2>/dev/null || ! command -v chroot >/dev/null; then
        skip "gpu-bundle/run with every other library hidden" "no mount namespace or chroot here"
    else
        mkdir -p "$R/lib64" "$R/lib/x86_64-linux-gnu" "$R/usr/local/cuda/lib64" "$R/bundle" \
            "$R/dev" "$R/proc" "$R/tmp"
        cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
        glibc=/lib/x86_64-linux-gnu # what the bundle takes from the machine
        for l in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2; do
            [ -e $glibc/$l ] && cp -L $glibc/$l "$R$glibc/"
        done
        for l in libcublas.so.13 libcublasLt.so.13; do : >"$R/usr/local/cuda/lib64/$l"; done
        check "gpu-bundle/kvchat starts with every other library hidden" \
            hidden /bundle/kvchat --version
        # and the root does hide them: a bundle short of one library does not start there
        cp -r "$B" "$TMP/bundle-short" && rm "$TMP/bundle-short/libjansson.so.4"
        HB=$TMP/bundle-short hidden /bundle/kvchat --version >"$TMP/out" 2>&1
        rc=$?
        same "gpu-bundle/a bundle without libjansson does not start there" "127 1" \
            "$rc $(grep -c libjansson "$TMP/out")"
        ids="--prompt-ids 464,3290,373 -n 8 --temp 0 -q --output ids"
        "$KV" make-tiny-model "$TMP/bundle-m" --layers 2 --heads 2 --embd 32 --seed 4 >/dev/null
        want=$("$KV" generate -m "$TMP/bundle-m" --device cpu $ids)
        got=$(hidden /bundle/kvchat make-tiny-model /tmp/m --layers 2 --heads 2 --embd 32 --seed 4 \
            >/dev/null && hidden /bundle/kvchat generate -m /tmp/m --device cpu $ids 2>&1)
        same "gpu-bundle/there its CPU backend gives this build's greedy ids" "$want" "$got"
        hidden /bundle/unit_tests kernels/ >"$TMP/out" 2>&1
        check "gpu-bundle/there its unit tests pass (kernels/)" \
            grep -q '^unit: [1-9][0-9]* passed, 0 failed' "$TMP/out"
        hidden /bundle/kvchat generate -m /tmp/m --device cuda --prompt-ids 464 -n 1 -q \
            >"$TMP/out" 2>"$TMP/err"
        rc=$?
        same "gpu-bundle/there --device cuda, with no driver, fails in one line saying so" "1 1 1" \
            "$([ $rc != 0 ] && echo 1) $(wc -l <"$TMP/err") $(grep -c 'NVIDIA driver' "$TMP/err")"
    fi
fi
