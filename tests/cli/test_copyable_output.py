"""Output a user copies from: every ORT config entry stays whole on one line, at any
terminal width, piped (as here: the command's output is a pipe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import memopt

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
GRAPH = ROOT / "sample_logs" / "graphs" / "1.19.2" / "gpt.onnx"
LOG = ROOT / "sample_logs" / "1.19.2" / "bert-config-devinfo.log"


def _lines_holding_whole(output: str, entries: list[str]) -> None:
    lines = output.splitlines()
    for entry in entries:
        assert any(f" {entry} " in f" {line} " for line in lines), (entry, output)


@pytest.mark.parametrize("columns", ["80", "60"])
def test_scan_keeps_every_config_entry_on_one_line(columns: str) -> None:
    plans = json.loads(memopt("scan", str(GRAPH), "--batch", "8", "--seq", "512", "--json").stdout)["plans"]
    entries = [plan["config"] for plan in plans]
    assert "FusedMatMul+Add+Split+Reshape+Transpose+:1:-1" in entries
    run = memopt("scan", str(GRAPH), "--batch", "8", "--seq", "512", env={"COLUMNS": columns})
    assert run.returncode == 0, run.stderr
    _lines_holding_whole(run.stdout, entries)
    # the other columns stay: the figures whole, the modules folded
    assert "40.0 MiB" in run.stdout and "Where" in run.stdout


def test_parse_keeps_every_config_entry_on_one_line() -> None:
    run = memopt("parse", str(LOG), env={"COLUMNS": "80"})
    assert run.returncode == 0, run.stderr
    _lines_holding_whole(
        run.stdout, ["FusedMatMul+Unsqueeze+Unsqueeze+Cast+Sub+Mul+Add+Softmax+:1:-1", "LayerNormalization+:1:-1"]
    )
