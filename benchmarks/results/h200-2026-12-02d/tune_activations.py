"""Tune target (``tilesafe tune``) for the element-wise activations after their kernels
changed: ``silu_mul`` at the five keys the shipped table held (measured on an H100 for the
previous gating), and ``gelu`` in both forms, f16 and bf16, at the benchmark's four shapes."""


def tune(device="cuda:0"):
    import tilesafe as ts
    from tilesafe import kernels as K

    def t(shape, dtype, seed):
        return ts.randn(shape, dtype=getattr(ts, dtype), seed=seed, device=device).sync()
    for rows, cols in ((512, 4096), (1, 16384), (512, 16384), (4, 512), (16, 512), (512, 9728)):
        print(f"silu_mul bfloat16 {rows} x {cols}", flush=True)
        K.silu_mul(t((rows, cols), "bfloat16", 0), t((rows, cols), "bfloat16", 1)).sync()
    for tanh in (False, True):
        for dtype in ("bfloat16", "float16"):
            for rows, cols in ((32, 16384), (1024, 16384), (16384, 4096), (16384, 16384)):
                print(f"gelu tanh={tanh} {dtype} {rows} x {cols}", flush=True)
                K.gelu(t((rows, cols), dtype, 2), approximate="tanh" if tanh else "none").sync()
