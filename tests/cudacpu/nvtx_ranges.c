// tests/cudacpu/nvtx_ranges.c: an NVTX injection library that logs where a program's push/pop
// ranges begin and end among its launches. Loaded by the NVTX headers when the program runs with
// NVTX_INJECTION64_PATH=tests/bin/nvtx_ranges.so; beside CUDACPU_LAUNCH_LOG (the CPU execution
// layer writes and flushes one line per launch), it appends to NVTX_RANGE_LOG one line per call:
//   push NAME BYTES      (nvtxRangePushA)
//   pop BYTES            (nvtxRangePop)
// BYTES is the launch log's size at the call, so the launches inside a range are the log's lines
// between its push and its pop (dev/roofline.py --step-ranges checks train_gpt2cu's "step" range
// against one modelled step). Other NVTX calls stay no-ops.
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <nvtx3/nvToolsExt.h>

static FILE* range_log;
static const char* launch_log;

static long long launch_log_bytes(void) {
    struct stat st;
    return launch_log && stat(launch_log, &st) == 0 ? (long long)st.st_size : -1;
}

static int log_push(const char* name) {
    fprintf(range_log, "push %s %lld\n", name, launch_log_bytes());
    fflush(range_log);
    return 0;
}

static int log_pop(void) {
    fprintf(range_log, "pop %lld\n", launch_log_bytes());
    fflush(range_log);
    return 0;
}

// the entry point the NVTX loader looks up: replace the core module's push and pop; 1 on success
int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    const char* path = getenv("NVTX_RANGE_LOG");
    launch_log = getenv("CUDACPU_LAUNCH_LOG");
    if (!path || !(range_log = fopen(path, "w"))) { return 0; }
    const NvtxExportTableCallbacks* callbacks = (const NvtxExportTableCallbacks*)get_export_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
        size <= NVTX_CBID_CORE_RangePop) {
        return 0;
    }
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)log_push;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)log_pop;
    return 1;
}
