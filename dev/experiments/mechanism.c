/*
dev/experiments/mechanism.c: what a trained model does with its residual streams, measured on
validation batches with the CPU trainer's own forward pass (it includes train_gpt2.c, as
test_gpt2.c does).

    make -C . dev/experiments/mechanism        (or: gcc -O2 -fopenmp -I. dev/experiments/mechanism.c -lm)
    dev/experiments/mechanism MODEL.bin VAL_SHARD [-b B] [-t T] [-m batches]

Every norm below is the L2 norm over the C channels of one token, averaged over all B*T tokens
of all batches.

1. Update size against the stream, per sublayer k = 2l + s (s = 0 attention, 1 MLP): the block
   output z_k against the stream it is added to. If deep layers' updates are small against the
   stream, they change the representation little: the "lost effective depth" of Pre-Norm.
     pre      ratio = ||z_k|| / ||x_k||           x_k the residual stream before the sublayer
     post     ratio = ||z_k|| / ||x_k||           x_k the normalised stream (LN output of k-1)
     siamese  ratio = ||z_k|| / ||y_k||           the Pre-Norm-like stream Y, and also
              ratio_x = ||z_k / c_l|| / ||a_k||   a_k = LN(x_k), the base of the X update
2. SiameseNorm's final merge h = LN(LN(x; lnfx) + LN(y; lnfy); lnf): the norms of the two terms
   (which stream the merge listens to), their cosine, and the validation loss with one term
   ablated: set to zero, or replaced by its mean over all measured tokens (a constant vector,
   which removes what the stream says about the token but keeps its average offset).
   loss_recomputed is the loss of the head on the unablated sum, the same as loss up to rounding:
   a check that the ablations go through the same head as the model.

Output: key=value lines (one per sublayer, then the merge), the format dev/experiments/
plot_mechanism.py reads, and a readable summary.
*/
#define TESTING
#include "train_gpt2.c"
#include "common/dataloader.h"

// mean over tokens of the per-token L2 norm of a (BT, C) tensor, scaled by `scale`
static double mean_token_norm(const float* v, size_t BT, int C, float scale) {
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) {
        double s = 0.0;
        for (int c = 0; c < C; c++) { s += (double)v[i * C + c] * v[i * C + c]; }
        sum += sqrt(s) * scale;
    }
    return sum / (double)BT;
}

// mean over tokens of the cosine between the rows of two (BT, C) tensors
static double mean_token_cosine(const float* a, const float* b, size_t BT, int C) {
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) {
        double ab = 0.0, aa = 0.0, bb = 0.0;
        for (int c = 0; c < C; c++) {
            ab += (double)a[i * C + c] * b[i * C + c];
            aa += (double)a[i * C + c] * a[i * C + c];
            bb += (double)b[i * C + c] * b[i * C + c];
        }
        sum += ab / (sqrt(aa * bb) + 1e-30);
    }
    return sum / (double)BT;
}

// the loss of the head on `h_in`: h = LN(h_in; lnf), logits = h wte^T, mean cross-entropy
static double head_loss(GPT2* m, const float* h_in, float* h, float* mean, float* rstd, int B, int T) {
    const GPT2Config* cfg = &m->config;
    int BT = B * T, C = cfg->channels;
    ActivationTensors* a = &m->acts;
    layernorm_forward(h, mean, rstd, h_in, m->params.lnfw, m->params.lnfb, BT, C, STATS_COMPUTE);
    matmul_forward(a->logits, h, m->params.wte, NULL, BT, C, cfg->padded_vocab_size);
    crossentropy_forward(a->losses, a->lse, a->logits, m->targets, BT, cfg->vocab_size, cfg->padded_vocab_size);
    double sum = 0.0;
    for (int i = 0; i < BT; i++) { sum += a->losses[i]; }
    return sum / BT;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.bin VAL_SHARD [-b B] [-t T] [-m batches]\n", argv[0]);
        return 1;
    }
    const char* model_path = argv[1];
    const char* val_path = argv[2];
    int B = 8, T = 128, batches = 8;
    for (int i = 3; i < argc; i += 2) {
        if (i + 1 >= argc) { fatal("flag %s needs a value", argv[i]); }
        if (strcmp(argv[i], "-b") == 0) { B = (int)parse_long_flag("-b", argv[i + 1], 1, 1 << 12); }
        else if (strcmp(argv[i], "-t") == 0) { T = (int)parse_long_flag("-t", argv[i + 1], 1, 1 << 14); }
        else if (strcmp(argv[i], "-m") == 0) { batches = (int)parse_long_flag("-m", argv[i + 1], 1, 1 << 16); }
        else { fatal("unknown flag %s", argv[i]); }
    }
    GPT2 model;
    gpt2_build_from_checkpoint(&model, model_path);
    const GPT2Config* cfg = &model.config;
    if (T > cfg->max_seq_len) { fatal("-t %d exceeds the model's maximum sequence length %d", T, cfg->max_seq_len); }
    gpt2_allocate(&model, B, T);
    DataLoader loader;
    dataloader_init(&loader, val_path, B, T, cfg->vocab_size, 0, 1);

    int L = cfg->num_layers, C = cfg->channels, K = 2 * L, BT = B * T;
    NormMode mode = cfg->norm_mode;
    int two_streams = norm_mode_layout(mode)->two_streams;  // a final merge of X and Y to ablate
    size_t N = (size_t)BT * C;
    double* z_norm = (double*)calloc_check(K, sizeof(double), "norms");
    double* s_norm = (double*)calloc_check(K, sizeof(double), "norms");
    double* a_norm = (double*)calloc_check(K, sizeof(double), "norms");
    double loss = 0.0, fx_norm = 0.0, fy_norm = 0.0, f_cos = 0.0;
    double loss_recomputed = 0.0, loss_zero_x = 0.0, loss_zero_y = 0.0, loss_mean_x = 0.0, loss_mean_y = 0.0;
    // siamese: the two merge terms of every measured token, for the mean ablation (second pass)
    float* fx = (float*)malloc_check(N * sizeof(float), "merge term x");
    float* fy = (float*)malloc_check(N * sizeof(float), "merge term y");
    float* sum = (float*)malloc_check(N * sizeof(float), "merge sum");
    float* h = (float*)malloc_check(N * sizeof(float), "head input");
    float* mean = (float*)malloc_check((size_t)BT * sizeof(float), "LN mean");
    float* rstd = (float*)malloc_check((size_t)BT * sizeof(float), "LN rstd");
    double* fx_avg = (double*)calloc_check(C, sizeof(double), "mean of LN(x)");
    double* fy_avg = (double*)calloc_check(C, sizeof(double), "mean of LN(y)");

    for (int pass = 0; pass < (two_streams ? 2 : 1); pass++) {
        dataloader_reset(&loader);
        for (int b = 0; b < batches; b++) {
            dataloader_next_batch(&loader);
            gpt2_forward(&model, loader.inputs, loader.targets, B, T);
            ActivationTensors* a = &model.acts;
            if (two_streams) {
                const float* x = a->resx + (size_t)K * N;
                const float* y = a->resy + (size_t)K * N;
                layernorm_forward(fx, mean, rstd, x, model.params.lnfxw, model.params.lnfxb, BT, C, STATS_COMPUTE);
                layernorm_forward(fy, mean, rstd, y, model.params.lnfyw, model.params.lnfyb, BT, C, STATS_COMPUTE);
            }
            if (pass == 1) {  // the mean ablations, with the means of the first pass
                for (size_t i = 0; i < N; i++) { sum[i] = fx[i] + (float)fy_avg[i % C]; }
                loss_mean_x += head_loss(&model, sum, h, mean, rstd, B, T);
                for (size_t i = 0; i < N; i++) { sum[i] = (float)fx_avg[i % C] + fy[i]; }
                loss_mean_y += head_loss(&model, sum, h, mean, rstd, B, T);
                continue;
            }
            loss += model.mean_loss;
            for (int k = 0; k < K; k++) {
                const float* z = a->blockout + k * N;
                z_norm[k] += mean_token_norm(z, BT, C, 1.0f);
                if (two_streams) {
                    s_norm[k] += mean_token_norm(a->resy + k * N, BT, C, 1.0f);
                    a_norm[k] += mean_token_norm(a->lnx + k * N, BT, C, 1.0f);
                } else {
                    s_norm[k] += mean_token_norm(a->resx + k * N, BT, C, 1.0f);
                }
            }
            if (two_streams) {
                fx_norm += mean_token_norm(fx, BT, C, 1.0f);
                fy_norm += mean_token_norm(fy, BT, C, 1.0f);
                f_cos += mean_token_cosine(fx, fy, BT, C);
                for (size_t i = 0; i < N; i++) {
                    fx_avg[i % C] += fx[i] / ((double)BT * batches);
                    fy_avg[i % C] += fy[i] / ((double)BT * batches);
                }
                for (size_t i = 0; i < N; i++) { sum[i] = fx[i] + fy[i]; }
                loss_recomputed += head_loss(&model, sum, h, mean, rstd, B, T);  // both terms: the model's loss
                loss_zero_y += head_loss(&model, fx, h, mean, rstd, B, T);  // LN(y) term set to zero
                loss_zero_x += head_loss(&model, fy, h, mean, rstd, B, T);  // LN(x) term set to zero
            }
        }
    }

    printf("# %s: %s, L %d, C %d, NH %d; %d val batches of %d x %d tokens from %s\n", model_path,
           NORM_MODE_NAMES[mode], L, C, cfg->num_heads, batches, B, T, val_path);
    // as the trainer reports it: the mean over batches in double, then float
    printf("model=%s mode=%s val_loss=%.6f\n", model_path, NORM_MODE_NAMES[mode], (float)(loss / batches));
    for (int k = 0; k < K; k++) {
        int l = k / 2;
        double zn = z_norm[k] / batches, sn = s_norm[k] / batches;
        printf("sublayer=%d layer=%d kind=%s z_norm=%.8g stream_norm=%.8g ratio=%.8g", k, l, k % 2 ? "mlp" : "attn",
               zn, sn, zn / sn);
        if (two_streams) {
            double an = a_norm[k] / batches, c = siamese_scale(l);
            printf(" lnx_norm=%.8g ratio_x=%.8g", an, zn / c / an);
        }
        printf("\n");
    }
    if (two_streams) {
        printf("merge lnfx_norm=%.6f lnfy_norm=%.6f cosine=%.6f loss=%.6f loss_recomputed=%.6f loss_zero_x=%.6f loss_zero_y=%.6f "
               "loss_mean_x=%.6f loss_mean_y=%.6f\n", fx_norm / batches, fy_norm / batches, f_cos / batches,
               loss / batches, loss_recomputed / batches, loss_zero_x / batches, loss_zero_y / batches, loss_mean_x / batches,
               loss_mean_y / batches);
    }
    free(z_norm); free(s_norm); free(a_norm); free(fx); free(fy); free(sum); free(h); free(mean); free(rstd);
    free(fx_avg); free(fy_avg);
    dataloader_free(&loader);
    gpt2_free(&model);
    return 0;
}
