"""The command line: ``tilesafe info`` and ``tilesafe demo``."""

from __future__ import annotations

import subprocess
import sys

from tilesafe.cli import main


def test_info_reports_version_devices_and_gpu_status(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "tilesafe 0.1.0" in out and "devices  cpu" in out and "gpu " in out


def test_demo_prints_a_correct_result(capsys):
    assert main(["demo", "--n", "5000", "--tile", "256"]) == 0
    out = capsys.readouterr().out
    assert "correct: True" in out and "device: " in out and "time" in out


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "tilesafe", "info"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "tilesafe" in proc.stdout
