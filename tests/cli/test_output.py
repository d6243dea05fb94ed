"""Text from logs, recipes and ORT reaches the terminal as is: never read as rich markup; and
stdout, which scripts read, holds the result alone."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO

import pytest
from rich.console import Console

from memopt.backends.ort import OrtVersion
from memopt.backends.ort.trials import parse_trial_config
from memopt.cli.show import print_trial
from memopt.core import RunStatus, parse_target
from memopt.core.trial import Outcome, TrialResult

ERROR = "make_batch() ran out of memory: RuntimeError: [enforce fail at alloc_cpu.cpp:117] err == 0 [/x] [bold]"


def test_a_trial_error_with_brackets_is_printed_as_is() -> None:
    result = TrialResult(
        key="k",
        target=parse_target("my[/x]recipe.py"),
        options={"tag": "[red]"},
        batch_size=2,
        config=(),
        config_value=None,
        outcome=Outcome.OUT_OF_MEMORY,
        status=RunStatus.OUT_OF_MEMORY,
        run_dir="runs/[b]trial",
        steps=2,
        device="cpu",
        error=ERROR,
    )
    buffer = StringIO()
    print_trial(result, Console(file=buffer, width=400, color_system=None))
    text = buffer.getvalue()
    assert ERROR in text and "my[/x]recipe.py" in text and "tag=[red]" in text and "runs/[b]trial" in text


def test_a_config_string_longer_than_a_file_name_is_read_as_a_config() -> None:
    keys = [f"Plan{n}+Add+Softmax+Where+FusedMatMul+Reshape+:1:-1" for n in range(11)]
    text = ",".join(keys)
    assert len(text) > 255
    parsed = parse_trial_config(text, OrtVersion.parse("1.19.2"))
    assert [str(entry) for entry in parsed.entries] == keys


_C_PRINTS_DURING_THE_WORK = """
import ctypes
from memopt.cli.show import stdout_kept_for_the_result
with stdout_kept_for_the_result():
    ctypes.CDLL(None).printf(b"HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();\\n")
print('{"status": "verified"}')
"""


@pytest.mark.subprocess
def test_what_c_code_prints_during_the_work_goes_to_stderr_and_the_result_to_stdout() -> None:
    # C's printf, as scipy's HiGHS prints its stray line, with both streams piped: stdio then
    # buffers it, and without the flush it reached stdout at exit, after the result.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", _C_PRINTS_DURING_THE_WORK], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"status": "verified"}\n'
    assert "tmpSolver.run();" in done.stderr
