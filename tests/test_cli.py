"""The command line: ``tilesafe info`` and ``tilesafe demo``; a reader that closes the output
early (``tilesafe info | head -1``) ends any command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tilesafe.cli import main


def test_info_reports_version_devices_and_gpu_status(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "tilesafe 0.1.0" in out and "devices  cpu" in out and "gpu " in out
    assert "launches through " in out


def test_demo_prints_a_correct_result(capsys):
    assert main(["demo", "--n", "5000", "--tile", "256"]) == 0
    out = capsys.readouterr().out
    assert "correct: True" in out and "device: " in out and "time" in out


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "tilesafe", "info"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "tilesafe" in proc.stdout


def test_default_device_needs_a_gpu_that_can_compile(monkeypatch):
    """cuda:0 is the default only when a GPU is present and tileiras is usable; a GPU without
    the assembler keeps the interpreter as the default."""
    from tilesafe.driver import device
    monkeypatch.delenv("TILESAFE_DEVICE", raising=False)
    for compiles, expected in ((False, "cpu"), (True, "cuda:0")):
        probe = device.GpuProbe(True, ("cuda:0",), "1 CUDA device(s)", compiles=compiles)
        monkeypatch.setattr(device, "probe_gpu", lambda probe=probe: probe)
        assert device.default_device().name == expected


EXAMPLE = str(Path(__file__).parent.parent / "examples" / "vector_add.py")


@pytest.mark.parametrize("argv", [["info"], ["check", EXAMPLE]],
                         ids=["info", "check"])
def test_a_closed_stdout_ends_quietly(argv):
    """``tilesafe info | head -1``: the reader is gone before the command writes; no
    BrokenPipeError traceback (for every command; argparse's own --help already ignores a
    failed write), and a status that says the output was cut short."""
    proc = subprocess.Popen([sys.executable, "-m", "tilesafe", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # before the interpreter has even imported tilesafe
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert proc.returncode != 0
