"""On CUDA a trial is judged, and the memory model predicts, on what runs out: the caching
allocator's reserved bytes plus the memory outside it. Trial records here are built in this
process (no GPU runs); the journal line below is one the current release wrote."""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from support.results import with_memory

from memopt.backends.ort import OrtVersion
from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.predict.calibration import cuda_setup, observation_of, plan_savings, simulator_for
from memopt.backends.ort.predict.memory_model import MemoryModel, Observation, fit_memory_model
from memopt.backends.ort.scan import scan_graph
from memopt.backends.ort.tune.tuner import _cuda_fields
from memopt.cli.show import print_trial
from memopt.core.memory import Memory
from memopt.core.trial import Outcome, TrialResult
from memopt.cuda_caching import AllocatorSettingsNotModelled, BlockUse, CudaSetup, PoolLayout
from memopt.errors import DamagedRecord, MemoptError
from memopt.tui.state import _peak_cell

MiB = 2**20
GPT = Path(__file__).parents[2] / "sample_logs" / "graphs" / "1.19.2" / "gpt.onnx"

# A CUDA trial as memopt 0.1.0 (before reserved + outside) journaled it: 1000 MiB allocated,
# 1500 MiB reserved, nothing about outside the allocator or retries.
RELEASED_RECORD = (
    '{"batch_size": 8, "binding_phase": "steps", "budget_bytes": null, "config": [], "config_value": null,'
    ' "config_warnings": [], "cuda_device_name": "NVIDIA H100 80GB HBM3", "cuda_reserved_bytes": 1572864000,'
    ' "cuda_total_memory": 85899345920, "device": "cuda", "error": null, "finished_at": 1700000000.0, "key": "k",'
    ' "median_step_s": 0.1, "memory_kind": "cuda_allocated", "oom_evidence": null, "options": {"size": "tiny"},'
    ' "ort_package": null, "ort_version": null, "outcome": "ok", "peak_bytes": 1048576000,'
    ' "peak_over_run_bytes": 1048576000, "plans_off": [], "plans_on": [], "plans_seen": null,'
    ' "predicted_peak_bytes": null, "prediction_error": null, "ranks": [], "recipe": "gpt",'
    ' "recomputed_nodes": null, "reused": false, "run_dir": "/runs/t", "static_bytes": 314572800, "status": "ok",'
    ' "step_times_s": [3.0, 0.1, 0.1], "steps": 2, "throughput": null, "torch_version": null, "wall_s": 0.0,'
    ' "whole_run_peak_bytes": 1048576000}'
)


def released() -> TrialResult:
    trial = TrialResult.from_record(json.loads(RELEASED_RECORD), "journal line 1")
    assert trial is not None
    return trial


def test_a_cuda_trial_journaled_by_the_release_reads_back_and_is_judged_on_reserved() -> None:
    trial = released()
    assert (trial.memory.peak_bytes, trial.memory.cuda_reserved_bytes, trial.memory.cuda_outside_bytes) == (
        1000 * MiB,
        1500 * MiB,
        None,
    )
    # 1000 MiB allocated fit 1200 MiB; the 1500 MiB the allocator reserved do not.
    assert trial.judged(1200 * MiB).outcome is Outcome.OVER_BUDGET
    assert trial.judged(1600 * MiB).outcome is Outcome.OK
    assert trial.predicted_figure_bytes == 1500 * MiB and trial.at_the_edge is None


def test_the_cuda_verdict_adds_what_lives_outside_the_allocator() -> None:
    trial = with_memory(released(), cuda_outside_bytes=500 * MiB)
    assert trial.memory.device_peak == 2000 * MiB
    assert trial.judged(1600 * MiB).outcome is Outcome.OVER_BUDGET
    assert trial.judged(2000 * MiB).outcome is Outcome.OK
    record = trial.judged(2000 * MiB).to_record()
    assert (record["device_peak_bytes"], record["cuda_outside_bytes"]) == (2000 * MiB, 500 * MiB)
    back = TrialResult.from_record(json.loads(json.dumps(record)), "journal line 2")
    assert back is not None and back.memory == trial.memory


def test_a_run_whose_allocator_retried_is_flagged_at_the_edge_and_still_fits() -> None:
    trial = with_memory(released(), cuda_outside_bytes=0, cuda_alloc_retries=2, cuda_ooms=0).judged(1600 * MiB)
    assert trial.outcome is Outcome.OK
    assert trial.at_the_edge is not None and "2 time(s)" in trial.at_the_edge
    assert trial.to_record()["at_the_edge"] is True


def test_on_cpu_the_verdict_is_the_whole_runs_peak_as_before() -> None:
    memory = Memory("rss", 10, 100, 120, None)
    assert memory.device_peak == memory.whole_run_peak == 120
    assert memory.predicted_figure == 100 and not memory.at_the_edge


def test_a_start_up_above_the_steps_is_a_floor_in_the_verdicts_terms() -> None:
    # CPU: the whole run's peak. CUDA: the start-up's allocated peak plus outside the allocator,
    # under the reserved + outside the run was judged on.
    assert Memory("rss", 10, 100, 120).fixed_floor == 120
    assert Memory("rss", 10, 130, 120).fixed_floor is None  # the steps bind
    cuda = Memory("cuda_allocated", 10, 1000 * MiB, 1200 * MiB, 1800 * MiB, 300 * MiB)
    assert (cuda.fixed_floor, cuda.device_peak) == (1500 * MiB, 2100 * MiB)
    assert replace(cuda, peak_over_run_bytes=900 * MiB).fixed_floor is None


def test_ranks_report_their_highest_cuda_figures() -> None:
    ranks = [
        Memory("cuda_allocated", 1, 10, 10, 20, 5, 0, 0),
        Memory("cuda_allocated", 1, 12, 12, 18, 7, 1, 0),
    ]
    highest = Memory.highest(ranks)
    assert (highest.cuda_reserved_bytes, highest.cuda_outside_bytes, highest.cuda_alloc_retries) == (20, 7, 1)


def _gpt_model(setup: CudaSetup, observations: list[Observation]) -> MemoryModel:
    graph = load_graph(GPT)
    report = scan_graph(graph, "1.19.2")
    plans = plan_savings(report, graph)
    simulator = simulator_for(plans, graph, GPT, OrtVersion.parse("1.19.2"), "cuda", setup)
    fixed = {symbol: 64 for symbol in report.symbols if symbol != "batch"}
    return fit_memory_model(observations, plans, ("batch",), fixed, simulator=simulator)


def test_the_cuda_model_predicts_reserved_plus_a_fixed_part_with_outside_kept_apart() -> None:
    observations = [Observation(8, (), 900 * MiB, outside_bytes=400 * MiB)]
    model = _gpt_model(CudaSetup(), observations)
    timeline = model.timeline(8)
    assert timeline.reserved_bytes > timeline.resident_bytes
    # One trial: the fixed part is what it measured beyond the simulated reserved peak.
    assert model.static_bytes == pytest.approx(900 * MiB - timeline.reserved_bytes)
    assert model.peak(8) == pytest.approx(900 * MiB)
    assert model.outside_bytes == 400 * MiB
    assert "outside the allocator 400.0 MiB" in model.describe() and "reserved" in model.describe()
    # Saved and read back, it predicts the same.
    again = MemoryModel.from_json(json.loads(json.dumps(model.to_json())))
    assert (again.peak(16), again.outside_bytes) == (model.peak(16), model.outside_bytes)


def test_a_probes_cuda_figure_keeps_its_outside_part_in_the_fit() -> None:
    # The graph probe is a calibration point too: what ran out, and of it what lived outside
    # the allocator. Counted as 0 outside, it would halve the outside part of two points.
    probe = Memory("cuda_allocated", 300 * MiB, 1000 * MiB, 1000 * MiB, 1500 * MiB, 400 * MiB, 0, 0)
    observation = observation_of(2, (), probe)
    assert (observation.peak_bytes, observation.outside_bytes) == (1900 * MiB, 400 * MiB)
    trial = with_memory(released(), cuda_outside_bytes=420 * MiB)
    model = _gpt_model(CudaSetup(), [observation_of(trial.batch_size, (), trial.memory), observation])
    assert model.outside_bytes == 410 * MiB


def test_a_saved_cuda_model_keeps_the_pool_it_was_simulated_with() -> None:
    trial = replace(released(), cuda_pool=({"small": False, "blocks": [[6 * MiB, "resident"], [14 * MiB, "free"]]},))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setup = cuda_setup([trial], {})
    model = _gpt_model(setup, [Observation(8, (), 900 * MiB)])
    assert model.simulator is not None and model.simulator.cuda.pool == PoolLayout.from_json(trial.cuda_pool)
    again = MemoryModel.from_json(json.loads(json.dumps(model.to_json())))
    assert again.simulator is not None and again.simulator.cuda == setup
    assert again.peak(8) == model.peak(8)
    damaged = model.to_json()
    damaged["cuda_setup"]["pool"] = [{"small": False, "blocks": [[100, "resident"]]}]
    with pytest.raises(MemoptError, match="CUDA allocator setup"):
        MemoryModel.from_json(damaged)


def test_the_cuda_setup_keeps_the_residents_of_a_trials_pool_and_reads_the_settings() -> None:
    pool = [
        {"small": False, "blocks": [[6 * MiB, "resident"], [2 * MiB, "loop"], [12 * MiB, "free"]]},
        {"small": False, "blocks": [[20 * MiB, "free"]]},  # left wholly cached by the warm-up step
        {"small": True, "blocks": [[2 * MiB, "loop"]]},
    ]
    trial = replace(released(), cuda_pool=tuple(pool))
    setup = cuda_setup([released(), trial], {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})
    assert setup.settings.max_split_size == 64 * MiB
    assert setup.pool is not None and setup.pool.to_json() == [
        {"small": False, "blocks": [[6 * MiB, "resident"], [14 * MiB, "free"]]}
    ]
    assert setup.pool.held_count(BlockUse.LOOP) == 0
    with pytest.warns(AllocatorSettingsNotModelled, match="expandable_segments:True"):
        cuda_setup([], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    with pytest.raises(MemoptError, match="PYTORCH_NO_CUDA_MEMORY_CACHING"):
        cuda_setup([], {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})


def test_trial_and_the_tune_screen_show_allocated_reserved_and_outside() -> None:
    trial = replace(with_memory(released(), cuda_outside_bytes=500 * MiB, cuda_alloc_retries=1), throughput=80.0)
    trial = trial.judged(1600 * MiB)
    buffer = io.StringIO()
    print_trial(trial, Console(file=buffer, width=400, color_system=None))
    shown = buffer.getvalue()
    assert (
        "on the card  2,000.0 MiB = reserved 1,500.0 MiB + outside the allocator 500.0 MiB (allocated 1,000.0 MiB)"
        in shown
    )
    assert "at the edge  running at the edge" in shown
    assert "budget       1,600.0 MiB: OVER (reserved + outside the allocator" in shown
    cell = _peak_cell(trial)
    assert cell == "2.0 GiB = 1.5 GiB reserved + 500.0 MiB outside (alloc 1000.0 MiB, at the edge)"


def test_tunes_json_carries_what_ran_out_on_the_card() -> None:
    trial = with_memory(released(), cuda_outside_bytes=500 * MiB, cuda_alloc_retries=0)
    assert _cuda_fields(trial) == {
        "device_peak_bytes": 2000 * MiB,
        "cuda_reserved_bytes": 1500 * MiB,
        "cuda_outside_bytes": 500 * MiB,
        "cuda_alloc_retries": 0,
        "at_the_edge": False,
    }
    assert _cuda_fields(with_memory(trial, memory_kind="rss")) == {}


def test_a_journaled_pool_that_is_damaged_skips_its_record() -> None:
    record = released().to_record()
    record["cuda_pool"] = [{"small": False, "blocks": [[6 * MiB, "resident"], [1000, "free"]]}]
    with pytest.warns(DamagedRecord, match="cuda_pool"):
        assert TrialResult.from_record(json.loads(json.dumps(record)), "journal line 3") is None
    record["cuda_pool"] = [{"small": False, "blocks": [[6 * MiB, "resident"], [14 * MiB, "free"]]}]
    back = TrialResult.from_record(json.loads(json.dumps(record)), "journal line 3")
    assert back is not None and PoolLayout.from_json(back.cuda_pool).reserved_bytes == 20 * MiB
