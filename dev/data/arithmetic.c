/*
dev/data/arithmetic.c: writes the default dataset (common/arithmetic.h) into a folder.

    make data/arithmetic                       builds this and writes data/arithmetic/
    dev/data/arithmetic [folder] [-d digits] [-n train problems] [-m val problems] [-f format]

format: padded-reversed (the default: "12+05=710" for 12+5=17), plain ("12+5=17", the only format
before there were formats), padded ("12+05=017") or reversed ("12+5=71").

Without options the files are exactly the ones ./train_gpt2 generates on its first run; they are
always rewritten (each file atomically), which changes nothing for the same settings.
*/
#include <limits.h>
#include "common/arithmetic.h"

static long parse_positive(const char* flag, const char* s, long hi) {
    char* end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1 || v > hi) { fatal("%s expects an integer in 1..%ld, got '%s'", flag, hi, s); }
    return v;
}

int main(int argc, char** argv) {
    const char* dir = ARITH_DIR;
    ArithSpec spec = arith_default_spec();
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: %s [folder, default %s] [-d max digits, default %d] [-n train problems, default %ld]"
                   " [-m val problems, default %ld] [-f plain|padded|reversed|padded-reversed, default %s]\n",
                   argv[0], ARITH_DIR, spec.max_digits, spec.train_problems, spec.val_problems,
                   ARITH_FORMAT_NAMES[spec.format]);
            return 0;
        }
        if (a[0] != '-') { dir = a; continue; }
        if (i + 1 >= argc) { fatal("flag %s needs a value", a); }
        const char* v = argv[++i];
        if (strcmp(a, "-d") == 0) { spec.max_digits = (int)parse_positive(a, v, ARITH_MAX_DIGITS); }
        else if (strcmp(a, "-n") == 0) { spec.train_problems = parse_positive(a, v, 100000000L); }
        else if (strcmp(a, "-m") == 0) { spec.val_problems = parse_positive(a, v, 100000000L); }
        else if (strcmp(a, "-f") == 0) {
            spec.format = arith_format_from_name(v);
            if (spec.format < 0) { fatal("-f expects plain, padded, reversed or padded-reversed, got '%s'", v); }
        }
        else { fatal("unknown flag %s (see -h)", a); }
    }
    arith_write_dataset(dir, &spec);
    char settings[96];
    printf("wrote %s/{%s,%s,%s,%s,%s}: %ld + %ld problems, %s, seed %llu\n", dir, ARITH_TRAIN_NAME, ARITH_VAL_NAME,
           ARITH_TOKENIZER_NAME, ARITH_CHOICES_NAME, ARITH_MARKER_NAME, spec.train_problems, spec.val_problems,
           arith_describe(&spec, settings, sizeof(settings)), spec.seed);
    return 0;
}
