"""``tune --backend torch --frontier``: memopt's verified policy budget by budget, beside its peers.

The choice of each budget's answer is pure logic (fake runs); the walk itself trains a tiny GPT
in real child processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.cli import assert_one_line_error, memopt

from memopt.backends.torch.frontier import FrontierPoint, Run, answers, budgets_between, inversions
from memopt.cli.frontier import compact
from memopt.core.plan import PlanName

# Four tiny GPT blocks at 64 x 64 tokens: activations a fifth of the peak, so recompute has room to walk.
GPT = ("gpt", "--size", "tiny", "--seq", "64", "-o", "n_layer=4")
BATCH = 64
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(number: int, cost: float, peak: int) -> Run:
    return Run(number, (PlanName(f"blocks.{number}: *"),), peak, 1.0 + cost, cost, f"/runs/{number}")


def _points(limits: list[float], chosen: list[Run | None]) -> list[FrontierPoint]:
    return [FrontierPoint(int(limit), limit, run, None if run else "the floor") for limit, run in zip(limits, chosen)]


@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(50, 150)), min_size=1, max_size=12),
    st.lists(st.integers(40, 160), min_size=2, max_size=10),
)
def test_the_answers_peaks_never_rise_as_the_limit_falls(runs: list[tuple[int, int]], limits: list[int]) -> None:
    measured = [_run(i, float(cost), peak) for i, (cost, peak) in enumerate(runs)]
    falling = sorted((float(limit) for limit in limits), reverse=True)
    chosen = answers(falling, measured)
    assert inversions(_points(falling, chosen)) == 0
    for limit, run in zip(falling, chosen):
        fitting = [r for r in measured if r.peak_bytes <= limit]
        assert (run is None) == (not fitting)  # a budget is answered wherever any run fits it
        if run is not None:
            assert run.peak_bytes <= limit and run.cost_s == min(r.cost_s for r in fitting)


def test_an_inversion_between_two_budgets_own_choices_is_resolved() -> None:
    # Tune at the higher limit chose the dearer run A (90); at the lower one, the cheaper B (95):
    # B fits the higher limit too, so it answers both, and the lower budget's peak no longer rises.
    a, b = _run(1, 2.0, 90), _run(2, 1.0, 95)
    own = _points([100.0, 96.0], [a, b])
    assert inversions(own) == 1
    assert answers([100.0, 96.0], [a, b]) == [b, b]


def test_the_table_names_alike_layers_plans_once() -> None:
    plans = [
        "blocks.3.mlp.act: gelu",
        "blocks.4.mlp.act: gelu",
        "blocks.6.mlp.act: gelu",
        "blocks.0: *",
        "lm_head: chunked-loss",
    ]
    assert compact(plans) == "blocks.{3-4,6}.mlp.act: gelu; blocks.0: *; lm_head: chunked-loss"
    assert compact([]) == "no recompute"


def test_the_budgets_run_from_the_top_to_the_floor() -> None:
    assert budgets_between(1000.0, 700.0, 4) == [1000, 900, 800, 700]


# Two budgets (the top and the floor) keep it to five runs: about a minute on an idle 2-core machine.
@pytest.mark.torch
def test_the_frontier_of_a_tiny_gpt_is_verified_monotone_and_plotted(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = memopt(
        "tune",
        "--backend",
        "torch",
        *GPT,
        "--target-batch",
        str(BATCH),
        "--frontier",
        "--frontier-points",
        "2",
        "--device",
        "cpu",
        "--runs-dir",
        str(runs),
        "--no-tui",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["inversions"] == 0
    points = result["points"]
    assert len(points) == 2 and points[0]["budget_bytes"] > points[-1]["budget_bytes"]
    peaks = [p["peak_bytes"] for p in points if p["verified"]]
    assert peaks and peaks == sorted(peaks, reverse=True)
    journal = (runs / "journal.jsonl").read_text()
    for point in points:
        if point["verified"]:  # a run under the limit, journaled for --resume
            assert point["peak_bytes"] <= point["limit_bytes"] and point["run_dir"] in journal
        else:
            assert point["floor"].startswith(f"the floor at batch {BATCH} is ")
    none, every = result["peers"]
    assert none["name"] == "no recompute" and none["peak_bytes"] >= peaks[0]
    assert every["note"] == "`blocks.*: *`" and every["peak_bytes"] < none["peak_bytes"]
    assert result["compile"].startswith("compile: not measured")
    plot = Path(result["plot"])
    assert plot.parent == runs and plot.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (("--backend", "ort", "--frontier"), "add --backend torch"),
        (("--backend", "torch", "--frontier", "--budget", "1GiB"), "drop --budget"),
        (("--backend", "torch", "--frontier", "--frontier-points", "1"), "at least 2"),
        (("--backend", "torch", "--frontier-points", "4"), "go with --frontier"),
        (("--backend", "torch", "--frontier", "--frontier-plot", "plot.txt"), "name a .png file"),
        (("--backend", "torch", "--frontier", "--frontier-compile", "2"), "fractions in [0, 1]"),
        (("--backend", "torch", "--frontier", "--manual"), "drop --manual"),
    ],
)
def test_bad_frontier_options_give_one_error_line(tmp_path: Path, options: tuple[str, ...], fragment: str) -> None:
    done = memopt("tune", *GPT, "--target-batch", "8", *options, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert_one_line_error(done, fragment)


@pytest.mark.subprocess
def test_an_existing_plot_is_never_replaced(tmp_path: Path) -> None:
    plot = tmp_path / "mine.png"
    plot.write_bytes(b"the user's")
    done = memopt("tune", "--backend", "torch", *GPT, "--target-batch", "8", "--frontier", "--frontier-plot", str(plot))
    assert_one_line_error(done, "exists")
    assert plot.read_bytes() == b"the user's"
