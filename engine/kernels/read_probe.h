/* The memory-read probe's own loop (engine/bench/bandwidth.py), in every dense build (bf16_kernels.c, its AVX2 twin):
 *
 *   speclab_read(p, nwords, streams, threads, &sum)   sum of the nwords 64-bit words at p, each thread reading its
 *                                                     contiguous share as `streams` equal runs side by side
 *
 * Why: a one-stream read (torch's x.sum()) is not the fastest way every CPU reads memory. On a 2-core Xeon with AMX
 * the dense kernel's tiles, which read 16 weight rows at once, streamed 29 GB/s where x.sum() read 23.7 (and torch's
 * sums over 4–64 rows 10–19.7), so the roofline it gave was passed (fractions 1.03–1.14). Reading several runs side
 * by side keeps more cache-line requests in flight, as those kernels do. The sum is returned so the reads cannot be
 * optimised away; it is also what the unit test checks (every word read once).
 * Each step reads one 64-byte line of each run (eight words, one vector add); nwords must be a multiple of
 * 8 · streams · threads. */
#ifndef SPECLAB_READ_PROBE_H
#define SPECLAB_READ_PROBE_H
#include <stdint.h>

int speclab_read(const uint64_t *p, long long nwords, int streams, int threads, uint64_t *out) {
    if (streams < 1 || streams > 64 || threads < 1 || nwords < 1 || nwords % (8LL * streams * threads)) return 1;
    uint64_t total = 0;
    const long long share = nwords / threads, run = share / streams;
    /* shares handed out by a loop, not by thread number: were fewer threads granted, every word is still read
     * (a share left unread would make the read look faster than the memory is) */
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
    for (int t = 0; t < threads; t++) {
        const uint64_t *q = p + (long long)t * share;
        uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (long long i = 0; i < run; i += 8)
            for (int s = 0; s < streams; s++) {
                const uint64_t *line = q + s * run + i;
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) acc[j] += line[j];
            }
        for (int j = 0; j < 8; j++) total += acc[j];
    }
    *out = total;
    return 0;
}
#endif
