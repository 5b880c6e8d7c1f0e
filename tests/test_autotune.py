"""``ts.autotune``: the config a call uses (cpu, memory, disk store, shipped table, tuning),
the full key results are filed under, the kernel form and ``tilesafe tune``. Nothing is timed:
tuning runs go through a fake timing strategy that runs every op on the interpreter and
reports made-up times."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe import autotune as at
from tilesafe._callsite import caller_location
from tilesafe.autotune import keys, store, timing
from tilesafe.cli import main as cli_main

ROWS, HIDDEN = 5, 12          # odd sizes: the row tile and the column tile both pad
BLOCK = 16                    # the power of two covering HIDDEN


@ts.kernel
def scale_rows(z: tc.MutTensor[tc.f32, ("R", "N")], x: tc.Tensor[tc.f32, (-1, -1)],
               factor: float):
    z.store(tc.load_tile_like(x, z) * factor)


@ts.kernel
def accumulate(z: tc.MutTensor[tc.f32, ("R", "N")], x: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(z.load() + tc.load_tile_like(x, z))


@ts.kernel
def row_sums(z: tc.MutTensor[tc.f32, (1, 1)], x: tc.Tensor[tc.f32, (-1, -1)],
             CHUNK: tc.Const[int]):
    row, _, _ = tc.get_tile_block_id()
    chunks = x.partition((1, CHUNK))
    total = tc.zeros((1, CHUNK), tc.f32)
    for k in range(chunks.num_tiles(1)):
        total = total + chunks.load((row, k))
    z.store(tc.reduce_sum(total, 1, keepdims=True))


@ts.kernel
def lookup_rows(z: tc.MutTensor[tc.f32, ("R", "N")], x: tc.Tensor[tc.f32, (-1, -1)],
                ids: tc.Tensor[tc.i32, (-1,)]):
    i, _, _ = tc.get_tile_block_id()
    rows = ids.partition((R,)).load(i, padding=0)
    cols = tc.minimum(tc.arange(N, tc.i32), x.shape[1] - 1)
    z.store(tc.gather(x, rows.reshape((R, 1)), cols.reshape((1, N))))  # (a checked read)


CONFIGS = [{"rows": 1}, {"rows": 2}, {"rows": 4}]


def make_scale(configs=CONFIGS, **options):
    """A new tuned launch (same name and source every time, as in a new process)."""
    @ts.autotune(configs=configs, key=lambda x, out, factor: (x.shape[1], x.dtype.name),
                 kernels=(scale_rows,), **options)
    def launch_scale(x, out, factor, *, config):
        return scale_rows(ts.borrow_mut(out).partition((config["rows"], BLOCK)), x, factor)
    return launch_scale


def make_accumulate():
    @ts.autotune(configs=CONFIGS, key=["x"], kernels=(accumulate,), mutates=("acc",))
    def launch_accumulate(acc, x, *, config):
        return accumulate(ts.borrow_mut(acc).partition((config["rows"], BLOCK)), x)
    return launch_accumulate


class FakeTiming(timing.Timing):
    """Pretends every device is a GPU: runs each timed op on the interpreter (so a failing
    config fails as it would) and reports ``times[config["rows"]]`` milliseconds."""

    def __init__(self, times, arch="sm_90", name="Fake GPU 80GB"):
        self.times, self.arch, self.name = times, arch, name
        self.timed: list = []

    def can_time(self, device):
        return True

    def describe(self, device):
        return self.arch, self.name

    def stream(self, device):
        return ts.Stream(device)

    def time_runs(self, config, make_op, stream, runs):
        self.timed.append(dict(config))
        for _ in range(runs):
            make_op().sync_on(stream)
        return self.times[next(iter(config.values()))]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty store and an empty shipped-table directory, tuning on."""
    monkeypatch.setenv("TILESAFE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILESAFE_AUTOTUNE", raising=False)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(store, "SHIPPED_DIR", shipped)
    return tmp_path


@pytest.fixture
def fake(cache, monkeypatch):
    strategy = FakeTiming({1: 3.0, 2: 1.0, 4: 2.0})
    monkeypatch.setattr(timing, "TIMING", strategy)
    return strategy


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, HIDDEN)).astype(np.float32)
    return x, ts.tensor(x).sync()


def scratch(shape=(ROWS, HIDDEN)):
    return ts.empty(shape).sync()


def run_scale(tuned, x):
    out = ts.empty((ROWS, HIDDEN)).sync()
    tuned(x, out, 2.5).sync()
    return out


def stored_entries(cache):
    files = list((cache / "cache" / "autotune").glob("*.json"))
    return {k: v for f in files for k, v in json.loads(f.read_text())["entries"].items()}


# -- the cpu device ----------------------------------------------------------------------------

def test_cpu_uses_the_first_config_and_times_nothing(cache, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("nothing may be timed on the cpu")
    monkeypatch.setattr(timing.TIMING, "time_runs", never)
    tuned = make_scale()
    host, x = inputs()
    assert tuned.config_for(x, scratch(), 2.5) == {"rows": 1}
    out = run_scale(tuned, x)
    np.testing.assert_array_equal(out.numpy(), (host.astype(np.float64) * 2.5).astype(np.float32))
    assert not (cache / "cache" / "autotune").exists()


# -- tuning, storing, reading back ---------------------------------------------------------------

def test_tuning_picks_the_fastest_stores_it_and_a_new_process_reads_it(fake, cache, capsys):
    host, x = inputs()
    out = run_scale(make_scale(), x)
    np.testing.assert_array_equal(out.numpy(), (host.astype(np.float64) * 2.5).astype(np.float32))
    assert {c["rows"] for c in fake.timed} == {1, 2, 4}
    message = capsys.readouterr().err
    assert "tilesafe: tuned" in message and "launch_scale" in message
    assert "config 1 {'rows': 2}" in message and "Fake GPU 80GB" in message
    (entry,) = stored_entries(cache).values()
    assert entry["index"] == 1 and entry["config"] == {"rows": 2}
    assert entry["full_key"]["key"] == [HIDDEN, "float32"]
    assert entry["full_key"]["device"] == "Fake GPU 80GB"

    fake.timed.clear()
    again = make_scale()                        # a new Tuned object: memory is empty
    assert again.config_for(x, scratch(), 2.5) == {"rows": 2}
    assert fake.timed == []                     # read from the store, nothing timed
    assert capsys.readouterr().err == ""


def test_the_winner_is_kept_in_memory_per_key(fake):
    tuned = make_scale()
    _, x = inputs()
    assert tuned.config_for(x, scratch(), 2.5) == {"rows": 2}
    count = len(fake.timed)
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 2}
    assert len(fake.timed) == count
    wide = ts.tensor(np.ones((3, 7), np.float32)).sync()  # another key: tuned again
    assert tuned.config_for(wide, scratch((3, 7)), 1.0) == {"rows": 2}
    assert len(fake.timed) > count


def test_a_single_config_is_used_without_timing_or_storing(fake, cache, capsys):
    tuned = make_scale(configs=[{"rows": 4}])
    x_np, x = inputs()
    out = run_scale(tuned, x)
    assert fake.timed == [] and stored_entries(cache) == {}
    assert capsys.readouterr().err == ""
    assert np.allclose(out.numpy(), 2.5 * x_np)


def test_a_failing_config_is_skipped(fake, capsys):
    fake.times[3] = 0.5                          # the fastest, but rows=3 is no power of two
    tuned = make_scale(configs=[{"rows": 1}, {"rows": 3}, {"rows": 2}])
    host, x = inputs()
    out = run_scale(tuned, x)
    np.testing.assert_array_equal(out.numpy(), (host.astype(np.float64) * 2.5).astype(np.float32))
    assert tuned.config_for(x, scratch(), 2.5) == {"rows": 2}
    assert "1 failed" in capsys.readouterr().err


def test_every_config_failing_is_a_tuning_error(fake):
    fake.times.update({3: 1.0, 5: 1.0})
    tuned = make_scale(configs=[{"rows": 3}, {"rows": 5}])
    _, x = inputs()
    with pytest.raises(ts.TuningError, match=r"tuning .*launch_scale for key \(12, "
                       r"'float32'\): every config failed\n  config 0 \{'rows': 3\}: "
                       r"PartitionError: .*tile dimension 3 is not a power of two\n +fix: partition") as err:
        tuned.config_for(x, scratch(), 2.5)
    assert "config 1 {'rows': 5}" in str(err.value)
    assert "fix: correct the configs" in str(err.value)


def make_lookup(configs=CONFIGS):
    @ts.autotune(configs=configs, key=lambda x, ids, out: x.shape, kernels=(lookup_rows,),
                 mutates=("out",))
    def lookup(x, ids, out, *, config):
        return lookup_rows(ts.borrow_mut(out).partition((config["rows"], BLOCK)), x, ids)
    return lookup


def bad_ids():
    return ts.tensor(np.array([0, 1, ROWS, 2, 3], np.int32)).sync()


def test_arguments_failing_a_run_time_check_raise_that_error_untuned(fake, cache, capsys):
    """An id outside the table fails every config's timing run: the call raises the
    IndexOutOfRangeError an untuned call would (not a TuningError that blames the configs),
    stores nothing, says so, and the same key is tuned by the next call with good ids."""
    lookup = make_lookup()
    host, x = inputs()
    out = scratch()
    with pytest.raises(ts.IndexOutOfRangeError, match=rf"kernel 'lookup_rows'.*gather index "
                       rf"{ROWS} along axis 0 is outside \[0, {ROWS}\)"):
        lookup(x, bad_ids(), out).sync()
    assert {c["rows"] for c in fake.timed} == {1, 2, 4} and stored_entries(cache) == {}
    assert "not tuning" in capsys.readouterr().err
    good = [4, 0, 1, 1, 2]
    lookup(x, ts.tensor(np.array(good, np.int32)).sync(), out).sync()
    assert len(stored_entries(cache)) == 1
    np.testing.assert_array_equal(out.numpy(), host[good])


def test_timing_that_measured_the_host_runs_the_first_config_and_stores_nothing(
        fake, cache, capsys, monkeypatch):
    """Runs that cannot be recorded into a graph are timed as an enqueued chain; when the
    chains of several configs kept the device waiting for the host, their times are the
    host's and cannot rank them: the call runs the first config, nothing is stored, stderr
    says why, and the key is not timed again in this process."""
    calls = []

    def time_runs(config, make_op, stream, runs):
        calls.append(runs)
        for _ in range(runs):
            make_op().sync_on(stream)
        if runs > 1:
            raise timing.HostBound(0.011, 0.010)
        return 0.001  # (a small kernel: each round would run many)
    monkeypatch.setattr(fake, "time_runs", time_runs)
    tuned = make_scale()
    host, x = inputs()
    out = run_scale(tuned, x)
    np.testing.assert_array_equal(out.numpy(), (host.astype(np.float64) * 2.5).astype(np.float32))
    assert tuned.config_for(x, scratch(), 2.5) == {"rows": 1}
    assert stored_entries(cache) == {}
    err = capsys.readouterr().err
    assert "not tuning" in err and "configs [0, 1, 2] kept the device waiting" in err
    assert "out= and workspace=" in err
    timed = len(calls)
    run_scale(tuned, x)
    assert len(calls) == timed  # (the first config again, untimed)


def test_one_config_that_kept_the_device_waiting_is_the_fastest_and_wins(fake, cache,
                                                                          capsys, monkeypatch):
    """Chains of one config kept the device waiting (its device time is below the host's
    enqueueing, which the others' times exceed): it wins and is stored, though its own time
    reads slower; a config that waited in only a minority of rounds (noise) is ranked by its
    times as usual."""
    rounds = {}

    def time_runs(config, make_op, stream, runs):
        for _ in range(runs):
            make_op().sync_on(stream)
        rows = config["rows"]
        if runs > 1:
            rounds[rows] = rounds.get(rows, 0) + 1
            if rows == 4:  # every round: the device waited
                raise timing.HostBound(0.3, 0.3)
            if rows == 1 and rounds[rows] == 1:  # one round of noise
                raise timing.HostBound(0.1, 0.1)
        return {1: 0.2, 2: 0.25, 4: 0.3}[rows] if runs > 1 else 0.001
    monkeypatch.setattr(fake, "time_runs", time_runs)
    host, x = inputs()
    tuned = make_scale()
    run_scale(tuned, x)
    assert tuned.config_for(x, scratch(), 2.5) == {"rows": 4}
    assert len(stored_entries(cache)) == 1 and "config 2 {'rows': 4}" in capsys.readouterr().err


def test_a_chain_is_host_bound_when_the_device_finished_as_the_host_enqueued():
    """The rule :class:`timing.HostBound` applies: a device busy with the chain takes longer
    than the host took to enqueue it; one done within a quarter more of that time waited."""
    assert timing.host_bound(1.0, 1.0) and timing.host_bound(1.2, 1.0)
    assert not timing.host_bound(1.3, 1.0) and not timing.host_bound(5.0, 0.1)


def test_a_host_check_every_config_fails_raises_that_error_untuned(fake, cache, capsys):
    """A launch function that refuses the call's arguments (an ``out=`` of the wrong shape,
    checked on the host before any kernel) refuses them under every config: the call raises
    that ArgumentError, naming the caller's line, as an untuned call would (not a
    TuningError that blames the configs), and nothing is stored."""
    @ts.autotune(configs=CONFIGS, key=lambda x, out, factor: (x.shape[1], x.dtype.name),
                 kernels=(scale_rows,))
    def launch_checked(x, out, factor, *, config):
        if out.shape != x.shape:
            raise ts.ArgumentError(f"out= has shape {out.shape}; this call writes {x.shape}",
                                   caller_location(), hint="allocate out with x's shape")
        return scale_rows(ts.borrow_mut(out).partition((config["rows"], BLOCK)), x, factor)
    _, x = inputs()
    wrong = ts.empty((ROWS, BLOCK // 2), ts.float32).sync()
    with pytest.raises(ts.ArgumentError, match=r"out= has shape") as info:
        launch_checked(x, wrong, 2.5)
    assert info.value.location.file == __file__
    assert {c["rows"] for c in fake.timed} == {1, 2, 4} and stored_entries(cache) == {}
    assert "not tuning" in capsys.readouterr().err


@ts.kernel
def copy_rows_of(z: tc.MutTensor[tc.f32, ("R", "N")], x: tc.Tensor[tc.f32, ("ROWS", -1)],
                 ROWS: tc.Const[int]):
    z.store(tc.load_tile_like(x, z))


def test_a_kernel_refusing_every_configs_constants_is_a_tuning_error(fake):
    """A config whose constants the kernel's signature refuses (an extent that does not fit
    the input: an ExtentMismatchError, a kind of ArgumentError) is the config's error, not
    the call's: with every config refused the call is a TuningError naming them."""
    @ts.autotune(configs=CONFIGS, key=lambda x, out: x.shape)
    def launch_wrong_rows(x, out, *, config):
        return copy_rows_of(ts.borrow_mut(out).partition((config["rows"], BLOCK)), x,
                            ROWS=100 * config["rows"])
    _, x = inputs()
    with pytest.raises(ts.TuningError, match=r"every config failed\n  config 0 "
                       r"\{'rows': 1\}: ExtentMismatchError"):
        launch_wrong_rows(x, scratch())


def test_a_config_error_beside_argument_check_failures_is_still_a_tuning_error(fake):
    """Only when every config failed on the arguments' data does the call fall back: a
    config that fails for itself (a tile of 3 rows) keeps the TuningError, which lists the
    data failures of the others too."""
    fake.times[3] = 1.0
    lookup = make_lookup([{"rows": 3}, {"rows": 1}, {"rows": 2}])
    _, x = inputs()
    with pytest.raises(ts.TuningError, match=r"every config failed\n  config 0 \{'rows': 3\}: "
                       r"PartitionError") as err:
        lookup(x, bad_ids(), scratch()).sync()
    assert "config 1 {'rows': 1}: IndexOutOfRangeError" in str(err.value)


def test_mutated_arguments_are_cloned_for_timing(fake):
    tuned = make_accumulate()
    host, x = inputs()
    start = np.arange(ROWS * HIDDEN, dtype=np.float32).reshape(ROWS, HIDDEN)
    acc = ts.tensor(start).sync()
    tuned(acc, x).sync()
    assert {c["rows"] for c in fake.timed} == {1, 2, 4}       # it was tuned
    want = (start.astype(np.float64) + host).astype(np.float32)
    np.testing.assert_array_equal(acc.numpy(), want)           # added once, not per timing run


def test_lazy_arguments_are_not_timed_and_nothing_is_stored(fake, cache):
    tuned = make_scale()
    host = np.ones((ROWS, HIDDEN), np.float32)
    out = ts.empty((ROWS, HIDDEN)).sync()
    tuned(ts.tensor(host), out, 2.0).sync()                    # x is a DeviceOp not run yet
    np.testing.assert_array_equal(out.numpy(), host * 2)
    assert fake.timed == [] and stored_entries(cache) == {}


class LazyOutput:
    """Like the library's outputs: holds an allocation not made yet."""

    def __init__(self, shape):
        self.value = ts.empty(shape)

    def partition(self, tile):
        value = self.value
        return ts.borrow_mut(value).partition(tile) if isinstance(value, ts.Tensor) else \
            value.partition(tile)


def test_an_output_not_allocated_yet_is_replaced_for_timing(fake):
    @ts.autotune(configs=CONFIGS, key=["x"], kernels=(scale_rows,))
    def launch(x, out, *, config):
        return scale_rows(out.partition((config["rows"], BLOCK)), x, 3.0)
    host, x = inputs(1)
    z, _ = launch(x, LazyOutput((ROWS, HIDDEN))).sync()
    assert {c["rows"] for c in fake.timed} == {1, 2, 4}
    np.testing.assert_array_equal(z.unpartition().numpy(),
                                  (host.astype(np.float64) * 3).astype(np.float32))


def test_tuning_off_uses_the_first_config(fake, cache, monkeypatch):
    monkeypatch.setenv("TILESAFE_AUTOTUNE", "0")
    _, x = inputs()
    assert make_scale().config_for(x, scratch(), 2.5) == {"rows": 1}
    assert fake.timed == [] and stored_entries(cache) == {}


def test_a_disabled_cache_still_tunes_in_memory(fake, cache, monkeypatch):
    monkeypatch.setenv("TILESAFE_CACHE_DIR", "0")
    _, x = inputs()
    assert make_scale().config_for(x, scratch(), 2.5) == {"rows": 2}
    assert not (cache / "cache").exists()


# -- the full key --------------------------------------------------------------------------------

def _key(tuned, arch="sm_90", device="Fake GPU", values=(12, "float32")):
    return tuned.full_key((arch, device), list(values))


def test_every_part_of_the_full_key_changes_it(monkeypatch):
    tuned = make_scale()
    base = _key(tuned)
    assert base == _key(make_scale())                  # the same function, made again
    variants = [_key(tuned, arch="sm_100"), _key(tuned, device="Other GPU"),
                _key(tuned, values=(16, "float32")), _key(tuned, values=(12, "float16"))]

    @ts.kernel
    def scale_rows(z: tc.MutTensor[tc.f32, ("R", "N")], x: tc.Tensor[tc.f32, (-1, -1)],
                   factor: float):
        z.store(tc.load_tile_like(x, z) * factor + 0.0)   # another source
    hinted = ts.kernel(globals()["scale_rows"].fn, hints={"default": {"occupancy": 2}})
    for kernel in (scale_rows, hinted):
        other = make_scale()
        other.kernels = (kernel,)
        variants.append(_key(other))
    monkeypatch.setattr(keys, "toolchain", lambda: {"tilesafe": "0.1.0", "tileiras": "13.5.0"})
    variants.append(_key(make_scale()))
    ids = {keys.entry_id(k) for k in variants}
    assert keys.entry_id(base) not in ids and len(ids) == len(variants)


def test_a_device_function_the_kernel_calls_is_part_of_its_fingerprint():
    text = keys.kernel_fingerprint(uses_helper)
    assert "def helper" in text and "def uses_helper" in text


@ts.function
def helper(t):
    return t * 2.0


@ts.kernel
def uses_helper(z: tc.MutTensor[tc.f32, ("R", "N")], x: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(helper(tc.load_tile_like(x, z)))


def _write(path, entries):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": store.FORMAT, "entries": entries}))


def _entry(key, index, config):
    return {"full_key": key, "index": index, "config": config, "when": "2026-11-24T00:00:00Z"}


def test_a_mismatched_or_tampered_disk_entry_is_ignored(fake, cache):
    tuned = make_scale()
    _, x = inputs()
    wanted = _key(tuned, device=fake.name)
    path = store.file_for(tuned.name)
    stale = dict(wanted, toolchain={"tilesafe": "0.0.1", "tileiras": "13.3.0"})
    # filed under the right id but written for another toolchain (a swapped file)
    _write(path, {keys.entry_id(wanted): _entry(stale, 2, {"rows": 4})})
    assert make_scale().config_for(x, scratch(), 1.0) == {"rows": 2}    # tuned, not the entry
    assert fake.timed


def test_a_matching_disk_entry_is_used(fake, cache):
    tuned = make_scale()
    _, x = inputs()
    wanted = _key(tuned, device=fake.name)
    _write(store.file_for(tuned.name), {keys.entry_id(wanted): _entry(wanted, 2, {"rows": 4})})
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 4}
    assert fake.timed == []


def test_a_stored_config_no_longer_in_the_configs_is_ignored(fake, cache):
    tuned = make_scale()
    _, x = inputs()
    wanted = _key(tuned, device=fake.name)
    _write(store.file_for(tuned.name), {keys.entry_id(wanted): _entry(wanted, 2, {"rows": 8})})
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 2}
    assert fake.timed


def test_a_reordered_config_is_found_by_value(fake, cache):
    tuned = make_scale()
    _, x = inputs()
    wanted = _key(tuned, device=fake.name)
    _write(store.file_for(tuned.name), {keys.entry_id(wanted): _entry(wanted, 0, {"rows": 4})})
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 4}


@pytest.mark.parametrize("text", ["{not json", "[]", '{"format": "other", "entries": {}}',
                                  '{"format": "tilesafe-autotune-v1", "entries": 3}'])
def test_a_corrupt_store_file_is_ignored_and_replaced(fake, cache, text):
    tuned = make_scale()
    path = store.file_for(tuned.name)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    _, x = inputs()
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 2}
    assert len(stored_entries(cache)) == 1


def test_the_shipped_table_is_trusted_for_the_same_arch_on_any_device(fake, cache):
    tuned = make_scale()
    _, x = inputs()
    shipped = _key(tuned, device="NVIDIA H100 80GB HBM3")
    _write(store.SHIPPED_DIR / "sm_90.json",
           {keys.entry_id(shipped): _entry(shipped, 2, {"rows": 4})})
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 4}
    assert fake.timed == []
    fake.arch = "sm_100"                          # another architecture: not trusted
    assert make_scale().config_for(x, scratch(), 1.0) == {"rows": 2}


def test_a_shipped_entry_of_the_calling_device_comes_before_another_devices(fake, cache):
    tuned = make_scale()
    _, x = inputs()
    other = _key(tuned, device="NVIDIA H100 80GB HBM3")
    own = _key(tuned, device=fake.name)
    entries = {keys.entry_id(other): _entry(other, 2, {"rows": 4}),
               keys.entry_id(own): _entry(own, 0, {"rows": 1})}
    for order in (entries, dict(reversed(list(entries.items())))):
        _write(store.SHIPPED_DIR / "sm_90.json", order)
        assert make_scale().config_for(x, scratch(), 1.0) == {"rows": 1}
    fake.name = "NVIDIA H200"                     # a third device: another's entry
    assert make_scale().config_for(x, scratch(), 1.0) in ({"rows": 1}, {"rows": 4})
    assert fake.timed == []


def test_the_disk_store_comes_before_the_shipped_table(fake, cache):
    tuned = make_scale()
    _, x = inputs()
    wanted = _key(tuned, device=fake.name)
    _write(store.SHIPPED_DIR / "sm_90.json", {"a": _entry(wanted, 2, {"rows": 4})})
    _write(store.file_for(tuned.name), {keys.entry_id(wanted): _entry(wanted, 0, {"rows": 1})})
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 1}


def test_the_shipped_sm_90_table_is_a_valid_packaged_table():
    from pathlib import Path
    shipped = Path(ts.__file__).parent / "kernels" / "tuned" / "sm_90.json"
    assert json.loads(shipped.read_text())["format"] == store.FORMAT
    pyproject = Path(__file__).parent.parent / "pyproject.toml"
    assert '"kernels/tuned/*.json"' in pyproject.read_text()


def test_the_toolchain_names_the_package_version_of_pyproject():
    from pathlib import Path
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    assert f'version = "{ts.__version__}"' in pyproject
    assert keys.toolchain()["tilesafe"] == ts.__version__


def test_every_shipped_entry_names_a_library_function_and_one_of_its_configs():
    import importlib
    tuned = {}
    tuned_type = importlib.import_module("tilesafe.autotune").Tuned
    for name in ("matmul", "gemv", "norms", "activations", "embedding", "kv_cache", "attention",
                 "decode_attention", "rope", "sampling"):
        module = importlib.import_module(f"tilesafe.kernels.{name}")
        tuned.update({v.name: v for v in vars(module).values() if isinstance(v, tuned_type)})
    entries = store.read_entries(store.SHIPPED_DIR / "sm_90.json")
    assert entries, "the shipped table is empty"
    for eid, entry in entries.items():
        key = entry["full_key"]
        assert eid == keys.entry_id(key) and key["arch"] == "sm_90"
        function = tuned[key["function"]]
        assert store.usable_index(entry, key, function.configs) is not None, key
        assert function.configs[entry["index"]] == entry["config"], (key, "index")
        # a winner of an older source is never used: an edit of a tuned kernel (or of a device
        # function it calls) must re-tune its entries, or re-key them where the bytecode is
        # unchanged, or the shipped table silently stops saving users the tuning
        assert key["source"] == keys.source_hash(function.fn, function.kernels), (
            f"the shipped entry of {key['function']} {key['key']} was tuned for an older "
            "source of it")


# -- misuse ------------------------------------------------------------------------------------

def test_misuse_is_an_argument_error():
    def fn(x, *, config):
        return None
    with pytest.raises(ts.ArgumentError, match=r"test_autotune.py:\d+: autotune needs a "
                       r"non-empty list of dict configs, got \[\]"):
        ts.autotune(configs=[], key=["x"])(fn)
    with pytest.raises(ts.ArgumentError, match=r"mutates=\['y'\] names no parameter of "):
        ts.autotune(configs=[{}], key=["x"], mutates=("y",))(fn)
    with pytest.raises(ts.ArgumentError, match=r"key names \['y'\], which are not parameters "
                       r"\(they are: \['x'\]\)"):
        ts.autotune(configs=[{}], key=["y"])(fn)
    with pytest.raises(ts.ArgumentError, match=r"key='x' must be a function or a list of "
                       "parameter names"):
        ts.autotune(configs=[{}], key="x")(fn)
    with pytest.raises(ts.ArgumentError, match=r"config \{'BLOCK': 4\} sets \['BLOCK'\], "
                       r"which are not tc.Const parameters of the kernel \(its Consts: "
                       r"\['CHUNK'\]\)"):
        ts.autotune(configs=[{"BLOCK": 4}], key=["x"])(row_sums)


def test_an_unusable_key_value_is_an_argument_error(fake):
    @ts.autotune(configs=[{}], key=lambda x: (object(),))
    def launch(x, *, config):
        return None
    _, x = inputs()
    with pytest.raises(ts.ArgumentError, match="the key of this call is not usable: a object"):
        launch(x)


# -- the kernel form ------------------------------------------------------------------------------

def make_row_sums():
    return ts.autotune(configs=[{"CHUNK": 4}, {"CHUNK": 8},
                                {"CHUNK": 8, "hints": {"default": {"occupancy": 2}}}],
                       key=["x"])(row_sums)


def _sums(tuned, host):
    z = ts.zeros((ROWS, 1)).sync().partition((1, 1))
    z, _ = tuned(z, ts.tensor(host).sync()).sync()
    return z.unpartition().numpy()


def test_the_kernel_form_uses_the_first_config_on_the_cpu(cache):
    tuned = make_row_sums()
    host, _ = inputs(2)
    np.testing.assert_allclose(_sums(tuned, host), host.astype(np.float64).sum(1, keepdims=True),
                               rtol=1e-6, atol=1e-6)
    assert tuned.config_for(ts.zeros((ROWS, 1)).sync().partition((1, 1)),
                            ts.tensor(host).sync()) == {"CHUNK": 4}


def test_the_kernel_form_launches_the_winner_with_its_hints(cache, monkeypatch):
    strategy = FakeTiming({4: 2.0, 8: 1.0})
    strategy.times_of = {}
    picked = []

    def time_runs(config, make_op, stream, runs):
        picked.append(config)
        for _ in range(runs):
            make_op().sync_on(stream)
        return 0.5 if config.get("hints") else strategy.times[config["CHUNK"]]
    monkeypatch.setattr(strategy, "time_runs", time_runs)
    monkeypatch.setattr(timing, "TIMING", strategy)
    tuned = make_row_sums()
    host, x = inputs(3)
    z = ts.zeros((ROWS, 1)).sync()
    before = z.numpy().copy()
    chosen = tuned.config_for(z.partition((1, 1)), x)
    assert chosen == {"CHUNK": 8, "hints": {"default": {"occupancy": 2}}}
    np.testing.assert_array_equal(before, np.zeros((ROWS, 1), np.float32))
    np.testing.assert_allclose(_sums(tuned, host), host.astype(np.float64).sum(1, keepdims=True),
                               rtol=1e-6, atol=1e-6)
    variant = tuned.variant(chosen["hints"])
    assert variant.hints["default"] == {"occupancy": 2} and variant.launch_count >= 1
    assert tuned.variant(dict(chosen["hints"])) is variant     # made once


def test_the_kernel_form_refuses_a_const_the_configs_choose(cache):
    tuned = make_row_sums()
    host, x = inputs()
    with pytest.raises(ts.ArgumentError, match=r"kernel 'row_sums' is tuned: \['CHUNK'\] come "
                       "from its autotune configs and cannot be passed"):
        tuned(ts.zeros((ROWS, 1)).sync().partition((1, 1)), x, CHUNK=4)


# -- events ---------------------------------------------------------------------------------------

def test_events_measure_elapsed_time_on_the_cpu():
    stream = ts.Stream("cpu")
    start = ts.Event(timing=True).record(stream)
    end = ts.Event(timing=True).record(stream)
    assert 0.0 <= start.elapsed_ms(end) < 1000.0
    with pytest.raises(ts.DeviceOpError, match="the start event was made without timing=True"):
        ts.Event().record(stream).elapsed_ms(end)
    with pytest.raises(ts.DeviceOpError, match="the end event was never recorded"):
        start.elapsed_ms(ts.Event(timing=True))


# -- tilesafe tune ---------------------------------------------------------------------------------

def test_the_command_runs_a_tune_function_lists_exports_and_clears(fake, cache, tmp_path,
                                                                   capsys):
    script = tmp_path / "tune_me.py"
    script.write_text(
        "import numpy as np\nimport tilesafe as ts\nimport test_autotune as t\n"
        "def tune(device=None):\n"
        "    x = ts.tensor(np.ones((5, 12), np.float32)).sync()\n"
        "    t.make_scale().config_for(x, t.scratch(), 1.0)\n")
    assert cli_main(["tune", str(script), "--list"]) == 0
    out = capsys.readouterr().out
    assert "launch_scale" in out and "key=[12, 'float32']" in out
    assert "winner=1 {'rows': 2}" in out and "device=Fake GPU 80GB (sm_90)" in out

    table = tmp_path / "sm_90.json"
    assert cli_main(["tune", "--export", str(table), "--arch", "sm_90"]) == 0
    assert "exported 1 result(s) for sm_90" in capsys.readouterr().out
    (entry,) = json.loads(table.read_text())["entries"].values()
    assert entry["config"] == {"rows": 2}
    assert cli_main(["tune", "--export", str(table), "--arch", "sm_100"]) == 0
    assert len(json.loads(table.read_text())["entries"]) == 1   # kept, nothing added

    assert cli_main(["tune", "--clear"]) == 0
    assert "cleared 1 stored result(s)" in capsys.readouterr().out
    assert cli_main(["tune", "--list"]) == 0
    assert "no stored results" in capsys.readouterr().out

    # the exported table is what a user's first call then finds (nothing timed)
    monkeypatched_dir = store.SHIPPED_DIR
    table.replace(monkeypatched_dir / "sm_90.json")
    fake.timed.clear()
    x = ts.tensor(np.ones((5, 12), np.float32)).sync()
    assert make_scale().config_for(x, scratch(), 1.0) == {"rows": 2}
    assert fake.timed == []


def test_the_command_reports_bad_input(cache, tmp_path, capsys):
    assert cli_main(["tune"]) == 2
    assert "nothing to do" in capsys.readouterr().err
    assert cli_main(["tune", str(tmp_path / "missing.py")]) == 2
    assert "cannot import" in capsys.readouterr().err
    assert cli_main(["tune", "--export", str(tmp_path / "t.json")]) == 2
    assert "--export needs --arch" in capsys.readouterr().err
    plain = tmp_path / "plain.py"
    plain.write_text("X = 1\n")
    assert cli_main(["tune", str(plain)]) == 0
    assert "has no tune() function" in capsys.readouterr().out


def test_a_call_while_timing_is_not_ready_uses_the_first_config(fake, cache, monkeypatch):
    monkeypatch.setattr(fake, "ready", lambda device: False)   # e.g. a graph being captured
    _, x = inputs()
    tuned = make_scale()
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 1}
    assert fake.timed == [] and stored_entries(cache) == {}
    monkeypatch.setattr(fake, "ready", lambda device: True)    # not remembered: tuned later
    assert tuned.config_for(x, scratch(), 1.0) == {"rows": 2}


def test_the_cuda_strategy_times_a_chain_of_runs_between_two_events():
    strategy = timing.CudaEventTiming()
    assert not strategy.can_time(ts.Device("cpu"))
    _, x = inputs()
    acc = ts.zeros((ROWS, HIDDEN)).sync()
    before = accumulate.launch_count

    def make_op():
        return accumulate(ts.borrow_mut(acc).partition((2, BLOCK)), x)
    stream = ts.Stream("cpu")             # its events time the host: the same steps, no GPU
    ms = strategy.time_runs({"rows": 2}, make_op, stream, 3)
    # recordable: the 3 runs are a graph, replayed once to instantiate it and once timed
    assert ms >= 0.0 and accumulate.launch_count == before + 6
    want = np.zeros_like(x.numpy())
    for _ in range(6):
        want = want + x.numpy()  # (the same f32 additions, in order)
    np.testing.assert_array_equal(acc.numpy(), want)


def test_runs_that_cannot_be_recorded_are_timed_as_one_chain():
    strategy = timing.CudaEventTiming()
    _, x = inputs()
    before = accumulate.launch_count

    def make_op():  # allocates its output: no graph can hold it
        return accumulate(ts.zeros((ROWS, HIDDEN)).partition((2, BLOCK)), x)
    ms = strategy.time_runs({"rows": 2}, make_op, ts.Stream("cpu"), 1)
    assert ms >= 0.0 and accumulate.launch_count == before + 1
    # a cpu stream runs work as it is enqueued: a chain of runs always waited for the host
    with pytest.raises(timing.HostBound, match="the device took .* ms a run and the host"):
        strategy.time_runs({"rows": 2}, make_op, ts.Stream("cpu"), 3)
    assert accumulate.launch_count == before + 4


def test_a_call_timing_runs_cannot_copy_runs_the_default_copies_nothing_and_tunes_later(
        fake, monkeypatch):
    """``mutates`` names an argument that is None (an in-place call): the call is refused for
    timing before any argument is cloned, runs the first config, and a later call of the same
    key that can be timed is tuned."""
    @ts.autotune(configs=CONFIGS, key=["x"], kernels=(scale_rows,), mutates=("other", "out"))
    def launch(x, other, out, *, config):
        target = out if out is not None else other
        return scale_rows(ts.borrow_mut(target).partition((config["rows"], BLOCK)), x, 1.0)
    clones = []
    real_clone = ts.Tensor.clone
    monkeypatch.setattr(ts.Tensor, "clone", lambda t, *a, **k: clones.append(t) or
                        real_clone(t, *a, **k))
    x, xt = inputs()
    launch(xt, scratch(), None).sync()
    assert clones == [] and fake.timed == []
    launch(xt, scratch(), scratch()).sync()
    assert fake.timed and launch.config_for(xt, scratch(), scratch()) == {"rows": 2}
