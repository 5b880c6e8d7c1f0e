"""Tune target (``tilesafe tune``) for decode_attention at the 4b/8b engine's key: one query
token, 32 query heads over 8 key/value heads, d 128, bf16, the engine's token-major cache of
1536 positions (a 512-token prompt plus 1024 generated) viewed head-major, holding 1024 keys."""


def tune(device="cuda:0"):
    """(The shipped table holds an H100 entry for this key, which the tuner would take without
    timing: it is set aside for this function here.) Fixed after call4, not yet run."""
    import numpy as np
    from tilesafe.autotune import store
    shipped = store.shipped_lookup
    store.shipped_lookup = lambda wanted, configs: (
        None if wanted.get("function") == "tilesafe.decode_attention" else shipped(wanted, configs))
    import tilesafe as ts
    from tilesafe import kernels as K
    q = ts.randn((1, 32, 128), dtype=ts.bfloat16, seed=0, device=device).sync()
    k = ts.randn((1, 1536, 8, 128), dtype=ts.bfloat16, seed=1, device=device).sync()
    v = ts.randn((1, 1536, 8, 128), dtype=ts.bfloat16, seed=2, device=device).sync()
    lens = ts.tensor(np.array([1024], np.int32), device=device).sync()
    print("decode_attention bf16 32/8 heads, d 128, 1024 of 1536 keys", flush=True)
    k4, v4 = k.permute((0, 2, 1, 3)), v.permute((0, 2, 1, 3))
    # out= and workspace=, as the engine passes them: a call that allocates its scratch cannot
    # be recorded into a graph, and the tuner's chain of such calls times the host (about 1 ms
    # a run in this directory's call4, against a 7 us kernel)
    out = ts.empty((1, 32, 128), ts.bfloat16, device=device).sync()
    work = K.decode_attention_workspace(q, k4).sync()
    K.decode_attention(q, k4, v4, lens, out=out, workspace=work).sync()
