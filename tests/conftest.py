"""Shared fixtures: real ORTModule probes run once per session and reused by the tests.

The helpers the test modules share live in ``tests/support/``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from support import fake_tuning
from support.cli import CliRun, memopt

from memopt.backends.ort.predict import liveness


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def tiny_probe(runs_dir: Path) -> Callable[[str], CliRun]:
    """Real ORTModule probes of the tiny built-in recipes on CPU, each run once per session."""
    done: dict[str, CliRun] = {}

    def get(recipe: str) -> CliRun:
        if recipe not in done:
            run = memopt("probe", recipe, "--size", "tiny", "--batch", "4", "--runs-dir", str(runs_dir))
            assert run.returncode == 0, run.stderr
            done[recipe] = run
        return done[recipe]

    return get


@pytest.fixture(scope="session")
def gpt_probe(tiny_probe: Callable[[str], CliRun]) -> CliRun:
    return tiny_probe("gpt")


@pytest.fixture
def simulate_sample_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tuners over the fake runner play each simulated step of the sample graph once per
    process, not once per tuner (``support.fake_tuning.simulate_once``)."""
    monkeypatch.setattr(liveness, "simulate", fake_tuning.simulate_once)


@pytest.fixture(autouse=True)
def processes_only_where_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that starts a process is marked so (``subprocess``, ``ort`` or ``torch``): ``-m`` then
    selects tests by what they are, and an unmarked test stays in this process."""
    if any(request.node.get_closest_marker(marker) for marker in ("subprocess", "ort", "torch")):
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(
            f"{request.node.nodeid} starts a process: mark it subprocess (ort where ORT runs, torch where torch trains)"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
