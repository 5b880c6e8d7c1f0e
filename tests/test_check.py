"""``tilesafe check``: compiles every kernel of a file without a GPU and reports errors with
their location."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tilesafe.cli import main

GOOD_AND_BAD = textwrap.dedent('''
    import tilesafe as ts
    import tilesafe.core as tc

    @ts.kernel(examples=[{"S": (1024,)}, {"S": (64,)}])
    def scale(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
        z.store(tc.load_tile_like(x, z) * 2.0)

    @ts.kernel
    def writes_input(z: tc.MutTensor[tc.f32, (16, 16)], x: tc.Tensor[tc.f32, (-1, -1)]):
        x.store(tc.load_tile_like(x, z))

    @ts.kernel
    def unbound(z: tc.MutTensor[tc.f32, "S"]):
        z.store(z.load())
''')


def test_check_reports_each_kernel(tmp_path, capsys):
    path = tmp_path / "kernels.py"
    path.write_text(GOOD_AND_BAD)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "ok      scale (example 1)" in out and "ok      scale (example 2)" in out
    assert f"error   writes_input: {path}:11:" in out and "safety rule 2" in out
    assert f"error   unbound: {path}:14: kernel 'unbound' cannot be checked from its " \
           "signature alone: nothing binds shape name 'S'" in out
    assert 'examples=[{"S": (1024,)}]' in out and "--skip-unbound" in out


def test_check_passes_a_clean_file(tmp_path, capsys):
    path = tmp_path / "clean.py"
    path.write_text(GOOD_AND_BAD.split("@ts.kernel\n")[0])
    assert main(["check", str(path)]) == 0
    assert "error" not in capsys.readouterr().out


def test_check_reports_signature_errors_at_import(tmp_path, capsys):
    path = tmp_path / "badsig.py"
    path.write_text("import tilesafe as ts\nimport tilesafe.core as tc\n\n@ts.kernel\n"
                    "def k(z: tc.MutTensor[tc.f32, (-1,)]):\n    pass\n")
    assert main(["check", str(path)]) == 1
    assert f"{path}:5" in capsys.readouterr().out


def test_check_binds_unnamed_runtime_scalars_of_every_type(tmp_path, capsys):
    path = tmp_path / "scalars.py"
    path.write_text(textwrap.dedent('''
        import tilesafe as ts
        import tilesafe.core as tc

        @ts.kernel(examples=[{"S": (64,)}])
        def pick(z: tc.MutTensor[tc.f32, "S"], flag: bool, alpha: float, n: int):
            z.store(tc.where(flag, z.load() * alpha, z.load()))
    '''))
    assert main(["check", str(path)]) == 0, capsys.readouterr().out
    assert "ok      pick" in capsys.readouterr().out


CONST_SHAPES = textwrap.dedent('''
    import tilesafe as ts
    import tilesafe.core as tc

    @ts.kernel
    def rows(z: tc.MutTensor[tc.f32, (1, "BN")], x: tc.Tensor[tc.f32, (-1, -1)],
             BN: tc.Const[int]):
        z.store(tc.load_tile_like(x, z))

    @ts.kernel
    def generic(z: tc.MappedPartitionMut["T", ("BM", "BN"), "M"], BM: tc.Const[int],
                BN: tc.Const[int]):
        for idx in z.iter_indices():
            z.store(z.load(idx), idx)

    @ts.kernel(examples=[{"BN": 64}])
    def bound(z: tc.MutTensor[tc.f32, (1, "BN")], x: tc.Tensor[tc.f32, (-1, -1)],
              BN: tc.Const[int]):
        z.store(tc.load_tile_like(x, z))

    @ts.kernel
    def explicit(z: tc.MutTensor[tc.f32, (8, 8)], x: tc.Tensor[tc.f32, (-1, -1)]):
        z.store(tc.load_tile_like(x, z))
''')


def test_check_reports_kernels_whose_shapes_name_a_const_as_unbound(tmp_path, capsys):
    """A tc.Const named in a MutTensor's or a mapped partition's shape, with no example to bind
    it, fails the check with the examples=[...] to give (it used to raise KeyError)."""
    path = tmp_path / "consts.py"
    path.write_text(CONST_SHAPES)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "KeyError" not in out and "Traceback" not in out
    assert f"error   rows: {path}:6: kernel 'rows' cannot be checked from its signature " \
           "alone: nothing binds tc.Const 'BN'" in out
    assert '@ts.kernel(examples=[{"BN": 64}])' in out
    assert "nothing binds dtype name 'T', tc.Const 'BM', tc.Const 'BN', shape name 'M'" in out
    assert '{"T": ts.float32, "BM": 64, "BN": 64, "M": (1, 1)}' in out
    assert "ok      bound (example 1): " in out and "ok      explicit: " in out


def test_check_skip_unbound_reports_them_as_skipped(tmp_path, capsys):
    path = tmp_path / "consts.py"
    path.write_text(CONST_SHAPES)
    assert main(["check", str(path), "--skip-unbound"]) == 0
    out = capsys.readouterr().out
    assert "skipped rows: " in out and "skipped generic: " in out and "error" not in out
    assert "ok      bound (example 1): " in out and "ok      explicit: " in out


def test_check_an_example_that_does_not_fit_is_a_failure(tmp_path, capsys):
    """An example missing a name, of a tile shape that cannot be launched, or of a dtype that
    does not exist fails its kernel (no traceback); --skip-unbound does not skip it."""
    path = tmp_path / "examples.py"
    path.write_text(textwrap.dedent('''
        import tilesafe as ts
        import tilesafe.core as tc

        @ts.kernel(examples=[{"S": (64,)}, {"S": (100,), "T": "f32"}, {},
                             {"S": (64,), "T": "f33"}, {"S": (64,), "T": "f32"}])
        def scale(z: tc.MutTensor["T", "S"]):
            z.store(z.load())
    '''))
    assert main(["check", str(path), "--skip-unbound"]) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out
    assert "error   scale (example 1): " in out and "nothing binds dtype name 'T'" in out
    assert "error   scale (example 2): " in out and "(100,)" in out
    assert "error   scale (example 3): " in out and "shape name 'S'" in out
    assert "error   scale (example 4): " in out and "f33" in out
    assert "ok      scale (example 5): " in out


def test_check_of_a_missing_file_is_one_line_and_status_2(tmp_path, capsys):
    missing = tmp_path / "missing.py"
    assert main(["check", str(missing)]) == 2
    out, err = capsys.readouterr()
    lines = (out + err).strip().splitlines()
    assert lines == [f"error: {missing}: no such file"], lines
    assert main(["check", str(tmp_path)]) == 2
    assert "is not a file" in capsys.readouterr().out


def test_check_of_a_file_that_fails_to_import_names_its_line(tmp_path, capsys):
    path = tmp_path / "broken.py"
    path.write_text("import tilesafe as ts\n\nvalue = 1 / 0\n")
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"error: {path}:3: importing the file raised ZeroDivisionError: "
                   "division by zero"], out


def test_check_passes_the_examples_with_skip_unbound(capsys):
    """The example scripts check clean: every kernel binds or, lacking examples=, is skipped."""
    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))
    assert examples
    for path in examples:
        assert main(["check", str(path), "--skip-unbound"]) == 0, capsys.readouterr().out
        out = capsys.readouterr().out
        assert "error" not in out and "Traceback" not in out


EXTENT_NAMES = textwrap.dedent('''
    import tilesafe as ts
    import tilesafe.core as tc

    @ts.kernel(examples=[{"BM": 4, "D": 64}, {"BM": 8, "D": 32}])
    def blocks(z: tc.MutTensor[tc.f32, ("BM", "D")], x: tc.Tensor[tc.f32, (-1, "D")]):
        z.store(tc.zeros((BM, D), tc.f32) + tc.load_tile_like(x, z))

    @ts.kernel(examples=[{"M": 16, "K": 32}])
    def rows(z: tc.MutTensor[tc.f32, (1, "K")], x: tc.Tensor[tc.f16, ("M", "K")]):
        z.store(tc.load_tile_like(x, z).astype(tc.f32) * M)

    @ts.kernel(examples=[{"BM": 4, "D": "64"}])
    def not_an_extent(z: tc.MutTensor[tc.f32, ("BM", "D")]):
        z.store(z.load())
''')


def test_check_binds_extent_names_from_the_examples(tmp_path, capsys):
    """Extent names (an output's ("BM", "D"), an input's ("M", "K")) that are no tc.Const
    parameter are bound by the examples like any other name, and compile with their values."""
    path = tmp_path / "extents.py"
    path.write_text(EXTENT_NAMES)
    assert main(["check", str(path), "--target", "sm_90"]) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out
    assert "ok      blocks (example 1): " in out and "ok      blocks (example 2): " in out
    assert "ok      rows (example 1): " in out and "cubin" in out
    assert "error   not_an_extent (example 1): " in out
    assert "binds extent name 'D' to '64', not a positive int" in out
