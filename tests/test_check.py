"""``tilesafe check``: compiles every kernel of a file without a GPU and reports errors with
their location."""

from __future__ import annotations

import textwrap

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
    assert "skipped unbound" in out and "no binding for shape name 'S'" in out


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
