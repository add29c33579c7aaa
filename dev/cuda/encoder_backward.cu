/*
encoder_backward: the token-embedding gradient of train_gpt2.cu (wte_backward). The embedding is
e[p] = wte[token[p]] + wpe[p % T]; its backward adds each row of dL/de (dx + dy: in siamese mode
the embedding starts both streams) into the row of wte of its token:

    dwte[tok][c] += sum over the positions p with token[p] = tok of (dx[p][c] + dy[p][c])

over the N = B*T positions of a batch. A token can fill much of a batch ("the", ",", or a batch of
padding), so the work per token is uneven. Both versions add in an order fixed by the tokens
alone (no atomics), so each is checked BIT FOR BIT against a CPU sum in its own order.

version 1: one block per distinct token walks all of the token's positions in increasing order
           (the host groups the positions by token): a token at half the positions makes one
           block do half the work, alone.
version 2: the trainer's wte_backward (its own code: trainer.h includes train_gpt2.cu): the
           trainer's work list cuts each token's positions into chunks of EMBED_CHUNK = 64; one
           block per chunk sums it, in increasing order, and adds it into the token's row when it
           is the token's only chunk, else writes it to a partial row; a second kernel adds each
           such token's partial rows in chunk order into its row. No block sums more than 64 rows.

Three batches, each with dwte starting from random values (the kernels add to it; the rows of
tokens not in the batch must stay as they are): one token at every second position (half the
batch) and random tokens elsewhere; every position a different token (when N <= V); uniformly
random tokens. `./encoder_backward ref` checks both CPU orders against a sum in double.

Per launch at the default sizes (8192 positions, C = 768): dx and dy read once (50 MB), the rows of
the distinct tokens read and written; at d12, B = 64, T = 1024: 403 MB for dx and dy, 0.12 ms at
H100 SXM's 3.35 TB/s (train_gpt2.cu, the embedding's comment). GB/s against dx, dy and the rows of
the distinct tokens read and written.

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I. dev/cuda/encoder_backward.cu -o encoder_backward -lcublasLt -lcublas
                              ./encoder_backward [version] [N=positions] [C=channels] [V=vocab]
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include <algorithm>
#include "trainer.h"

#define N_POS (8 * 1024)  // B * T (default; N= on the command line)
#define CH 768            // C (C=)
#define VOCAB 50257       // V (V=)

// ----------------------------------------------------------------------------
// CPU references: positions grouped by token, increasing (a stable sort of the positions by token)

static void group_positions(int* order, const int* tokens, int N) {
    for (int i = 0; i < N; i++) { order[i] = i; }
    std::stable_sort(order, order + N, [&](int a, int b) { return tokens[a] < tokens[b]; });
}

// dwte += the sums per token in fp32, in the order of version 1 (chunk = N: one sum per token) or
// of version 2 (chunk = EMBED_CHUNK: chunk sums, then 0 + the chunks in order where there are
// several); with exact = 1, each token's sum in double instead
static void wte_backward_ref(float* dwte, const float* dx, const float* dy, const int* tokens, int N, int C, int chunk,
                             int exact) {
    int* order = (int*)host_alloc(N * sizeof(int));
    group_positions(order, tokens, N);
    for (int g0 = 0, g1; g0 < N; g0 = g1) {
        int tok = tokens[order[g0]];
        for (g1 = g0; g1 < N && tokens[order[g1]] == tok; g1++) {}
        float* dst = dwte + (size_t)tok * C;
        for (int c = 0; c < C; c++) {
            double total = 0.0;
            float sum = 0.0f;
            for (int a = g0; a < g1; a += chunk) {
                float part = 0.0f;
                for (int p = a; p < std::min(a + chunk, g1); p++) {
                    size_t o = (size_t)order[p] * C + c;
                    part += dx[o] + dy[o];
                    total += (double)dx[o] + dy[o];
                }
                sum = g1 - g0 > chunk ? sum + part : part;
            }
            dst[c] = exact ? (float)(dst[c] + total) : dst[c] + sum;
        }
    }
    free(order);
}

// `./encoder_backward ref`: both fp32 orders against the sum in double, on a batch where one token
// fills half the positions (its sum spans 5 chunks)
static int check_reference(void) {
    const int N = 600, C = 7, V = 50;
    uint64_t seed = 11;
    float* dx = (float*)host_alloc((size_t)N * C * sizeof(float));
    float* dy = (float*)host_alloc((size_t)N * C * sizeof(float));
    fill_uniform(dx, (size_t)N * C, -1.0f, 1.0f, &seed);
    fill_uniform(dy, (size_t)N * C, -1.0f, 1.0f, &seed);
    int tokens[N];
    for (int i = 0; i < N; i++) { tokens[i] = i % 2 == 0 ? 3 : (int)(rng_next(&seed) % V); }
    float exact[V * C], got[V * C];
    fill_uniform(exact, V * C, -1.0f, 1.0f, &seed);
    memcpy(got, exact, sizeof got);
    wte_backward_ref(exact, dx, dy, tokens, N, C, N, 1);
    printf("references vs the sum in double (N = %d, C = %d, V = %d, one token at half the positions)\n", N, C, V);
    for (int chunk : {N, EMBED_CHUNK}) {
        float ours[V * C];
        memcpy(ours, got, sizeof ours);
        wte_backward_ref(ours, dx, dy, tokens, N, C, chunk, 0);
        check_close(chunk == N ? "v1 order" : "v2 order", exact, ours, V * C, 1e-5f, 1e-5f);
    }
    printf("the CPU references match the sum in double\n");
    free(dx);
    free(dy);
    return 0;
}

// ----------------------------------------------------------------------------
// version 1: one block per distinct token, over all of its positions

__global__ void wte_backward_v1(float* dwte, const float* dx, const float* dy, const int* group_token,
                                const int* group_start, const int* pos, int C) {
    int k = blockIdx.x;
    float* dst = dwte + (size_t)group_token[k] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int p = group_start[k]; p < group_start[k + 1]; p++) {
            size_t o = (size_t)pos[p] * C + c;
            sum += dx[o] + dy[o];
        }
        dst[c] += sum;
    }
}

// version 1's groups, read off the trainer's work list (a token's chunks are consecutive there):
// group_token (n) then group_start (n + 1), for the device; returns the number of groups
static int groups_from_chunks(int* out, const TokenChunks* tc) {
    const int* start = tc->list + tc->at_start;
    const int* token = tc->list + tc->at_token;
    int n = 0;
    for (int k = 0; k < tc->n_chunks; k++) {
        if (k == 0 || token[k] != token[k - 1]) { out[n++] = k; }
    }
    int* group_start = out + n;
    for (int g = 0; g < n; g++) { group_start[g] = start[out[g]]; }
    group_start[n] = start[tc->n_chunks];
    for (int g = 0; g < n; g++) { out[g] = token[out[g]]; }
    return n;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_reference(); }
    int N = N_POS, C = CH, V = VOCAB;
    const SizeArg sizes[] = {{"N", &N}, {"C", &C}, {"V", &V}};
    int only = parse_args(argc, argv, 2, sizes, 3);
    if (V < 2) { size_error(argv[0], "V must be at least 2"); }
    print_device();
    printf("encoder_backward: N = %d positions, C = %d, V = %d\n", N, C, V);

    size_t nx = (size_t)N * C, nw = (size_t)V * C;
    uint64_t seed = 99;
    float* dx = (float*)host_alloc(nx * sizeof(float));
    float* dy = (float*)host_alloc(nx * sizeof(float));
    fill_uniform(dx, nx, -1.0f, 1.0f, &seed);
    fill_uniform(dy, nx, -1.0f, 1.0f, &seed);
    float* dwte0 = (float*)host_alloc(nw * sizeof(float));
    fill_uniform(dwte0, nw, -1.0f, 1.0f, &seed);
    float* ref = (float*)host_alloc(nw * sizeof(float));
    float* d_dx = to_device_f32(dx, nx);
    float* d_dy = to_device_f32(dy, nx);
    float* d_dwte0 = to_device_f32(dwte0, nw);
    float* d_dwte = (float*)device_alloc(nw * sizeof(float));
    float* d_partials = (float*)device_alloc(nx * sizeof(float));  // the trainer passes its free du (N x C)
    int* groups = (int*)host_alloc((2 * (size_t)N + 1) * sizeof(int));
    int* d_groups = (int*)device_alloc((2 * (size_t)N + 1) * sizeof(int));
    TokenChunks tc;
    token_chunks_alloc(&tc, V, N);
    auto restore = [&] { cudaCheck(cudaMemcpy(d_dwte, d_dwte0, nw * sizeof(float), cudaMemcpyDeviceToDevice)); };

    // the three batches' tokens
    const char* batches[] = {"one token at half the positions", "every token different", "random tokens"};
    int* tokens = (int*)host_alloc(3 * (size_t)N * sizeof(int));
    for (int b = 0; b < 3; b++) {
        int* t = tokens + (size_t)b * N;
        for (int i = 0; i < N; i++) { t[i] = (int)(rng_next(&seed) % V); }
        if (b == 0) {
            for (int i = 0; i < N; i += 2) { t[i] = V / 2; }
        } else if (b == 1 && N <= V) {  // a random permutation of [0, V), its first N
            int* perm = (int*)host_alloc(V * sizeof(int));
            for (int i = 0; i < V; i++) { perm[i] = i; }
            for (int i = 0; i < N; i++) { std::swap(perm[i], perm[i + rng_next(&seed) % (V - i)]); }
            memcpy(t, perm, N * sizeof(int));
            free(perm);
        }
    }
    for (int v = 1; v <= 2; v++) {
        if (only && v != only) { continue; }
        printf("version %d\n", v);
        for (int b = 0; b < 3; b++) {
            if (b == 1 && N > V) {
                printf("  batch: %s: skipped (N > V)\n", batches[b]);
                continue;
            }
            const int* t = tokens + (size_t)b * N;
            token_chunks_build(&tc, t, N);
            int ng = groups_from_chunks(groups, &tc);
            cudaCheck(cudaMemcpy(d_groups, groups, (2 * (size_t)ng + 1) * sizeof(int), cudaMemcpyHostToDevice));
            printf("  batch: %s: %d distinct tokens, %d chunks; %d tokens have several (%d partial rows)\n",
                   batches[b], ng, tc.n_chunks, tc.n_split, tc.n_partials);
            auto run = [&] {
                if (v == 1) {
                    wte_backward_v1<<<ng, EMBED_THREADS>>>(d_dwte, d_dx, d_dy, d_groups, d_groups + ng, tc.d_list, C);
                    cudaCheckLaunch();
                } else {
                    wte_backward(d_dwte, d_partials, d_dx, d_dy, &tc, C);
                }
            };
            restore();
            run();
            cudaCheck(cudaDeviceSynchronize());
            memcpy(ref, dwte0, nw * sizeof(float));
            wte_backward_ref(ref, dx, dy, t, N, C, v == 1 ? N : EMBED_CHUNK, 0);
            float* d_ref = to_device_f32(ref, nw);
            check_identical("dwte", d_ref, d_dwte, nw, sizeof(float));
            cudaCheck(cudaFree(d_ref));
            char label[64];
            snprintf(label, sizeof label, "  v%d dwte, batch %d", v, b + 1);
            double bytes = 2.0 * nx * sizeof(float) + 2.0 * ng * C * sizeof(float);
            if (!timing_skipped(label)) { print_timing(label, time_ms(run, restore), bytes); }
        }
    }
    token_chunks_free(&tc);
    printf("all checked versions match the CPU reference\n");
    return 0;
}
