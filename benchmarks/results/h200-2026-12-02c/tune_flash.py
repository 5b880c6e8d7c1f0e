"""Tune target (``tilesafe tune``) for flash_attention's shipped keys after its kernel changed:
(head dim, dtype, causal, longer than 1024, group) over d 64/128, f16/bf16, causal short and long,
non-causal long, group 4; and the engine's bf16 d 128 causal short prefill at groups 4 and 2."""


def tune(device="cuda:0"):
    import tilesafe as ts
    from tilesafe import kernels as K

    def t(shape, dtype, seed):
        return ts.randn(shape, dtype=getattr(ts, dtype), seed=seed, device=device).sync()
    calls = [(32, 8, s, d, c, dt) for dt in ("bfloat16", "float16") for d in (64, 128)
             for s, c in ((512, True), (4096, True), (4096, False))]
    calls.append((16, 8, 512, 128, True, "bfloat16"))
    for hq, hkv, s, d, c, dt in calls:
        print(f"flash_attention {dt} hq={hq} hkv={hkv} s={s} d={d} causal={c}", flush=True)
        K.flash_attention(t((1, hq, s, d), dt, 0), t((1, hkv, s, d), dt, 1),
                          t((1, hkv, s, d), dt, 2), causal=c).sync()
