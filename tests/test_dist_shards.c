/*
tests/test_dist_shards.c: the shard layout of common/dist.h, without MPI: for every n from 1 to
300 parameters and N from 1 to 13 ranks, dist_attach on a Dist made by hand for each rank r must
give S = ceil(n / N) places per shard, a buffer length N*S (at most N - 1 of padding), the shard
[r*S, min((r+1)*S, n)), shards that cover the parameters end to end, and the per-rank counts and
starts MPI's v-collectives use; or, where the last rank would own no parameter
(n <= (N-1)*S), one error line. `make test-dist` runs it.
*/
#include "harness.h"
#include "../common/dist.h"

typedef struct {
    size_t n;
    int rank, size;
} Attach;

static void attach_one(void* arg) {
    const Attach* a = (const Attach*)arg;
    Dist d;
    memset(&d, 0, sizeof(d));
    d.rank = a->rank;
    d.size = a->size;
    dist_attach(&d, a->n);
    dist_free(&d);
}

int main(void) {
    int layouts = 0, refused = 0;
    for (int N = 1; N <= 13; N++) {
        for (size_t n = 1; n <= 300; n++) {
            size_t S = (n + N - 1) / N;
            if (N > 1 && n <= S * (N - 1)) {
                // a refusal is checked in a child (fatal exits), for a few of them: forks are slow
                if (refused++ % 25 == 0) {
                    Attach a = {n, N - 1, N};
                    char what[64];
                    snprintf(what, sizeof(what), "%zu parameters, %d ranks", n, N);
                    expect_fatal(what, attach_one, &a, "leave ranks without parameters", NULL);
                }
                continue;
            }
            layouts++;
            size_t next = 0;  // where the next rank's shard must start
            for (int r = 0; r < N; r++) {
                Dist d;
                memset(&d, 0, sizeof(d));
                d.rank = r;
                d.size = N;
                dist_attach(&d, n);
                size_t hi = (size_t)(r + 1) * S < n ? (size_t)(r + 1) * S : n;
                CHECK(d.shard == S && d.padded == S * N && d.padded - n < (size_t)N,
                      "n %zu, N %d: shard %zu, padded %zu (want %zu, %zu)", n, N, d.shard, d.padded, S, S * N);
                CHECK(d.lo == r * S && d.hi == hi && d.lo == next && d.hi > d.lo,
                      "n %zu, N %d, rank %d: [%zu, %zu), want [%zu, %zu) after %zu", n, N, r, d.lo, d.hi, r * S, hi, next);
                if (N > 1) {
                    for (int q = 0; q < N; q++) {
                        size_t lo_q = q * S, hi_q = (size_t)(q + 1) * S < n ? (size_t)(q + 1) * S : n;
                        CHECK(d.displs[q] == (int)lo_q && d.counts[q] == (int)(hi_q - lo_q),
                              "n %zu, N %d, rank %d: MPI count and start of rank %d: %d at %d", n, N, r, q, d.counts[q],
                              d.displs[q]);
                    }
                }
                next = d.hi;
                dist_free(&d);
            }
            CHECK(next == n, "n %zu, N %d: the shards end at %zu", n, N, next);
        }
    }
    printf("%d layouts checked, %d refused\n", layouts, refused);
    return harness_finish("test_dist_shards");
}
