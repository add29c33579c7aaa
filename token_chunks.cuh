/*
token_chunks.cuh: the host half of train_gpt2.cu's token-embedding gradient, the work list of wte_backward's comment.
*/
#ifndef TOKEN_CHUNKS_CUH
#define TOKEN_CHUNKS_CUH

#include "cuda_common.cuh"

#define EMBED_CHUNK 64  // positions per chunk

// The work list: one int array, laid out the same in pinned host memory (list) and on the device (d_list):
//   pos          [BT]            positions grouped by token
//   chunk_start  [n_chunks + 1]  chunk k is pos[chunk_start[k] .. chunk_start[k + 1])
//   chunk_token  [n_chunks]      its token
//   chunk_slot   [n_chunks]      -1: the token's only chunk; else its partial row
//   split_token  [n_split]       the tokens with several chunks
//   split_first  [n_split + 1]   token k's partial rows are split_first[k] .. split_first[k + 1] - 1
// n_chunks <= BT and n_split <= BT, so 6 BT + 2 ints hold it.
typedef struct {
    int BT;  // positions the arrays were allocated for
    int n_chunks, n_split, n_partials;
    size_t at_start, at_token, at_slot, at_split_token, at_split_first, len;  // offsets in list; ints in use
    int *list, *d_list;   // pinned host, device
    int* group_of_token;  // host (V): -1, but during token_chunks_build
    int* group_end;       // host (BT) scratch: the end of each group in pos
} TokenChunks;

static void token_chunks_alloc(TokenChunks* tc, int V, int BT) {
    tc->BT = BT;
    tc->list = (int*)pinned_malloc_check((6 * (size_t)BT + 2) * sizeof(int), "token chunks");
    tc->d_list = (int*)cuda_malloc_check((6 * (size_t)BT + 2) * sizeof(int), "token chunks");
    tc->group_of_token = (int*)malloc_check(((size_t)V + BT) * sizeof(int), "token chunks");
    for (int i = 0; i < V; i++) { tc->group_of_token[i] = -1; }
    tc->group_end = tc->group_of_token + V;
}

static void token_chunks_free(TokenChunks* tc) {
    cudaCheck(cudaFreeHost(tc->list));
    cudaCheck(cudaFree(tc->d_list));
    free(tc->group_of_token);  // and group_end
}

// the work list of the BT tokens in tc->list, then its upload to tc->d_list without waiting (the host
// must not rewrite tc->list before the copy is done)
static void token_chunks_build(TokenChunks* tc, const int* tokens, int BT) {
    if (BT > tc->BT) { fatal("token_chunks_build: %d positions, allocated for %d", BT, tc->BT); }
    int *list = tc->list, *group_of_token = tc->group_of_token, *end = tc->group_end;
    // a counting sort of the positions by token, the groups in the order of their first position: each group's size
    // (and chunks), then its start, then the positions put in place (end[g] runs from the group's start to its end)
    int ng = 0, &n_chunks = tc->n_chunks, &n_split = tc->n_split;  // the counts, kept in tc
    n_chunks = n_split = 0;
    for (int i = 0; i < BT; i++) {
        int* g = &group_of_token[tokens[i]];
        if (*g < 0) {
            *g = ng;
            end[ng++] = 0;
        }
        end[*g]++;
    }
    for (int g = 0, start = 0; g < ng; g++) {
        int n = end[g], chunks = (n + EMBED_CHUNK - 1) / EMBED_CHUNK;
        n_chunks += chunks;
        n_split += chunks > 1;
        end[g] = start;
        start += n;
    }
    for (int i = 0; i < BT; i++) { list[end[group_of_token[tokens[i]]]++] = i; }
    for (int i = 0; i < BT; i++) { group_of_token[tokens[i]] = -1; }
    // the arrays after pos, placed by the counts
    tc->at_start = BT;
    tc->at_token = tc->at_start + n_chunks + 1;
    tc->at_slot = tc->at_token + n_chunks;
    tc->at_split_token = tc->at_slot + n_chunks;
    tc->at_split_first = tc->at_split_token + n_split;
    tc->len = tc->at_split_first + n_split + 1;
    int k = 0, split = 0, slot = 0;
    for (int g = 0, start = 0; g < ng; start = end[g++]) {
        int token = tokens[list[start]], several = end[g] - start > EMBED_CHUNK;
        if (several) {
            list[tc->at_split_token + split] = token;
            list[tc->at_split_first + split++] = slot;
        }
        for (int p = start; p < end[g]; p += EMBED_CHUNK, k++) {
            list[tc->at_start + k] = p;
            list[tc->at_token + k] = token;
            list[tc->at_slot + k] = several ? slot++ : -1;
        }
    }
    list[tc->at_start + n_chunks] = BT;
    list[tc->at_split_first + n_split] = slot;
    tc->n_partials = slot;
    cudaCheck(cudaMemcpyAsync(tc->d_list, list, tc->len * sizeof(int), cudaMemcpyHostToDevice, 0));
}

#endif // TOKEN_CHUNKS_CUH
