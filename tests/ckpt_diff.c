/*
tests/ckpt_diff.c: how far apart the weights of two model checkpoints of the same shape are.
    ckpt_diff A.bin B.bin
prints "max_abs_diff D max_abs_weight W rel R" with R = D / W, the largest weight difference
relative to the largest weight (tests/test_dist.sh: a 2-rank run against one process).
*/
#include <math.h>
#include "common/utils.h"
#include "common/params.h"

static float* read_weights(const char* path, GPT2Config* cfg) {
    CheckpointFile ck;
    checkpoint_open(&ck, path);
    *cfg = ck.config;
    float* w = (float*)malloc_check(count_parameters(cfg) * sizeof(float), "weights");
    checkpoint_read_params(&ck, w);
    return w;
}

int main(int argc, char** argv) {
    if (argc != 3) { fprintf(stderr, "usage: ckpt_diff A.bin B.bin\n"); return 2; }
    GPT2Config ca, cb;
    float* a = read_weights(argv[1], &ca);
    float* b = read_weights(argv[2], &cb);
    size_t n = count_parameters(&ca);
    if (n != count_parameters(&cb)) { fatal("%s and %s hold models of different sizes", argv[1], argv[2]); }
    double diff = 0.0, big = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)a[i]));
    }
    printf("max_abs_diff %.3e max_abs_weight %.3e rel %.3e\n", diff, big, big > 0 ? diff / big : diff);
    free(a);
    free(b);
    return 0;
}
