#!/usr/bin/env python3
"""dev/cuda/attention_sdpa.py: PyTorch's SDPA flash attention, forward and backward, bf16, causal,
at the shapes of dev/cuda/attention_forward and attention_backward: the bar for the trainer's
attention kernels alone (attention.cuh; the goal is within 1.3x of these times).

    python3 dev/cuda/attention_sdpa.py                   B=8 T=1024 NH=12 HS=64 (the programs' defaults)
    python3 dev/cuda/attention_sdpa.py B=64 T=1024       any of B, T, NH, HS as NAME=VALUE

q, k and v are strided views of one (B, T, 3, NH, HS) tensor, the trainer's qkv rows, so PyTorch
reads the layout our kernels read (the flash backend takes strided heads; the last dimension is
contiguous). Timed as dev/cuda/common.h times: 3 warm-ups, then the mean of 20 repetitions, each
timed by CUDA events with the L2 cache flushed before it. The backward times one
out.backward(dout) on a graph kept from one forward pass (dq, dk, dv written each time), as
dev/cuda/attention_backward times the backward kernels after an untimed forward. Lines:
    sdpa forward  <ms> ms  <TFLOP/s> TFLOP/s (causal work)
    sdpa backward <ms> ms  <TFLOP/s> TFLOP/s (causal work)
TFLOP/s count the causal work as the dev/cuda programs do: 4 B NH HS T (T + 1) / 2 forward,
twice that backward (four products; the recomputed scores are not counted).
"""
import sys


def parse(argv):
    sizes = {"B": 8, "T": 1024, "NH": 12, "HS": 64}
    for a in argv:
        name, _, value = a.partition("=")
        if name not in sizes or not value.isdigit() or int(value) < 1:
            sys.exit(f"usage: {sys.argv[0]} [B=8] [T=1024] [NH=12] [HS=64] (positive whole numbers); got '{a}'")
        sizes[name] = int(value)
    return sizes


def main():
    s = parse(sys.argv[1:])
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        sys.exit("attention_sdpa.py: torch does not import here")
    if not torch.cuda.is_available():
        sys.exit("attention_sdpa.py: torch sees no CUDA device")
    B, T, NH, HS = s["B"], s["T"], s["NH"], s["HS"]
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}; B {B}, T {T}, NH {NH}, HS {HS}, bf16, causal")

    # the flash backend only (an error, not a silent fallback, where it cannot run these shapes)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        flash_only = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:  # torch < 2.3
        flash_only = lambda: torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)

    g = torch.Generator(device=dev).manual_seed(0)
    qkv = torch.randn(B, T, 3, NH, HS, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, NH, T, HS) views
    dout = torch.randn(B, NH, T, HS, device=dev, dtype=torch.bfloat16, generator=g)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)  # larger than any L2 (50 MB on an H100)

    def time_ms(fn, warmup=3, reps=20):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        total = 0.0
        for _ in range(reps):
            flush.zero_()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            total += start.elapsed_time(stop)
        return total / reps

    flops = 4.0 * B * NH * HS * T * (T + 1) / 2
    with flash_only():
        with torch.no_grad():
            fwd = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def backward():
            qkv.grad = None
            out.backward(dout, retain_graph=True)

        bwd = time_ms(backward)
    print(f"sdpa forward  {fwd:9.4f} ms  {flops / (fwd * 1e-3) / 1e12:8.1f} TFLOP/s (causal work)")
    print(f"sdpa backward {bwd:9.4f} ms  {2 * flops / (bwd * 1e-3) / 1e12:8.1f} TFLOP/s (causal work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
