"""``memopt parse`` and ``memopt config`` as a user runs them: a subprocess, exit codes, one-line errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.logsamples import FORMAT_A_1_15, PLAIN_LOG, SAMPLE_LOGS_1_19

pytestmark = pytest.mark.subprocess

CONFIG_LOG = SAMPLE_LOGS_1_19 / "gpt-tiny_b4_devinfo_json-config.log"


def memopt(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [sys.executable, "-m", "memopt", *args],
        input=None if stdin is None else stdin,
        capture_output=True,
        cwd=cwd,
        timeout=120,
    )
    return subprocess.CompletedProcess(
        completed.args, completed.returncode, completed.stdout.decode(), completed.stderr.decode()
    )


def _assert_clean_error(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert words in result.stderr
    assert result.stderr.strip().startswith("error:")


def test_table_evaluates_at_user_dims_and_enables_plans(tmp_path: Path) -> None:
    out = tmp_path / "cfg.json"
    result = memopt(
        "parse", str(CONFIG_LOG), "--dims", "input_ids_dim0=16", "-e", "1", "-e", "Gelu+", "--config-out", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert "1,048,576" in result.stdout  # 2048.0*16*32
    assert json.loads(out.read_text()) == ["FusedMatMul+Add+:1:-1", "Gelu+:1:-1"]
    assert f"export ORTMODULE_MEMORY_OPT_CONFIG={out}" in result.stdout
    again = memopt("parse", str(CONFIG_LOG), "-e", "1", "--config-out", str(out))
    _assert_clean_error(again, "exists")


def test_json_and_csv_outputs() -> None:
    result = memopt("parse", str(PLAIN_LOG), "--json", "--dims", "input_ids_dim0=8")
    assert result.returncode == 0, result.stderr
    (document,) = json.loads(result.stdout)
    plans = document["summaries"][0]["plans"]
    assert plans[0]["saving_symbolic"] == "2048.0*input_ids_dim0*input_ids_dim1"
    assert plans[0]["saving_at_dims"] == 2048 * 8 * 32 and plans[0]["max_saving_bytes"] == 262144
    rows = list(csv.DictReader(io.StringIO(memopt("parse", str(PLAIN_LOG), "--csv").stdout)))
    assert len(rows) == 10 and rows[0]["subgraph"] == "FusedMatMul+Add+"


def test_stdin_and_string_config_for_older_releases() -> None:
    result = memopt("parse", "-", "-e", "BiasGelu+Cast+Cast+", stdin=FORMAT_A_1_15.encode())
    assert result.returncode == 0, result.stderr
    assert "export ORTMODULE_MEMORY_OPT_CONFIG=BiasGelu+Cast+Cast+:1:-1" in result.stdout


@pytest.mark.parametrize(
    ("args", "stdin", "words"),
    [
        (["parse", "/nonexistent.log"], None, "cannot read"),
        (["parse", str(SAMPLE_LOGS_1_19 / "gpt-tiny_b4_info_bad-config-json-object.log")], None, "type must be array"),
        (["parse", "-"], b"\x00\x01binary\xff" * 100, "binary"),
        (["parse", "-"], b"just some text\n", "no memory-optimizer summary"),
        (["parse", str(PLAIN_LOG), "--dims", "input_ids_dim0"], None, "--dims"),
        (["parse", str(PLAIN_LOG), "-e", "99"], None, "matches no plan"),
        (["config", "check", "X+:2:-1", "--ort-version", "1.16"], None, "type 2"),
        (["config", "check", "X+:1:-1", "--ort-version", "1.19"], None, "JSON file path"),
        (["config", "check", "X+:1:-1"], None, "--ort-version"),
        (["config", "emit", "X+:1", "--ort-version", "1.18"], None, "field"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], stdin: bytes | None, words: str) -> None:
    _assert_clean_error(memopt(*args, stdin=stdin), words)


def test_config_check_and_emit(tmp_path: Path) -> None:
    check = memopt("config", "check", "Gelu+:1:2, Nope+:1:-1", "--log", str(PLAIN_LOG), "--ort-version", "1.18")
    assert check.returncode == 0, check.stderr
    assert "partial counts" in check.stdout and "does not trim" in check.stdout
    assert "export ORTMODULE_MEMORY_OPT_CONFIG='Gelu+:1:2, Nope+:1:-1'" in check.stdout
    out = tmp_path / "c.json"
    emit = memopt("config", "emit", "Gelu+", "Add+:1:-1", "--log", str(PLAIN_LOG), "--out", str(out))
    assert emit.returncode == 0, emit.stderr
    assert json.loads(out.read_text()) == ["Gelu+:1:-1", "Add+:1:-1"]
    recheck = memopt("config", "check", str(out), "--ort-version", "1.19")
    assert recheck.returncode == 0 and "accepts" in recheck.stdout
