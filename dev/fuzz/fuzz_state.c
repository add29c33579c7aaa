/*
dev/fuzz/fuzz_state.c: libFuzzer harness for the training-state reader (common/state.h). The low
12 bits of the first two bytes of the input are the model's parameter count (0: the count that the
file size implies, so that the body is read); the rest is the state file given to state_read.
*/
#include "dev/fuzz/fuzz.h"
#include "common/state.h"

static float* moments;
static size_t n;  // static: set before the setjmp of FUZZ_TRY and read after it

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) { return 0; }
    n = fuzz_u16(data, size, 0) & 0x0fff;  // up to 4095 parameters: big enough, and fast
    const char* path = fuzz_input_file("state", data + 2, size - 2);
    if (n == 0 && size - 2 >= 1024) { n = (size - 2 - 1024) / (2 * sizeof(float)); }
    moments = (float*)malloc_check(2 * n * sizeof(float), "moments");
    TrainState st;
    FUZZ_TRY(state_read(path, &st, moments, moments + n, n), {});
    free(moments);
    return 0;
}
