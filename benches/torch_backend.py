"""PyTorch's figures for issue 6's benchmark (benches/src/bin/backend_bench.rs): float
matmul at 4096 x 4096 x 4096 in f32 (TF32 off, PyTorch's default), f16 and bf16 as
TFLOP/s (2 n^3 flops), and the element-wise add of two f32 tensors of 2^26 elements as
GB/s (2 reads + 1 write of 4 bytes), timed with CUDA events over 20 calls after a
warm-up. Usage: python3 benches/torch_backend.py [n]
"""
import sys

import torch


def timed(f, reps=20):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        f()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
    # Warm-up: leave the idle clocks.
    x = torch.randn(1 << 26, device=dev)
    timed(lambda: x.clone(), reps=200)
    print("\n| op | dtype | time (ms) | figure |\n|---|---|---|---|")
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        a = torch.rand(n, n, device=dev, dtype=dt) * 2 - 1
        b = torch.rand(n, n, device=dev, dtype=dt) * 2 - 1
        s = timed(lambda: torch.matmul(a, b))
        print(f"| matmul {n}x{n}x{n} | {dt} | {s * 1e3:.3f} | {2 * n**3 / s / 1e12:.1f} TFLOP/s |")
    a = torch.rand(1 << 26, device=dev)
    b = torch.rand(1 << 26, device=dev)
    out = torch.empty_like(a)
    s = timed(lambda: torch.add(a, b, out=out))
    print(f"| add 2^26 | float32 | {s * 1e3:.3f} | {12 * (1 << 26) / s / 1e9:.0f} GB/s |")
    s = timed(lambda: out.copy_(a))
    print(f"| copy 256 MiB | float32 | {s * 1e3:.3f} | {8 * (1 << 26) / s / 1e9:.0f} GB/s |")


if __name__ == "__main__":
    main()
