"""Fast unit tests of the trial journal (memopt/run/journal.py) and of what it stores:
``TrialResult`` records (memopt/core/trial.py) and ``JournaledRunner`` (memopt/run/trials.py),
with a FAKE inner runner that returns results built here instead of running ORTModule steps."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.results import trial_result

from memopt.backends.ort.config import ConfigEntry, OptimizationType
from memopt.backends.ort.trials import (
    REUSABLE_STATUSES,
    JournaledRunner,
    StackVersions,
    TrialSpec,
    config_key,
    reusable,
    trial_key,
)
from memopt.core import RunStatus, parse_runnable
from memopt.core.trial import Outcome, TrialResult
from memopt.errors import DamagedRecord
from memopt.run import JOURNAL_NAME, Journal, RunSettings, parse_budget
from memopt.run.journal import journaled_trial

VERSIONS = StackVersions("1.19.2", "onnxruntime-training-cpu", "2.4.1", cuda=False)
MiB = 2**20


def result(status: str = "ok", peak: int | None = 500 * MiB, **changes: object) -> TrialResult:
    """A trial result as a runner would return it (outcome from the status, no budget yet)."""
    values: dict[str, object] = {
        "key": "from-the-runner",
        "target": parse_runnable("gpt"),
        "options": {"size": "tiny"},
        "batch_size": 4,
        "config": ("Gelu+:1:-1",),
        "config_value": "/runs/t/memopt_config.json",
        "outcome": Outcome(status) if status in {o.value for o in Outcome} else Outcome.CRASHED,
        "status": RunStatus.read(status),
        "run_dir": "/runs/t",
        "steps": 2,
        "device": "cpu",
        "memory_kind": "rss",
        "static_bytes": 100 * MiB,
        "peak_bytes": peak,
        "step_times_s": (2.0, 0.1, 0.3),
        "median_step_s": 0.2,
        "plans_on": ("Gelu+:1:-1",),
        "plans_seen": 3,
        "predicted_peak_bytes": 450 * MiB,
        "config_warnings": ("a warning",),
        "finished_at": 1700000000.0,
    }
    values.update(changes)
    return trial_result(**values)


def spec(batch: int = 4, config: tuple[ConfigEntry, ...] = (), **settings: Any) -> TrialSpec:
    """A trial of the tiny GPT; ``settings``: its ``RunSettings`` other than these."""
    run = RunSettings(**{"target": parse_runnable("gpt"), "options": {"size": "tiny"}, **settings})
    return TrialSpec(run, batch, config)


class FakeInner:
    """A FAKE trial runner: returns the scripted results in turn, their run folders in ``runs``
    (the journal's, as a real runner's are), and counts its calls."""

    def __init__(self, runs: Path, *results: TrialResult) -> None:
        self.results = [replace(result, run_dir=str(runs / "t")) for result in results]
        self.calls: list[TrialSpec] = []

    def __call__(
        self, spec: TrialSpec, *, budget_bytes: int | None, predicted_peak_bytes: int | None, cancel: threading.Event
    ) -> TrialResult:
        self.calls.append(spec)
        return self.results[min(len(self.calls), len(self.results)) - 1]


def run(runner: JournaledRunner, trial: TrialSpec, budget_bytes: int | None = None, predicted: int | None = None):
    return runner(trial, budget_bytes=budget_bytes, predicted_peak_bytes=predicted, cancel=threading.Event())


# The journal file


def test_appended_record_comes_back_as_latest(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "deep" / "journal.jsonl")  # missing folders are made
    journal.append({"key": "a", "status": "ok", "peak": 1})
    entry = journal.latest("a")
    assert entry is not None
    assert (entry.line_number, entry.key, dict(entry.record)) == (1, "a", {"key": "a", "status": "ok", "peak": 1})
    assert journal.path.read_text().endswith("\n")


def test_in_folder_names_the_journal_file(tmp_path: Path) -> None:
    assert Journal.in_folder(tmp_path).path == tmp_path / JOURNAL_NAME


def test_missing_journal_has_no_entries(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "none.jsonl")
    assert list(journal.entries()) == []
    assert journal.latest("a") is None


def test_record_without_key_is_refused(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    with pytest.raises(ValueError, match="key"):
        journal.append({"status": "ok"})
    assert not journal.path.exists()


def test_entries_are_oldest_first_and_latest_is_the_newest_with_the_key(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    for number, key in enumerate(("a", "b", "a", "c")):
        journal.append({"key": key, "n": number})
    assert [(e.line_number, e.key) for e in journal.entries()] == [(1, "a"), (2, "b"), (3, "a"), (4, "c")]
    newest = journal.latest("a")
    assert newest is not None and newest.record["n"] == 2 and newest.line_number == 3
    assert journal.latest("d") is None


def test_latest_with_usable_statuses_skips_other_statuses(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append({"key": "a", "status": "ok", "n": 1})
    journal.append({"key": "a", "status": "out_of_memory", "n": 2})
    journal.append({"key": "a", "status": "crashed", "n": 3})
    journal.append({"key": "a", "n": 4})  # no status at all
    assert journal.latest("a").record["n"] == 4  # type: ignore[union-attr]
    assert journal.latest("a", REUSABLE_STATUSES).record["n"] == 2  # type: ignore[union-attr]
    assert journal.latest("a", ("ok",)).record["n"] == 1  # type: ignore[union-attr]
    assert journal.latest("a", ("timed_out",)) is None
    assert journal.latest("a", ()) is None


def test_unreadable_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text(
        "\n".join(
            [
                '{"key": "a", "n": 1}',
                "not json at all",
                "",
                '["a", "list"]',
                '{"no_key": 1}',
                '{"key": 7}',  # a key that is not a string
                '{"key": "b", "n": 2}',
            ]
        )
        + "\n"
    )
    with pytest.warns(DamagedRecord) as said:
        entries = list(Journal(path).entries())
    assert [(e.line_number, e.key) for e in entries] == [(1, "a"), (7, "b")]
    # Each line that holds no record is said; the blank one is no record at all.
    assert sorted(int(str(w.message).split(" line ")[1].split(":")[0]) for w in said) == [2, 4, 5, 6]


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append({"key": "a", "status": "ok"})
    with open(journal.path, "a") as handle:
        handle.write('{"key": "b", "status": "o')  # the writer died mid-line
    assert [e.key for e in journal.entries()] == ["a"]
    assert journal.latest("b") is None


def test_complete_last_line_without_newline_is_also_skipped(tmp_path: Path) -> None:
    """A line counts only once its newline is written, even if its JSON is whole."""
    path = tmp_path / "j.jsonl"
    path.write_text('{"key": "a"}\n{"key": "b"}')
    assert [e.key for e in Journal(path).entries()] == ["a"]


def test_record_appended_after_a_torn_line_is_kept(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append({"key": "a", "status": "ok"})
    with open(journal.path, "a") as handle:
        handle.write('{"key": "b", "sta')
    journal.append({"key": "c", "status": "ok"})
    assert [e.key for e in journal.entries()] == ["a", "c"]


def test_records_are_written_as_sorted_compact_json(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append({"z": 1, "key": "a", "path": tmp_path})  # default=str: a Path is written as text
    assert (
        journal.path.read_text()
        == json.dumps({"key": "a", "path": str(tmp_path), "z": 1}, sort_keys=True, separators=(",", ":")) + "\n"
    )


# TrialResult records


def read_back(record: Mapping[str, Any]) -> TrialResult:
    trial = TrialResult.from_record(record, "test journal line")
    assert trial is not None
    return trial


def test_record_round_trip_through_json_keeps_every_field_and_the_enum() -> None:
    original = result(peak=900 * MiB).judged(800 * MiB)
    record = json.loads(json.dumps(original.to_record()))
    assert record["outcome"] == "over_budget"
    assert record["prediction_error"] == pytest.approx(original.prediction_error)
    back = read_back(record)
    assert back == original
    assert back.outcome is Outcome.OVER_BUDGET
    assert isinstance(back.config, tuple) and isinstance(back.step_times_s, tuple)
    assert isinstance(back.plans_on, tuple) and isinstance(back.config_warnings, tuple)


def test_every_field_of_a_trial_and_its_memory_is_journaled_flat_and_read_back() -> None:
    original = result(
        "out_of_memory",
        memory_kind="cuda_allocated",
        peak_over_run_bytes=600 * MiB,
        cuda_reserved_bytes=700 * MiB,
        cuda_outside_bytes=10 * MiB,
        cuda_alloc_retries=1,
        cuda_ooms=1,
        exit_peak_bytes=650 * MiB,
        cuda_total_memory=8000 * MiB,
        cuda_device_name="a card",
        cuda_pool=({"small": False, "blocks": [(2 * MiB, "resident"), (512, "free")]},),
        ort_version="1.19.2",
        torch_version="2.4.1",
        ort_package="onnxruntime-training",
        error="out of memory",
        throughput=20.0,
        plans_off=("Add+:1:-1",),
        recomputed_nodes=12,
        budget_bytes=800 * MiB,
        wall_s=3.5,
        reused=True,
        ranks=({"rank": 0, "pid": 12, "steps": 2, "peak_bytes": 500 * MiB},),
        oom_evidence="CUDA out of memory",
    )
    record = json.loads(json.dumps(original.to_record()))
    assert (record["peak_bytes"], record["cuda_ooms"], record["exit_peak_bytes"]) == (500 * MiB, 1, 650 * MiB)
    assert "memory" not in record and record["recipe"] == "gpt"
    assert read_back(record) == original


def test_from_record_ignores_unknown_fields_and_defaults_missing_ones() -> None:
    record = result().to_record()
    record["added_by_a_newer_memopt"] = 1
    for name in ("config", "plans_on", "outcome"):
        del record[name]
    back = read_back(record)
    assert back.config == () and back.plans_on == ()
    assert back.outcome is Outcome.CRASHED


def test_outcome_is_a_plain_word_in_text_and_json() -> None:
    assert str(Outcome.OUT_OF_MEMORY) == "out_of_memory"
    assert json.dumps(Outcome.OK) == '"ok"'
    assert Outcome.OVER_BUDGET.label == "over budget"
    assert [o for o in Outcome if o.fatal] == [Outcome.RECIPE_ERROR, Outcome.STACK_ERROR]


def test_judged_marks_ok_over_budget_only_when_the_peak_exceeds_it() -> None:
    ok = result(peak=500)
    assert ok.judged(499).outcome is Outcome.OVER_BUDGET
    assert ok.judged(500).outcome is Outcome.OK  # at the budget still fits
    assert ok.judged(None).outcome is Outcome.OK
    assert ok.judged(499).budget_bytes == 499
    assert ok.judged(499).judged(1000).outcome is Outcome.OK  # judged again from the status, not the outcome
    assert result(peak=None).judged(1).outcome is Outcome.OK


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("out_of_memory", Outcome.OUT_OF_MEMORY),
        ("step_error", Outcome.CRASHED),
        ("crashed", Outcome.CRASHED),
        ("timed_out", Outcome.TIMED_OUT),
        ("cancelled", Outcome.CANCELLED),
        ("recipe_error", Outcome.RECIPE_ERROR),
        ("stack_error", Outcome.STACK_ERROR),
        ("something_new", Outcome.CRASHED),
    ],
)
def test_judged_never_marks_a_run_that_did_not_finish_over_budget(status: str, outcome: Outcome) -> None:
    assert result(status, peak=10**12).judged(1).outcome is outcome


def test_prediction_error_is_relative_to_the_measured_peak() -> None:
    assert result(peak=400, predicted_peak_bytes=500).prediction_error == pytest.approx(0.25)
    assert result(peak=None).prediction_error is None
    assert result(peak=0).prediction_error is None
    assert result(predicted_peak_bytes=None).prediction_error is None


# Trial keys


def test_trial_key_depends_on_what_decides_the_outcome() -> None:
    base = trial_key(spec(), VERSIONS)
    assert trial_key(spec(), VERSIONS) == base
    assert trial_key(spec(batch=8), VERSIONS) != base
    assert trial_key(spec(steps=3), VERSIONS) != base
    assert trial_key(spec(options={"size": "small"}), VERSIONS) != base
    assert trial_key(spec(), replace(VERSIONS, ort_version="1.18.0")) != base
    assert trial_key(spec(timeout_s=5.0), VERSIONS) == base  # a timeout does not change a result


def test_config_key_is_what_ort_reads_in_a_canonical_order() -> None:
    gelu = ConfigEntry("Gelu+", OptimizationType.RECOMPUTE)
    cast = ConfigEntry("Cast+", OptimizationType.COMPROMISE)
    gelu_off = ConfigEntry("Gelu+", OptimizationType.DISABLED)
    assert config_key((gelu, cast)) == config_key((cast, gelu)) == ("Cast+:2:-1", "Gelu+:1:-1")
    assert config_key((gelu, gelu_off)) == ()  # the last entry per subgraph wins; disabled is no plan
    assert config_key((gelu_off, gelu)) == ("Gelu+:1:-1",)
    assert trial_key(spec(config=(gelu, cast)), VERSIONS) == trial_key(spec(config=(cast, gelu)), VERSIONS)
    assert trial_key(spec(config=(gelu_off,)), VERSIONS) == trial_key(spec(), VERSIONS)


# JournaledRunner


def test_every_result_is_journaled_under_the_trial_key(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    inner = FakeInner(tmp_path, result(peak=900 * MiB), result("out_of_memory", peak=None))
    runner = JournaledRunner(inner=inner, journal=journal, versions=VERSIONS)
    first = run(runner, spec(), budget_bytes=800 * MiB)
    second = run(runner, spec(batch=8))
    assert first.key == trial_key(spec(), VERSIONS) and second.key == trial_key(spec(batch=8), VERSIONS)
    assert first.outcome is Outcome.OVER_BUDGET and first.budget_bytes == 800 * MiB
    assert [(e.key, e.record["outcome"]) for e in journal.entries()] == [
        (first.key, "over_budget"),
        (second.key, "out_of_memory"),
    ]
    assert read_back(journal.latest(first.key).record) == first  # type: ignore[union-attr,arg-type]
    assert len(inner.calls) == 2


def test_without_resume_a_journaled_trial_runs_again(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    inner = FakeInner(tmp_path, result())
    runner = JournaledRunner(inner=inner, journal=journal, versions=VERSIONS)
    run(runner, spec())
    again = run(runner, spec())
    assert len(inner.calls) == 2 and not again.reused
    assert len(list(journal.entries())) == 2


def test_resume_reuses_the_journaled_result_without_running_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    first = run(JournaledRunner(inner=FakeInner(tmp_path, result()), journal=journal, versions=VERSIONS), spec())
    inner = FakeInner(tmp_path, result(peak=2 * MiB))
    resumed = run(JournaledRunner(inner=inner, journal=journal, versions=VERSIONS, resume=True), spec())
    assert inner.calls == []
    assert resumed.reused
    assert replace(resumed, reused=False) == first
    assert len(list(journal.entries())) == 1  # a reused trial is not journaled again


def test_resume_judges_the_reused_result_against_the_new_budget(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    inner = FakeInner(tmp_path, result(peak=900 * MiB))
    over = run(JournaledRunner(inner=inner, journal=journal, versions=VERSIONS), spec(), 800 * MiB)
    assert over.outcome is Outcome.OVER_BUDGET
    resumed = JournaledRunner(inner=FakeInner(tmp_path), journal=journal, versions=VERSIONS, resume=True)
    fits = run(resumed, spec(), budget_bytes=1000 * MiB, predicted=950 * MiB)
    assert (fits.outcome, fits.budget_bytes, fits.reused) == (Outcome.OK, 1000 * MiB, True)
    assert fits.predicted_peak_bytes == 950 * MiB  # this session's prediction
    kept = run(resumed, spec(), budget_bytes=1000 * MiB)
    assert kept.predicted_peak_bytes == over.predicted_peak_bytes  # none now: the journaled one


def test_resume_only_reuses_the_same_key(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    run(JournaledRunner(inner=FakeInner(tmp_path, result()), journal=journal, versions=VERSIONS), spec())
    inner = FakeInner(tmp_path, result(batch_size=8))
    other = run(JournaledRunner(inner=inner, journal=journal, versions=VERSIONS, resume=True), spec(batch=8))
    assert len(inner.calls) == 1 and not other.reused


@pytest.mark.parametrize("status", ["cancelled", "crashed", "timed_out", "step_error"])
def test_results_that_depend_on_luck_are_journaled_but_not_reused(tmp_path: Path, status: str) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    inner = FakeInner(tmp_path, result(status, peak=None), result())
    runner = JournaledRunner(inner=inner, journal=journal, versions=VERSIONS, resume=True)
    first = run(runner, spec())
    assert first.status == status and not first.reused
    assert journal.latest(first.key).record["status"] == status  # type: ignore[union-attr]
    second = run(runner, spec())
    assert len(inner.calls) == 2 and not second.reused and second.outcome is Outcome.OK
    third = run(runner, spec())  # now the journal holds an ok run: reused
    assert len(inner.calls) == 2 and third.reused


def test_out_of_memory_is_reused_on_resume(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    inner = FakeInner(tmp_path, result("out_of_memory", peak=None, oom_evidence="the kernel's OOM killer ended it"))
    runner = JournaledRunner(inner=inner, journal=journal, versions=VERSIONS, resume=True)
    run(runner, spec())
    again = run(runner, spec())
    assert len(inner.calls) == 1 and again.reused and again.outcome is Outcome.OUT_OF_MEMORY


def test_an_out_of_memory_record_without_evidence_is_run_again(tmp_path: Path) -> None:
    """A journal from a memopt that called any SIGKILL out of memory: that verdict is not reused."""
    journal = Journal(tmp_path / "j.jsonl")
    older = result("out_of_memory", peak=None, run_dir=str(tmp_path / "t"))
    journal.append(replace(older, key=trial_key(spec(), VERSIONS)).to_record())
    inner = FakeInner(tmp_path, result())
    rerun = run(JournaledRunner(inner=inner, journal=journal, versions=VERSIONS, resume=True), spec())
    assert len(inner.calls) == 1 and not rerun.reused and rerun.outcome is Outcome.OK


def test_resume_skips_a_torn_journal_line(tmp_path: Path) -> None:
    """A memopt killed while journaling: the torn record is not reused, the trial runs again."""
    journal = Journal(tmp_path / "j.jsonl")
    line = json.dumps(replace(result(), key=trial_key(spec(), VERSIONS)).to_record())
    journal.path.write_text(line[: len(line) // 2])
    inner = FakeInner(tmp_path, result())
    rerun = run(JournaledRunner(inner=inner, journal=journal, versions=VERSIONS, resume=True), spec())
    assert len(inner.calls) == 1 and not rerun.reused


def test_percentage_budget_judges_a_cuda_trial_against_its_device(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    on_cuda = result(peak=600, device="cuda", cuda_total_memory=1000)
    runner = JournaledRunner(
        inner=FakeInner(tmp_path, on_cuda), journal=journal, versions=VERSIONS, budget=parse_budget("50%")
    )
    judged = run(runner, spec())
    assert (judged.budget_bytes, judged.outcome) == (500, Outcome.OVER_BUDGET)
    explicit = run(runner, spec(), budget_bytes=700)
    assert (explicit.budget_bytes, explicit.outcome) == (700, Outcome.OK)  # budget_bytes wins


def test_percentage_budget_leaves_a_cuda_run_that_died_before_its_first_step_as_it_was(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    died = result("out_of_memory", peak=None, device="cuda", cuda_total_memory=None)
    runner = JournaledRunner(
        inner=FakeInner(tmp_path, died), journal=journal, versions=VERSIONS, budget=parse_budget("80%")
    )
    judged = run(runner, spec())
    assert judged.outcome is Outcome.OUT_OF_MEMORY and judged.budget_bytes is None
    assert [entry.record["outcome"] for entry in journal.entries()] == ["out_of_memory"]


@pytest.mark.parametrize(("field", "word"), [("outcome", "exploded"), ("status", "fine")])
def test_an_unknown_word_in_a_damaged_journal_is_reported_and_skipped(field: str, word: str) -> None:
    record = result().to_record()
    record[field] = word
    with pytest.warns(DamagedRecord, match=rf"test journal line: skipped a damaged trial record \({field}: "):
        assert TrialResult.from_record(record, "test journal line") is None


# An ORT trial's line as the release before this one wrote it (``memopt trial gpt --size tiny
# --batch 2 --steps 2 --runs-dir /tmp/rec-fix/ort --backend ort``, memopt at 6d43241, ORT 1.19.2, CPU).
OLDER_ORT_LINE = (
    '{"at_the_edge":false,"batch_size":2,"binding_phase":"steps","budget_bytes":null,"config":[],"config_value":null,'
    '"config_warnings":[],"cuda_alloc_retries":null,"cuda_device_name":null,"cuda_ooms":null,"cuda_outside_bytes":null,'
    '"cuda_pool":[],"cuda_reserved_bytes":null,"cuda_total_memory":null,"device":"cpu","device_peak_bytes":768278528,'
    '"error":null,"exit_peak_bytes":null,"finished_at":1796578694.3246744,"key":"95915f24fdcbe9eca826",'
    '"median_step_s":0.191090228500002,"memory_kind":"rss","oom_evidence":null,"options":{"size":"tiny"},'
    '"ort_package":"onnxruntime-training-cpu","ort_version":"1.19.2","outcome":"ok","peak_bytes":768278528,'
    '"peak_over_run_bytes":768278528,"plans_off":[],"plans_on":[],"plans_seen":10,"predicted_peak_bytes":null,'
    '"prediction_error":null,"ranks":[],"recipe":"gpt","recomputed_nodes":0,"reused":false,'
    '"run_dir":"/tmp/rec-fix/ort/trial-gpt-b2-20261206-173803","static_bytes":694378496,"status":"ok",'
    '"step_times_s":[2.014428646000056,0.19394501400006448,0.18823544299993955],"steps":2,'
    '"throughput":10.466259921814782,"torch_version":"2.4.1","wall_s":10.78897913100002,'
    '"whole_run_peak_bytes":768278528}'
)


def test_an_ort_line_of_the_release_before_reads_back_as_the_trial_it_ran(tmp_path: Path) -> None:
    older = json.loads(OLDER_ORT_LINE)
    spec_of_it = TrialSpec(RunSettings(target=parse_runnable("gpt"), options={"size": "tiny"}, steps=2), 2, ())
    versions = replace(VERSIONS, ort_version="1.19.2", ort_package="onnxruntime-training-cpu", torch_version="2.4.1")
    assert trial_key(spec_of_it, versions) == older["key"]  # resumed under the same key
    trial = read_back(older)
    assert (trial.batch_size, trial.config, trial.status, trial.outcome, trial.torch) == (
        2,
        (),
        RunStatus.OK,
        Outcome.OK,
        None,
    )
    assert (trial.memory.static_bytes, trial.memory.device_peak, trial.plans_seen) == (694378496, 768278528, 10)
    assert trial.step_times_s == (2.014428646000056, 0.19394501400006448, 0.18823544299993955)
    assert read_back(json.loads(json.dumps(trial.to_record()))) == trial
    # In its journal, its run folder moved along with the runs folder: found there.
    runs = tmp_path / "runs"
    (runs / "trial-gpt-b2-20261206-173803").mkdir(parents=True)
    journal = Journal.in_folder(runs)
    journal.path.write_text(OLDER_ORT_LINE + "\n")
    found = journaled_trial(journal, older["key"], reusable)
    assert found is not None and found.run_dir == str(runs / "trial-gpt-b2-20261206-173803")
    assert replace(found, run_dir=trial.run_dir) == trial
