"""Configs memopt writes are taken by the real ORT releases they are written for.

1.19.2 is the installed release (and tests/backends/ort/test_trials.py runs configs on it); the older
releases run where sample_logs/capture.py has unpacked and built them (its cache,
~/.cache/memopt/ort, with one ``python-<release>`` wrapper each). Where a release is
absent (a fresh CI machine) its case is skipped.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from support.cli import memopt

from memopt.backends.ort.logparse import parse_file

pytestmark = pytest.mark.ort  # real ORTModule runs or ORT sessions

CACHE = Path(os.environ.get("MEMOPT_ORT_CACHE", Path.home() / ".cache" / "memopt" / "ort"))
PLANS = ("FusedMatMul+Add+:1:-1", "Gelu+:1:-1", "LayerNormalization+:1:-1")


@pytest.mark.parametrize("release", ["1.17.3", "1.18.0", "1.19.2"])
def test_emitted_config_is_applied_by_the_release(release: str, tmp_path: Path) -> None:
    python: list[str] = []
    if release != "1.19.2":
        cached = CACHE / f"python-{release}"
        if not cached.is_file():
            pytest.skip(f"ORT {release} is not unpacked here (run sample_logs/capture.py --versions {release})")
        # The cached wrapper's PYTHONPATH with this interpreter: the one capture.py ran with may be gone.
        wrapper = tmp_path / cached.name
        lines = [line for line in cached.read_text().splitlines() if not line.startswith("exec ")]
        wrapper.write_text("\n".join([*lines, f'exec {shlex.quote(sys.executable)} "$@"']) + "\n")
        wrapper.chmod(0o755)
        python = ["--python", str(wrapper)]
    out = ["--out", str(tmp_path / "cfg.json")] if release == "1.19.2" else []  # 1.19 reads a JSON file
    emitted = memopt("config", "emit", *PLANS, "--ort-version", release, *out)
    assert emitted.returncode == 0, emitted.stderr
    export = next(line for line in emitted.stdout.splitlines() if line.startswith("export "))
    value = shlex.split(export.split("=", 1)[1])[0]
    run = memopt(
        "probe",
        "gpt",
        "--size",
        "tiny",
        "--batch",
        "4",
        "--steps",
        "1",
        "--runs-dir",
        str(tmp_path),
        *python,
        env={"ORTMODULE_MEMORY_OPT_CONFIG": value},
    )
    assert run.returncode == 0, run.stderr
    (summary,) = [s for s in parse_file(run.log_path).summaries if s.plans]
    assert summary.memory_optimizer_on
    assert {plan.key for plan in summary.plans if plan.enabled} == set(PLANS)
