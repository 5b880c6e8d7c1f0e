"""Hugging Face-format checkpoint directories: ``config.json`` plus ``*.safetensors`` (one file,
or shards with ``model.safetensors.index.json``), read with the ``safetensors`` package (memory
mapped: a weight is read from disk when it is used) and written the same way.

``write_random`` makes a checkpoint of random weights for a named size, so a model of a real
size can be loaded through the very path a real checkpoint takes; ``random_weights`` draws them
in fixed chunks, each from its own seeded generator, filled by a pool of threads (the values do
not depend on the number of threads).

Imports ``errors``, the model configs and, at use, numpy, ml_dtypes, safetensors and tqdm."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import numpy as np

from ..errors import ArgumentError

INDEX = "model.safetensors.index.json"
SHARD_BYTES = 4 << 30
#: values per generator of ``random_weights`` (they depend on it: fixed, not tuned)
RANDOM_CHUNK = 1 << 22
#: how ``random_weights`` draws (``write_random`` puts it in ``config.json``: a checkpoint
#: drawn another way, by an older tilesafe, is not reused)
RANDOM_SCHEME = f"chunks of {RANDOM_CHUNK}, default_rng([seed, tensor, chunk])"


def _progress(total: int, desc: str, unit: str, enabled: bool) -> Any:
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=not enabled,
                dynamic_ncols=True)


def weight_files(directory: "str | Path") -> dict[str, Path]:
    """``{weight name: the .safetensors file holding it}`` of a checkpoint directory (from the
    index when there is one; ArgumentError if the directory holds no weights)."""
    root = Path(directory)
    index = root / INDEX
    if index.is_file():
        mapping = json.loads(index.read_text())["weight_map"]
        return {name: root / file for name, file in mapping.items()}
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise ArgumentError(f"{root}: no *.safetensors file (and no {INDEX})",
                            hint="a model directory holds config.json and its weights as "
                            "safetensors (Hugging Face format)")
    from safetensors import safe_open
    out: dict[str, Path] = {}
    for file in files:
        with safe_open(str(file), framework="numpy") as f:
            for name in f.keys():
                out[name] = file
    return out


class Checkpoint:
    """The weights of a checkpoint directory, each read (memory-mapped) when asked for."""

    def __init__(self, directory: "str | Path"):
        self.directory = Path(directory)
        self.files = weight_files(self.directory)
        self._open: dict[Path, Any] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.files

    def names(self) -> list[str]:
        return list(self.files)

    def get(self, name: str) -> np.ndarray:
        """The weight ``name`` as a numpy array (bf16 and the 8-bit floats as ml_dtypes)."""
        file = self.files.get(name)
        if file is None:
            raise ArgumentError(f"{self.directory}: the checkpoint has no weight {name!r}")
        handle = self._open.get(file)
        if handle is None:
            from safetensors import safe_open
            handle = self._open[file] = safe_open(str(file), framework="numpy").__enter__()
        return handle.get_tensor(name)

    def check(self, expected: Iterable[tuple[str, tuple[int, ...]]]) -> None:
        """ArgumentError naming every expected weight that is missing or of another shape."""
        problems = []
        for name, shape in expected:
            if name not in self.files:
                problems.append(f"{name} is missing")
                continue
            from safetensors import safe_open
            handle = self._open.get(self.files[name])
            if handle is None:
                handle = self._open[self.files[name]] = safe_open(
                    str(self.files[name]), framework="numpy").__enter__()
            got = tuple(handle.get_slice(name).get_shape())
            if got != tuple(shape):
                problems.append(f"{name} has shape {got}, the config says {tuple(shape)}")
        if problems:
            raise ArgumentError(f"{self.directory}: the weights do not match config.json: "
                                + "; ".join(problems[:8])
                                + (f" (and {len(problems) - 8} more)" if len(problems) > 8
                                   else ""))


def write_checkpoint(directory: "str | Path", config_json: Mapping[str, Any],
                     weights: Iterable[tuple[str, np.ndarray]], *, total_bytes: int,
                     shard_bytes: int = SHARD_BYTES, progress: bool = True) -> Path:
    """Write ``config.json`` and the weights (``(name, array)`` in order) as safetensors
    shards of at most ``shard_bytes`` with an index; returns the directory."""
    from safetensors.numpy import save_file
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, np.ndarray]] = [{}]
    sizes = [0]
    weight_map: dict[str, int] = {}
    bar = _progress(total_bytes, f"writing {root.name}", "B", progress)
    written: list[str] = []

    def flush(final: bool = False) -> None:
        index = len(written) + 1
        name = f"model-{index:05d}.safetensors.partial"
        save_file(shards[-1], str(root / name), metadata={"format": "pt"})
        written.append(name)
        shards[-1] = {}
        sizes[-1] = 0

    with bar:
        for name, array in weights:
            if sizes[-1] and sizes[-1] + array.nbytes > shard_bytes:
                flush()
            shards[-1][name] = np.ascontiguousarray(array)
            sizes[-1] += array.nbytes
            weight_map[name] = len(written)
            bar.update(array.nbytes)
        if shards[-1]:
            flush(final=True)
    count = len(written)
    final_names = []
    for i, partial in enumerate(written, 1):
        final = (f"model-{i:05d}-of-{count:05d}.safetensors" if count > 1
                 else "model.safetensors")
        os.replace(root / partial, root / final)
        final_names.append(final)
    if count > 1:
        index = {"metadata": {"total_size": total_bytes},
                 "weight_map": {n: final_names[i] for n, i in weight_map.items()}}
        (root / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    (root / "config.json").write_text(json.dumps(dict(config_json), indent=2) + "\n")
    return root


def default_workers() -> int:
    """The threads ``random_weights`` fills with by default: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not on Linux)
        return max(1, os.cpu_count() or 1)


def random_weights(shapes: Iterable[tuple[str, tuple[int, ...]]], dtype: Any, *, seed: int,
                   std: float, is_norm: Callable[[str], bool], workers: Optional[int] = None,
                   chunk: int = RANDOM_CHUNK) -> Iterator[tuple[str, np.ndarray]]:
    """Random weights of ``shapes``, yielded ``(name, array)`` in order: matrices ~ N(0, std),
    norm scales ~ 1 + N(0, std), drawn in float32 and rounded to ``dtype`` (a numpy / ml_dtypes
    dtype).

    Tensor ``i`` is drawn in chunks of ``chunk`` values (of the flattened tensor, the last one
    shorter), chunk ``c`` from its own generator ``np.random.default_rng([seed, i, c])``, so
    the values are a function of ``seed``, the shapes and ``chunk`` alone: not of ``workers``
    (the threads filling the chunks, default ``default_workers()``; numpy's generators and
    casts release the GIL) nor of the order the chunks are filled in. While a tensor is
    consumed the next one is filled: besides the tensor yielded, one more and a float32 chunk
    per thread are held."""
    workers = default_workers() if workers is None else workers
    if not (isinstance(workers, int) and workers >= 1):
        raise ArgumentError(f"workers={workers!r} must be an int >= 1")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ArgumentError(f"chunk={chunk!r} must be an int >= 1")
    if seed < 0:
        raise ArgumentError(f"seed={seed!r} must be >= 0")
    direct = np.dtype(dtype) == np.float32  # (drawn into the tensor itself, no scratch)
    scale, local = np.float32(std), threading.local()

    def fill(flat: np.ndarray, index: int, c: int, norm: bool) -> None:
        part = flat[c * chunk:(c + 1) * chunk]
        if direct:
            values = part
        else:
            scratch = getattr(local, "scratch", None)
            if scratch is None:
                scratch = local.scratch = np.empty(chunk, np.float32)
            values = scratch[:part.size]
        np.random.default_rng([seed, index, c]).standard_normal(out=values, dtype=np.float32)
        values *= scale
        if norm:
            values += np.float32(1.0)
        if not direct:
            part[...] = values  # (rounded to dtype as astype rounds)

    def start(index: int, name: str, shape: tuple[int, ...]) -> tuple[str, np.ndarray, list]:
        array = np.empty(shape, dtype)
        flat, norm = array.reshape(-1), is_norm(name)
        return name, array, [pool.submit(fill, flat, index, c, norm)
                             for c in range(-(-flat.size // chunk))]

    def finish(name: str, array: np.ndarray, work: list) -> tuple[str, np.ndarray]:
        for job in work:
            job.result()
        return name, array

    pool = ThreadPoolExecutor(workers, thread_name_prefix="random-weights")
    try:
        pending = None
        for index, (name, shape) in enumerate(shapes):
            started = start(index, name, tuple(shape))
            if pending is not None:
                yield finish(*pending)
            pending = started
        if pending is not None:
            yield finish(*pending)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def directory_bytes(shapes: Iterable[tuple[str, tuple[int, ...]]], itemsize: int) -> int:
    return sum(int(np.prod(shape)) * itemsize for _, shape in shapes)


def default_random_dir(name: str) -> Path:
    """Where ``--random NAME`` keeps its checkpoint: under the tilesafe cache directory (its
    default place when caching is off)."""
    from ..backends.tileir.cache import cache_dir, default_cache_dir
    return (cache_dir() or default_cache_dir()) / "random-checkpoints" / name


def write_random(name_or_config: Any, directory: Optional["str | Path"] = None, *,
                 dtype: str = "bfloat16", seed: int = 0, progress: bool = True,
                 shard_bytes: int = SHARD_BYTES, workers: Optional[int] = None) -> Path:
    """Write a Qwen3 checkpoint of random weights (``random_weights``, filled by ``workers``
    threads: the values do not depend on how many): ``name_or_config`` a named size
    (``qwen3-4b``...) or a ``Qwen3Config``; ``directory`` defaults to the cache
    (``default_random_dir``). An existing complete checkpoint with the same config, seed and
    way of drawing (``RANDOM_SCHEME``) is reused. Returns the directory."""
    import ml_dtypes
    from .qwen3.config import Qwen3Config, named
    from .qwen3.weights import RANDOM_STD, is_norm, weight_shapes
    config = name_or_config if isinstance(name_or_config, Qwen3Config) else named(name_or_config)
    label = name_or_config if isinstance(name_or_config, str) else "custom"
    root = Path(directory) if directory is not None else default_random_dir(f"{label}-{dtype}-"
                                                                            f"{seed}")
    config_json = dict(config.to_json_dict(), torch_dtype=dtype,
                       tilesafe_random_seed=seed, tilesafe_random_scheme=RANDOM_SCHEME)
    done = root / "config.json"
    if done.is_file() and json.loads(done.read_text()) == config_json:
        return root  # (written last: a complete checkpoint)
    np_dtype = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
                "float32": np.float32}.get(dtype)
    if np_dtype is None:
        raise ArgumentError(f"dtype {dtype!r}: random checkpoints are bfloat16, float16 or "
                            "float32")
    shapes = list(weight_shapes(config))
    total = directory_bytes(shapes, np.dtype(np_dtype).itemsize)
    return write_checkpoint(root, config_json,
                            random_weights(shapes, np_dtype, seed=seed, std=RANDOM_STD,
                                           is_norm=is_norm, workers=workers),
                            total_bytes=total, shard_bytes=shard_bytes, progress=progress)
