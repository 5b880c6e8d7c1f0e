"""The command line: ``tilesafe info`` and ``tilesafe demo``."""

from __future__ import annotations

import subprocess
import sys

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
