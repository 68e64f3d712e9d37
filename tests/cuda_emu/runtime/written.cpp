/* Which bytes of device and shared memory have ever been written, for the report of reads of bytes
 * never written (CUDA_EMU_UNINIT=report, strict). Only where the device code was built with
 * --emu-trace-memory: there every load and store of a kernel calls the emulator (trace.cpp), and a
 * store marks its bytes; copies into device memory and sets mark theirs (a copy from device memory
 * carries the source's marks, so never-written bytes stay never written), and cuBLAS marks what it
 * writes. A kernel's or cuBLAS's read of an unmarked byte is the report. One bit a byte, kept per
 * allocation; everything runs under the device's lock (kernels too), so nothing here locks. */
#include <map>
#include <string.h>

#include "emu.h"

namespace cuemu
{
namespace
{

struct region {
    size_t bytes;
    const char *what;
    std::vector<unsigned char> bits; /* bit i % 8 of byte i / 8: byte i was written */
};

std::map<uintptr_t, region> &regions = *new std::map<uintptr_t, region>;
bool traced; /* device code built with --emu-trace-memory is in the program */

/* the last two regions found, tried first (a kernel's loop reads one buffer and writes another) */
uintptr_t hit_base[2];
region *hit[2];

/* the region holding p, with its base */
region *lookup(const void *p, uintptr_t *base)
{
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < 2; i++)
        if (hit[i] && a >= hit_base[i] && a < hit_base[i] + hit[i]->bytes) {
            *base = hit_base[i];
            return hit[i];
        }
    auto it = regions.upper_bound(a);
    if (it == regions.begin())
        return nullptr;
    --it;
    if (a >= it->first + it->second.bytes)
        return nullptr;
    hit[1] = hit[0], hit_base[1] = hit_base[0];
    hit[0] = &it->second, hit_base[0] = it->first;
    *base = it->first;
    return &it->second;
}

void forget_hits(void) { hit[0] = hit[1] = nullptr; }

bool bit(const region &r, size_t i) { return r.bits[i >> 3] >> (i & 7) & 1; }
void set_bit(region &r, size_t i, bool v)
{
    unsigned char m = (unsigned char)(1u << (i & 7));
    r.bits[i >> 3] = v ? r.bits[i >> 3] | m : r.bits[i >> 3] & ~m;
}

/* calls fn(region, offset in it, length, offset in [p, p + n)) for each run of [p, p + n) inside
 * one tracked region */
template <typename F>
void each_part(const void *p, size_t n, F fn)
{
    const char *c = (const char *)p, *end = c + n;
    while (c < end) {
        uintptr_t base;
        region *r = lookup(c, &base);
        if (!r) { /* untracked: skip to the next region's start, if it is within the range */
            auto it = regions.upper_bound((uintptr_t)c);
            if (it == regions.end() || it->first >= (uintptr_t)end)
                return;
            c = (const char *)it->first;
            continue;
        }
        size_t off = (size_t)(c - (const char *)base);
        size_t len = r->bytes - off < (size_t)(end - c) ? r->bytes - off : (size_t)(end - c);
        fn(*r, off, len, (size_t)(c - (const char *)p));
        c += len;
    }
}

bool tracked(const void *p, size_t n)
{
    bool any = false;
    each_part(p, n, [&](region &, size_t, size_t, size_t) { any = true; });
    return any;
}

} /* namespace */

void trace_memory_on(void) { traced = true; }

bool written_on(void)
{
    static const bool on =
        traced && !strcmp(emu_mode("CUDA_EMU_UNINIT", "report", "off"), "report");
    return on;
}

void written_track(const void *p, size_t bytes, const char *what)
{
    if (!written_on() || !bytes)
        return;
    region &r = regions[(uintptr_t)p];
    r.bytes = bytes;
    r.what = what;
    r.bits.assign((bytes + 7) / 8, 0);
    forget_hits(); /* the map's nodes are stable, but a hit may name a region just replaced */
}

void written_untrack(const void *p)
{
    if (!written_on())
        return;
    regions.erase((uintptr_t)p);
    forget_hits();
}

void written_mark(const void *p, size_t n)
{
    if (!written_on())
        return;
    each_part(p, n, [](region &r, size_t off, size_t len, size_t) {
        for (size_t i = off; i < off + len; i++)
            if ((i & 7) == 0 && i + 8 <= off + len) {
                r.bits[i >> 3] = 0xff;
                i += 7;
            } else {
                set_bit(r, i, true);
            }
    });
}

void written_copy(void *dst, const void *src, size_t n)
{
    if (!written_on())
        return;
    if (!tracked(dst, n))
        return;
    if (!tracked(src, n)) { /* from the host */
        written_mark(dst, n);
        return;
    }
    std::vector<unsigned char> from(n, 1); /* the host's bytes count as written */
    each_part(src, n, [&](region &r, size_t off, size_t len, size_t at) {
        for (size_t i = 0; i < len; i++)
            from[at + i] = bit(r, off + i);
    });
    each_part(dst, n, [&](region &r, size_t off, size_t len, size_t at) {
        for (size_t i = 0; i < len; i++)
            set_bit(r, off + i, from[at + i]);
    });
}

bool written_check(const void *p, size_t n, char *why, size_t size)
{
    if (!written_on())
        return true;
    bool ok = true;
    each_part(p, n, [&](region &r, size_t off, size_t len, size_t) {
        for (size_t i = off; ok && i < off + len; i++)
            if (!bit(r, i)) {
                snprintf(why, size, "byte %zu of %s of %zu bytes was never written", i, r.what,
                         r.bytes);
                ok = false;
            }
    });
    return ok;
}

} /* namespace cuemu */
