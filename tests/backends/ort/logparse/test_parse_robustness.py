"""``memopt parse`` on hostile text: nothing raises, nothing is read as markup, one bad log
does not stop the others; and ORTModule's per-step memory lines."""

from __future__ import annotations

import csv
import io
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import memopt as run_memopt
from support.logsamples import FORMAT_A_1_15, FORMAT_B_1_17, PLAIN_LOG, PLAN_TABLE_1_19, SAMPLE_LOGS
from typer.testing import CliRunner

import memopt.cli.parse  # noqa: F401  (registers the command)
from memopt.backends.ort.logparse import parse_file, parse_lines, parse_text, plans_dataframe, step_memory_dataframe
from memopt.cli import app
from memopt.errors import MemoptError

PHASES = ("pre_forward", "post_forward", "pre_backward", "post_backward")


def ort_step_memory_line(rank: int, step: int, phase: str, figures: list[int], world_size: int | None = None) -> str:
    """A per-step memory line as ORT builds it: 1.17-1.18 ``MemoryObserver.inspect_memory``
    (``[rank/world]``, no module sizes), 1.19 ``log_memory_usage`` (``rank-N``, module sizes)."""
    names = ["allocated", "max allocated", "cached", "max cached", "inactive", "max inactive"]
    if world_size is None:
        names += ["param", "grad", "buffer"]
    head = f"rank-{rank}" if world_size is None else f"[{rank}/{world_size}]"
    line = f"{head} step {step} memory (MiB)"
    for name, value in [("phase", phase), *zip(names, map(str, figures))]:
        line += f" | {name}: {value}"
    return line


def invoke(*args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(app, ["parse", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr if result.stderr_bytes is not None else ""


# --- per-step memory lines -------------------------------------------------------------


def test_step_memory_lines_of_both_forms() -> None:
    lines = [
        "2024-05-01 10:00:00,000 orttraining.rank-0 [INFO] - "
        + ort_step_memory_line(0, step, phase, [10 * step, 12 * step, 20, 20, 0, 1, 400, 0, 1])
        for step in (0, 1)
        for phase in PHASES
    ]
    lines.append("[rank1]:" + ort_step_memory_line(1, 2, "post_backward", [5, 6, 7, 8, 0, 0], world_size=2))
    result = parse_lines(["noise", *lines, "more noise"])
    assert not result.warnings
    assert len(result.step_memory) == 9
    first = result.step_memory[0]
    assert (first.line_number, first.rank, first.world_size, first.step, first.phase) == (2, 0, None, 0, "pre_forward")
    assert (first.allocated_mib, first.max_allocated_mib, first.cached_mib, first.param_mib, first.buffer_mib) == (
        0,
        0,
        20,
        400,
        1,
    )
    last = result.step_memory[-1]
    assert (last.stream, last.rank, last.world_size, last.step, last.max_cached_mib, last.param_mib) == (
        "rank1",
        1,
        2,
        2,
        8,
        None,
    )
    frame = step_memory_dataframe(result)
    assert list(frame["max_allocated_mib"])[:4] == [0, 0, 0, 0] and frame["rank"].tolist()[-1] == 1


def test_damaged_step_memory_figures_are_unknown_with_a_warning() -> None:
    line = ort_step_memory_line(0, 3, "pre_forward", [1, 2, 3, 4, 5, 6, 7, 8, 9]).replace(": 2 |", ": ²² |")
    line = line.replace("step 3", "step " + "9" * 5000)
    (record,) = parse_lines([line]).step_memory
    assert record.step is None and record.max_allocated_mib is None and record.cached_mib == 3
    (warning,) = parse_lines([line]).warnings
    assert "line 1" in warning and "step" in warning and "max allocated" in warning


# --- hostile text in report lines -----------------------------------------------------------

PLAN_ROW = " - Plan 1            :  OFF  :  FusedMatMul+Add+:1:-1                          4     67,108,864         16384.0*ids_dim0*ids_dim1"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("16384.0*ids_dim0", "1e400*ids_dim0"),
        ("16384.0*ids_dim0*ids_dim1", "1" + "**1" * 3000),
        ("16384.0*ids_dim0*ids_dim1", "+".join(["ids_dim0"] * 2000)),
        ("16384.0*ids_dim0*ids_dim1", "(" * 5000 + "1" + ")" * 5000),
        ("67,108,864", "9" * 5000),
        ("67,108,864", "999,999,999,999,999,999,999"),
        ("     4     ", "     ²     "),
        ("     4     ", "     " + "9" * 5000 + "     "),
        ("Plan 1 ", "Plan " + "1" * 5000 + " "),
    ],
)
def test_unreadable_plan_cells_become_warnings(old: str, new: str) -> None:
    text = PLAN_TABLE_1_19.replace(PLAN_ROW, PLAN_ROW.replace(old, new, 1))
    assert text != PLAN_TABLE_1_19
    result = parse_text(text)
    assert result.summaries and len(result.summaries[0].plans) >= 7
    plans_dataframe(result)  # no Int64 overflow
    json.dumps([str(plan.saving_symbolic) for plan in result.summaries[0].plans])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Frequency:6", "Frequency:" + "9" * 5000),
        ("requested_count=2", "requested_count=" + "9" * 30),
        ("x 64 x", "x " + "9" * 5000 + " x"),
    ],
)
def test_unreadable_format_a_figures_are_unknown(old: str, new: str) -> None:
    result = parse_text(FORMAT_A_1_15.replace(old, new, 1))
    (summary,) = result.summaries
    assert len(summary.plans) == 3


def test_unreadable_insight_figures_are_unknown() -> None:
    text = FORMAT_B_1_17.replace("byte/elem: 4", "byte/elem: " + "4" * 5000, 1)
    result = parse_text(text)
    assert result.summaries and any("unreadable figure" in warning for warning in result.warnings)


def test_line_ends_and_chunk_boundaries_read_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import memopt.backends.ort.logparse.reader as reader

    source = PLAIN_LOG.read_bytes()
    expected = parse_file(PLAIN_LOG)
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 997)
    for name, data in {
        "lf": source,
        "crlf": source.replace(b"\n", b"\r\n"),
        "cr": source.replace(b"\n", b"\r"),
    }.items():
        path = tmp_path / f"{name}.log"
        path.write_bytes(data.rstrip(b"\r\n"))
        result = parse_file(path)
        assert result.lines_read == expected.lines_read, name
        assert [s.first_line for s in result.summaries] == [s.first_line for s in expected.summaries], name
        assert result.summaries[0].plans == expected.summaries[0].plans, name


# --- the command line ----------------------------------------------------------------------


@pytest.mark.subprocess
def test_markup_in_a_log_is_printed_as_text(tmp_path: Path) -> None:
    log = tmp_path / "markup[red].log"
    log.write_text(PLAN_TABLE_1_19.replace("FusedMatMul+Add+:1:-1", "[/x][enforce fail at alloc_cpu.cpp:117]:1:-1", 1))
    run = run_memopt("parse", str(log))
    assert run.returncode == 0, run.stderr
    assert "markup[red].log" in run.stdout and "[/x][enforce fail at alloc_cpu.cpp:117]:1:-1" in run.stdout
    log.write_text(PLAN_TABLE_1_19.replace("FusedMatMul+Add+:1:-1", "[/x][red]Fused+:1:-1", 1))
    run = run_memopt("parse", str(log), "-e", "1", "--ort-version", "1.18")
    assert run.returncode == 0, run.stderr
    assert "export ORTMODULE_MEMORY_OPT_CONFIG='[/x][red]Fused+:1:-1'" in run.stdout


def test_one_bad_log_does_not_stop_the_others(tmp_path: Path) -> None:
    missing = tmp_path / "missing.log"
    empty = tmp_path / "empty.log"
    empty.write_text("")
    code, stdout, stderr = invoke(str(missing), str(PLAIN_LOG), str(empty))
    assert code == 2
    assert "Gelu+:1:-1" in stdout
    assert f"error: {missing}: cannot read" in stderr and f"error: {empty}: {empty} is empty" in stderr
    code, stdout, _ = invoke(str(missing), str(PLAIN_LOG), "--json")
    assert code == 2
    good, bad = json.loads(stdout)
    assert good["summaries"] and bad["source"] == str(missing) and "cannot read" in bad["error"]


@pytest.mark.subprocess
def test_step_memory_table_json_and_csv(tmp_path: Path) -> None:
    log = tmp_path / "cuda.log"
    lines = [ort_step_memory_line(0, 1, phase, [10, 12, 20, 20, 0, 0, 400, 0, 1]) for phase in PHASES]
    log.write_text(PLAN_TABLE_1_19 + "\n".join(lines) + "\n")
    run = run_memopt("parse", str(log))
    assert run.returncode == 0 and "per-step memory (MiB)" in run.stdout and "post_backward" in run.stdout
    code, stdout, _ = invoke(str(log), "--json")
    (document,) = json.loads(stdout)
    assert [record["phase"] for record in document["step_memory"]] == list(PHASES)
    assert document["step_memory"][0]["max_allocated_mib"] == 12
    code, stdout, _ = invoke(str(log), "--csv")
    plans, memory = stdout.split("\n\n")
    assert len(list(csv.DictReader(io.StringIO(plans)))) == 8
    rows = list(csv.DictReader(io.StringIO(memory)))
    assert [row["phase"] for row in rows] == list(PHASES) and rows[0]["param_mib"] == "400"
    only_memory = tmp_path / "only-memory.log"
    only_memory.write_text("\n".join(lines) + "\n")
    assert invoke(str(only_memory))[0] == 0


# A real log of every release, mutated at random; every output mode must finish with exit
# status 0 (parsed) or 2 (a one-line error), whatever the text.
_REAL = [path.read_text(errors="replace").splitlines() for path in sorted(SAMPLE_LOGS.glob("*/*-info.log"))[::4]]
_HOSTILE = ("9" * 5000, "1e400*d0", "²", "1" + "**1" * 2000, "+".join(["a"] * 2000), "[/x]", "[bold]", "\x1b[1m")


def _mutant(rng: random.Random, mutations: int) -> str:
    lines = list(rng.choice(_REAL))
    reports = [i for i, line in enumerate(lines) if "Plan" in line or "Summary" in line or "Memory Optimizer" in line]
    for _ in range(mutations):
        index = rng.choice(reports) if reports and rng.random() < 0.7 else rng.randrange(len(lines))
        words = lines[index].split(" ")
        operation = rng.randrange(4)
        if operation == 0:
            words[rng.randrange(len(words))] = rng.choice(_HOSTILE)
        elif operation == 1:
            words = words[: rng.randrange(len(words) + 1)]
        elif operation == 2:
            words.insert(rng.randrange(len(words) + 1), rng.choice("|:=()*,%[]-+x0²"))
        else:
            words = ["[rank1]:", *words]
        lines[index] = " ".join(words)
    return "\n".join(lines) + "\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(1, 20), st.sampled_from([(), ("--json",), ("--csv",)]))
def test_mutated_real_logs_through_the_cli(rng: random.Random, mutations: int, mode: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "mutant.log"
        log.write_text(_mutant(rng, mutations))
        result = CliRunner().invoke(app, ["parse", str(log), *mode])
    assert result.exception is None or isinstance(result.exception, (SystemExit, MemoptError)), result.exception
    if mode == ("--json",) and result.exit_code == 0:
        json.loads(result.stdout)


@pytest.mark.parametrize("mode", [(), ("--json",), ("--csv",)])
@pytest.mark.subprocess
def test_mutated_logs_as_real_subprocesses(tmp_path: Path, mode: tuple[str, ...]) -> None:
    rng = random.Random(len(mode) * 7 + len("".join(mode)))
    logs = []
    for index in range(3):
        path = tmp_path / f"mutant-{index}.log"
        path.write_text(_mutant(rng, 15))
        logs.append(str(path))
    completed = subprocess.run(
        [sys.executable, "-m", "memopt", "parse", *logs, *mode], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode in (0, 2), completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize("value", ["²", "-5", "0", "9" * 5000])
def test_dims_must_be_sizes(value: str) -> None:
    with pytest.raises(MemoptError, match="--dims"):
        invoke(str(PLAIN_LOG), "--dims", f"input_ids_dim0={value}")
