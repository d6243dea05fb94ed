"""Fast unit tests of the TUI's pure parts, with no Textual app: the state (tui/state.py,
``memopt.tui.state``) and the Rich renderables of the memory panel (tui/render.py)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memopt.backends.ort import OptimizationType, PlanKey, plan_keys
from memopt.core import RunStatus, parse_runnable
from memopt.core.memory import Memory
from memopt.core.plan import PlanName
from memopt.core.trial import Outcome, TrialResult
from memopt.tui.render import gauge, trials_chart
from memopt.tui.state import SORT_KEYS, Selection, plan_cells, short_plans, sort_rows, trial_cells
from memopt.tune import PlanRow, Purpose, TrialRecord

MiB = 2**20
GiB = 2**30


def row(key: str, saving: float = 0.0, cost: float = 0.0, frequency: int = 1, **changes: object) -> PlanRow:
    values: dict[str, object] = {
        "key": PlanKey(key),  # as ORT's tuner builds its rows
        "subgraph": key.split(":")[0],
        "kind": OptimizationType.RECOMPUTE.label,
        "frequency": frequency,
        "saving_bytes": saving,
        "effective_bytes": saving,
        "cost_s": cost,
        "modules": (),
        "counts_honoured": False,
    }
    values.update(changes)
    return PlanRow(**values)  # type: ignore[arg-type]


def trial(
    number: int = 1,
    *,
    purpose: Purpose = Purpose.SEARCH,
    plans: tuple[str, ...] = ("Gelu+:1:-1",),
    predicted: float | None = None,
    peak: int | None = 512 * MiB,
    step_s: float | None = 0.25,
    outcome: Outcome = Outcome.OK,
    batch: int = 16,
    reused: bool = False,
) -> TrialRecord:
    result = TrialResult(
        key=f"k{number}",
        target=parse_runnable("gpt"),
        options={},
        batch_size=batch,
        config=plans,
        config_value=None,
        outcome=outcome,
        status=RunStatus.OK if outcome in (Outcome.OK, Outcome.OVER_BUDGET) else RunStatus(outcome.value),
        run_dir="/runs/t",
        steps=2,
        memory=Memory(peak_bytes=peak),
        median_step_s=step_s,
        reused=reused,
    )
    return TrialRecord(number, purpose, plan_keys(plans), predicted, "because", result)  # as ORT's tuner does


def render(renderable: object, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


# Selection


def test_toggle_switches_a_plan_on_then_off() -> None:
    selection = Selection()
    assert selection.toggle("A+:1:-1") is True
    assert "A+:1:-1" in selection
    assert selection.toggle("A+:1:-1") is False
    assert "A+:1:-1" not in selection
    assert selection.plans == ()


def test_selection_keeps_the_order_plans_were_switched_on() -> None:
    selection = Selection()
    for key in ("C", "A", "B"):
        selection.toggle(key)
    selection.toggle("A")
    selection.toggle("A")  # switched on again: now last
    assert selection.plans == ("C", "B", "A")
    assert isinstance(selection.plans, tuple)


def test_set_replaces_the_selection_without_duplicates_in_first_order() -> None:
    selection = Selection(["X"])
    selection.set(iter(["B", "A", "B", "C", "A"]))
    assert selection.plans == ("B", "A", "C")
    assert "X" not in selection
    selection.set([])
    assert selection.plans == ()


def test_selections_do_not_share_their_keys() -> None:
    first, second = Selection(), Selection()
    first.toggle("A")
    assert second.plans == ()


# Sorting


ROWS = (
    row("B+:1:-1", saving=300, cost=0.002, frequency=4),
    row("A+:1:-1", saving=300, cost=0.010, frequency=1),
    row("D+:2:-1", saving=900, cost=0.001, frequency=4),
    row("C+:1:-1", saving=100, cost=0.010, frequency=12),
)


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ("saving", ["D+:2:-1", "A+:1:-1", "B+:1:-1", "C+:1:-1"]),  # most saved first, ties by key
        ("cost", ["A+:1:-1", "C+:1:-1", "B+:1:-1", "D+:2:-1"]),  # costliest first
        ("freq", ["C+:1:-1", "B+:1:-1", "D+:2:-1", "A+:1:-1"]),  # most frequent first
        ("name", ["A+:1:-1", "B+:1:-1", "C+:1:-1", "D+:2:-1"]),
    ],
)
def test_sort_rows_by_each_key(by: str, expected: list[str]) -> None:
    assert [r.key for r in sort_rows(ROWS, by)] == expected


def test_every_sort_key_the_table_offers_is_handled() -> None:
    assert [key for _, key in SORT_KEYS] == ["saving", "cost", "freq", "name"]
    for _, key in SORT_KEYS:
        assert sorted(r.key for r in sort_rows(ROWS, key)) == sorted(r.key for r in ROWS)


def test_unknown_sort_key_sorts_by_saving_and_input_is_untouched() -> None:
    rows = list(ROWS)
    assert sort_rows(rows, "nonsense") == sort_rows(rows, "saving")
    assert rows == list(ROWS)
    assert sort_rows([], "cost") == []


# Cells


def test_plan_cells_of_a_plan_switched_off() -> None:
    cells = plan_cells(
        row("Gelu+:1:-1", saving=3 * MiB, cost=0.0123, frequency=6, modules=("h.0.mlp", "h.1.mlp")), False
    )
    assert cells == ("off", "3.0 MiB", "0.012 s", "Gelu+", "6", "recompute", "h.0.mlp, h.1.mlp")


def test_plan_cells_on_say_all_occurrences_unless_ort_honours_counts() -> None:
    plan = row("Cast+:2:-1", saving=512, frequency=3, kind=OptimizationType.COMPROMISE.label)
    assert plan_cells(plan, True)[0] == "on (all)"
    assert plan_cells(row("Cast+:2:-1", frequency=3, counts_honoured=True), True)[0] == "on ×3"
    assert plan_cells(row("Cast+:2:-1", frequency=3, counts_honoured=True), False)[0] == "off"
    assert plan_cells(plan, True)[1:] == ("512 B", "0.000 s", "Cast+", "3", "compromise", "-")


def test_a_plan_without_a_shorter_form_shows_as_its_back_end_names_it() -> None:
    torch_plan = PlanName("blocks.*.mlp.act: gelu")
    assert short_plans((torch_plan, PlanKey("Gelu+:1:-1"))) == "blocks.*.mlp.act: gelu, Gelu+"


def test_trial_cells_of_a_measured_trial_with_a_prediction() -> None:
    record = trial(7, plans=("Gelu+:1:-1", "Cast+:2:-1"), predicted=1.1 * GiB, peak=GiB, step_s=0.256)
    assert trial_cells(record) == (
        "7",
        "search",
        "16",
        "Gelu+, Cast+:2:-1",
        "ok",
        "1.0 GiB",
        "1.1 GiB (+10.0%)",
        "0.26 s",
    )


def test_trial_cells_of_a_trial_that_measured_nothing() -> None:
    record = trial(2, purpose=Purpose.CALIBRATION, plans=(), peak=None, step_s=None, outcome=Outcome.OUT_OF_MEMORY)
    assert trial_cells(record) == ("2", "calibration", "16", "no config", "out of memory", "-", "-", "-")


def test_trial_cells_show_a_prediction_without_a_peak_and_a_reused_trial() -> None:
    record = trial(3, purpose=Purpose.MANUAL, predicted=2 * GiB, peak=None, outcome=Outcome.OVER_BUDGET, reused=True)
    cells = trial_cells(record)
    assert cells[1] == "manual"
    assert cells[4] == "over budget (journal)"
    assert cells[5:7] == ("-", "2.0 GiB")  # no error percentage without a measured peak


def test_trial_cells_show_a_negative_prediction_error_with_its_sign() -> None:
    assert trial_cells(trial(predicted=900, peak=1000))[6] == "900 B (-10.0%)"


def test_short_plans_leaves_off_the_common_suffix_only() -> None:
    # ORT's keys, as its tuner hands them to the views: each says its own short form
    assert short_plans(plan_keys(["Gelu+:1:-1", "Cast+:2:-1", "Add+:1:3"])) == "Gelu+, Cast+:2:-1, Add+:1:3"
    assert short_plans(()) == "no config"
    assert short_plans(iter(plan_keys(["X+:1:-1"]))) == "X+"


# Renderables


def test_gauge_that_fits_shows_the_prediction_budget_and_baseline() -> None:
    text = gauge(predicted=2 * GiB, baseline=3 * GiB, budget=4 * GiB, limit=3.6 * GiB, width=40)
    assert isinstance(text, Text)
    header, bar = text.plain.split("\n")
    assert header == "predicted 2.0 GiB of budget 4.0 GiB fits  (no config 3.0 GiB)"
    assert len(bar) == 40
    assert bar.count("│") == 1
    # Scale: 1.05 × the largest of the three; 2/4.2 of 40 columns are filled, the budget at 4/4.2.
    assert bar.index("│") == round(40 * 4 / 4.2)
    assert bar.count("█") == round(40 * 2 / 4.2)
    assert bar.rstrip("·│").count("·") == 0  # filled from the left


@pytest.mark.parametrize(
    ("predicted", "verdict"),
    [(3.0, "fits"), (3.7, "tight: inside the safety margin"), (4.0, "tight: inside the safety margin"), (4.5, "OVER")],
)
def test_gauge_verdict_against_limit_and_budget(predicted: float, verdict: str) -> None:
    text = gauge(predicted=predicted * GiB, baseline=GiB, budget=4 * GiB, limit=3.6 * GiB, width=30)
    assert text.plain.split("\n")[0].split(" GiB ", 2)[2].startswith(verdict)
    assert len(text.plain.split("\n")[1]) == 30


def test_gauge_over_budget_fills_past_the_budget_line() -> None:
    bar = gauge(predicted=8 * GiB, baseline=GiB, budget=4 * GiB, limit=4 * GiB, width=40).plain.split("\n")[1]
    mark = bar.index("│")
    assert set(bar[:mark]) == {"█"} and "█" in bar[mark + 1 :]


def test_gauge_is_never_narrower_than_four_columns_nor_breaks_on_zero() -> None:
    bar = gauge(predicted=0, baseline=0, budget=0, limit=0, width=1).plain.split("\n")[1]
    assert bar == "···│"


def test_trials_chart_without_measured_trials_says_so() -> None:
    for records in ([], [trial(peak=None), trial(2, peak=0)]):
        chart = trials_chart(records, budget=GiB, width=60)
        assert isinstance(chart, Text) and chart.plain.startswith("no trials yet")


def test_trials_chart_has_one_row_per_measured_trial_up_to_the_last_eight() -> None:
    records = [trial(n, peak=n * 100 * MiB) for n in range(1, 11)] + [trial(11, peak=None)]
    chart = trials_chart(records, budget=GiB, width=60)
    assert isinstance(chart, Table)
    assert chart.row_count == 8
    lines = render(chart).splitlines()
    assert [line.split()[0] for line in lines] == [f"#{n}" for n in range(3, 11)]


def test_trials_chart_rows_show_label_bar_peak_and_step_time() -> None:
    records = [
        trial(1, purpose=Purpose.CALIBRATION, peak=256 * MiB, step_s=0.5),
        trial(2, peak=2 * GiB, step_s=None),  # over the budget
    ]
    chart = trials_chart(records, budget=GiB, width=50)
    lines = render(chart, width=80).splitlines()
    assert len(lines) == 2
    first, second = lines
    assert first.split()[0] == "#1c" and first.rstrip().endswith("256.0 MiB 0.50s")
    assert second.split()[0] == "#2" and second.rstrip().endswith("2.0 GiB     -")
    bars = [line.split()[1] for line in lines]
    assert all(len(bar) == 50 - 26 and bar.count("│") == 1 for bar in bars)
    assert bars[0].index("│") == bars[1].index("│")  # one scale for every row
    assert bars[1].count("█") > bars[0].count("█")
