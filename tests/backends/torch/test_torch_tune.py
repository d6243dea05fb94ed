"""The torch back end's trial and tune through the command line, in processes that cannot import
onnxruntime: real plain-PyTorch training steps in memopt's child process."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, memopt
from support.readme import readme_block
from support.torch_steps import without_onnxruntime

from memopt.backends.torch.tune import PLAYED_SAVING_ERROR
from memopt.recompute import POLICY_ENV, RecomputePolicy
from memopt.run.budget import CPU_ALLOCATOR_ENV, parse_budget

ROOT = Path(__file__).resolve().parents[3]

# Eight tiny GPT blocks at 128 x 64 tokens: activations (about 0.4 GiB) a third of the peak, so
# a budget 150 MiB under the plain peak needs recompute.
GPT = ("gpt", "--size", "tiny", "--seq", "64", "-o", "n_layer=8")
BATCH = 128


@pytest.mark.torch
def test_tune_without_onnxruntime_ends_verified_with_the_export_line(tmp_path: Path) -> None:
    env = without_onnxruntime(tmp_path)
    runs = tmp_path / "runs"
    plain = memopt("trial", *GPT, "--batch", str(BATCH), "--runs-dir", str(runs), "--json", env=env)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.splitlines()[0].startswith("backend: torch (ORTModule cannot run here: onnxruntime-training")
    peak = json.loads(plain.stdout)["device_peak_bytes"]
    budget = peak - 150 * 2**20
    tuned = memopt(
        "tune",
        *GPT,
        "--target-batch",
        str(BATCH),
        "--budget",
        f"{budget}B",
        "--no-tui",
        "--json",
        "--runs-dir",
        str(runs),
        env=env,
    )
    assert tuned.returncode == 0, tuned.stderr
    assert tuned.stderr.splitlines()[0].startswith("backend: torch")
    assert "measurement: verified" in tuned.stderr
    result = json.loads(tuned.stdout)
    assert result["status"] == "verified" and result["best"]["verified"]
    assignments = dict(word.split("=", 1) for word in shlex.split(result["export"][-1])[1:])
    assert assignments == {POLICY_ENV: assignments[POLICY_ENV], **CPU_ALLOCATOR_ENV}, result["export"]
    policy = RecomputePolicy.read(Path(assignments[POLICY_ENV]))
    assert policy.plans  # the budget needed recompute
    assert result["best"]["plans"] == [str(p) for p in policy.plans]
    records = [json.loads(line) for line in (runs / "journal.jsonl").read_text().splitlines()]
    verified = [r for r in records if r.get("config") == [str(p) for p in policy.plans]]
    assert verified and verified[-1]["device_peak_bytes"] <= result["limit_bytes"] < budget
    # The choice keeps room under the limit for the model's error (a share of what it takes off) and
    # says so in the model's line and --json.
    saving = result["predicted_without_recompute_bytes"] - result["predicted_bytes"]
    assert result["kept_room_bytes"] >= int(PLAYED_SAVING_ERROR * saving) > 0
    assert result["predicted_bytes"] + result["kept_room_bytes"] <= result["limit_bytes"] + 1
    assert (
        f"of room kept under the limit (no run repeated: no run-to-run noise, + {PLAYED_SAVING_ERROR:.1%} of the"
        in (result["kept_room"])
    )
    assert re.search(
        r"^\[search\] model: .* predicted at .*; [\d.]+ [KM]iB of room kept under the limit", tuned.stderr, re.M
    )
    # A recipe's steps play on fake tensors: one run without recompute anchors them, one verifies;
    # the second choice, with the first's miss, is there for a first choice the room did not cover.
    batches = [t["batch"] for t in result["trials"]]
    assert batches in ([2, BATCH], [2, BATCH, BATCH]), batches


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("scan", "gpt", "--backend", "tensorflow"), ("--backend 'tensorflow': choose ort or torch",)),
        (("tune", "gpt", "--backend", "torch", "--target-batch", "4", "--budget", "1GiB"), ("use --no-tui",)),
        (
            ("trial", "gpt", "--size", "tiny", "--batch", "2", "--backend", "torch", "--config", "blocks.*: gleu"),
            ("has no op aten.gleu",),
        ),
    ],
)
def test_bad_torch_backend_input_is_one_error_line(
    tmp_path: Path, args: tuple[str, ...], fragments: tuple[str, ...]
) -> None:
    assert_one_line_error(memopt(*args, "--runs-dir", str(tmp_path)), *fragments)


README_EXPORT = re.compile(rf"^export {POLICY_ENV}=.*$", re.MULTILINE)


@pytest.mark.torch
def test_the_readme_plain_torch_commands_run_as_pasted(tmp_path: Path) -> None:
    """The README's examples/train_plain_torch.py block, run as a user pastes it from a folder
    holding only examples/, without onnxruntime: the scan lists the plans, tune ends verified, and
    the job re-run with the export line peaks under the budget."""
    scan_words, tune_words, export, job_words = readme_block("examples/train_plain_torch.py")
    assert scan_words[:3] == ["memopt", "scan", "--backend"] and export[1].startswith(f"{POLICY_ENV}=")
    assert export[2:] == [f"{name}={value}" for name, value in CPU_ALLOCATOR_ENV.items()]
    budget = parse_budget(tune_words[tune_words.index("--budget") + 1]).bytes or 0
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {
        **os.environ,
        **without_onnxruntime(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    scanned = subprocess.run(
        shlex.join(scan_words), shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert scanned.returncode == 0, scanned.stderr[-3000:]
    assert "blocks.*.act" in scanned.stdout, scanned.stdout
    tuned = subprocess.run(
        shlex.join(tune_words), shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500
    )
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    exported = README_EXPORT.search(tuned.stdout)
    assert exported, tuned.stdout
    # The job in a shell that pasted the export line, its peak RSS read by a parent of its own;
    # --max-steps because the example trains until stopped.
    measure = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    ran = subprocess.run(
        f"{exported.group(0)}; python -c {shlex.quote(measure)} {shlex.join(job_words)} --max-steps 3",
        shell=True,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert int(ran.stdout.split()[-1]) * 1024 <= budget


@pytest.mark.torch
@pytest.mark.long
def test_a_command_applies_the_policy_itself(tmp_path: Path) -> None:
    """``trial --backend torch --cmd``: the user's script reads the policy file memopt puts in its
    environment, and its steps count from the model it passed to ``memopt.recompute.apply``."""
    script = ROOT / "examples" / "train_plain_torch.py"
    runs = tmp_path / "runs"
    args = ("trial", "--backend", "torch", "--batch", "16", "--steps", "1", "--runs-dir", str(runs), "--json")
    cmd = f"{sys.executable} {script} --batch-size {{batch}}"
    done = memopt(*args, "--config", "blocks.*: *", "--cmd", cmd, env=without_onnxruntime(tmp_path))
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "ok" and record["config"] == ["blocks.*: *"] and record["device_peak_bytes"] > 0
    # A plan the script's model cannot take fails the job with the policy's own message.
    bad = memopt(*args, "--config", "layers.*: gelu", "--cmd", cmd, env=without_onnxruntime(tmp_path))
    assert bad.returncode != 0 and "no module of the model matches layers.*" in bad.stderr


TORCHRUN_PLAIN_TORCH = (
    f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2 "
    f"{ROOT / 'examples' / 'train_plain_torch.py'} --batch-size {{batch}}"
)


@pytest.mark.torch
def test_a_torchrun_tune_of_a_command_ends_verified_on_every_rank(tmp_path: Path) -> None:
    """``tune --backend torch --cmd`` of a two-rank torchrun job: each rank applies the policy in
    its own process, and the verifying run measured both ranks under the limit. Batch 128: the
    activations are about 0.4 GiB of each rank's 1.2 GiB, so 90% of the plain peak needs recompute."""
    runs, env = tmp_path / "runs", without_onnxruntime(tmp_path)
    args = ("--backend", "torch", "--cmd", TORCHRUN_PLAIN_TORCH, "--runs-dir", str(runs))
    plain = memopt("trial", *args, "--batch", "128", "--config", "none", "--json", env=env)
    assert plain.returncode == 0, plain.stderr
    budget = int(json.loads(plain.stdout)["device_peak_bytes"] * 0.9)
    tuned = memopt("tune", *args, "--target-batch", "128", "--budget", f"{budget}B", "--no-tui", "--json", env=env)
    assert tuned.returncode == 0, tuned.stderr
    result = json.loads(tuned.stdout)
    assert result["status"] == "verified" and result["best"]["verified"] and result["best"]["plans"], result
    ranks = json.loads((Path(result["best"]["run_dir"]) / "run.json").read_text())["result"]["ranks"]
    assert [rank["rank"] for rank in ranks] == [0, 1]
    assert all(0 < rank["peak_bytes"] <= result["limit_bytes"] for rank in ranks), ranks
    assert result["export"][-1].startswith(f"export {POLICY_ENV}=")


@pytest.mark.torch
def test_a_command_that_never_applies_a_policy_is_told_so(tmp_path: Path) -> None:
    """A job that trains without passing its model to ``memopt.recompute.apply`` cannot be
    scanned: tune ends with one error line that says so and where the job's log is."""
    (tmp_path / "t.py").write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.AdamW(model.parameters())\n"
        "for _ in range(3):\n"
        "    model(torch.randn(2, 4)).sum().backward()\n"
        "    opt.step()\n"
    )
    tuned = memopt(
        "tune",
        "--backend",
        "torch",
        "--target-batch",
        "8",
        "--budget",
        "1GiB",
        "--no-tui",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--cmd",
        "python t.py --batch {batch}",
        cwd=tmp_path,
    )
    assert tuned.returncode == 2, tuned.stderr
    last = tuned.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the job at batch 2 ended before memopt could capture"), tuned.stderr
    assert "does the script pass its model to memopt.recompute.apply?" in last and "Traceback" not in tuned.stderr


@pytest.mark.torch
def test_plan_writes_the_policy_predicted_to_fit_and_nothing_when_none_is(tmp_path: Path) -> None:
    """``plan --backend torch``: tune's scan, probes and choice without the verifying run. Its
    policy file goes to --out; a budget no policy is predicted to meet writes nothing and exits 3."""
    runs, out = tmp_path / "runs", tmp_path / "policy.json"
    tiny = ("gpt", "--size", "tiny", "--backend", "torch", "--target-batch", "8", "--runs-dir", str(runs))
    roomy = memopt("plan", *tiny, "--budget", "20GiB", "--out", str(out), "--json")
    assert roomy.returncode == 0, roomy.stderr
    assert roomy.stderr.splitlines()[0] == "backend: torch (--backend)"
    document = json.loads(roomy.stdout)
    assert document["status"] == "predicted" and document["feasible"] and document["plans"] == []
    assert document["policy_file"] == str(out.resolve())
    assert RecomputePolicy.read(out).plans == ()
    assert document["export"] == [f"export {POLICY_ENV}={out.resolve()} MALLOC_MMAP_THRESHOLD_=131072"]
    records = list(map(json.loads, (runs / "journal.jsonl").read_text().splitlines()))
    assert [(r.get("kind"), r["batch_size"] if "torch" in r else r["batch"]) for r in records] == [
        ("torch-scan", 2),  # the scan's recompute times, for a resume
        (None, 2),  # the run without recompute
    ]
    tight = memopt("plan", *tiny, "--budget", "1MiB", "--out", str(tmp_path / "none.json"))
    assert tight.returncode == 3, tight.stderr
    assert "over the limit" in tight.stderr and not (tmp_path / "none.json").exists() and tight.stdout == ""


@pytest.mark.torch
def test_plan_scans_an_hf_model_in_its_own_process(tmp_path: Path) -> None:
    """The torch back end's scan builds an ``hf:`` model in memopt's process: the check of its
    config before any run must leave transformers able to build it (it read the config without
    torch, and the scan failed with "cannot build the model")."""
    args = ("hf:gpt2", "--size", "tiny", "--seq", "16", "--backend", "torch", "--target-batch", "4")
    done = memopt("plan", *args, "--budget", "20GiB", "--runs-dir", str(tmp_path / "runs"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "predicted"


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("plan", "gpt", "--size", "tiny", "--target-batch", "8", "--budget", "1GiB", "--device", "cuda"),
            "error: --device cuda: torch here sees no CUDA device",
        ),
        (
            ("tune", "--target-batch", "8", "--budget", "1GiB", "--no-tui", "--cmd", "python t.py"),
            "--backend torch varies the batch, so the command needs {batch} where its batch size goes",
        ),
    ],
)
def test_what_the_torch_back_end_cannot_do_here_ends_in_one_error_line(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    """After the back end's first line, a device this machine lacks or a command memopt cannot
    size ends with one ``error:`` line, exit 2, no traceback, nothing run."""
    if torch_has_cuda():
        pytest.skip("this machine has CUDA")
    done = memopt(*args, "--backend", "torch", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert any(line.startswith("backend: torch") for line in lines) and lines[-1].startswith("error: ")
    assert said in lines[-1]
    assert "Traceback" not in done.stderr and not list((tmp_path / "runs").glob("torch-*"))


def torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.subprocess
def test_a_device_the_screen_cannot_use_is_refused_before_it_opens(tmp_path: Path) -> None:
    """``tune --backend torch`` in a terminal: the device check runs before the screen opens
    (it opened, and the error came from its worker)."""
    if torch_has_cuda():
        pytest.skip("this machine has CUDA")
    leader, terminal = pty.openpty()
    args = ("gpt", "--size", "tiny", "--backend", "torch", "--target-batch", "8", "--budget", "1GiB")
    child = subprocess.Popen(
        [sys.executable, "-m", "memopt", "tune", *args, "--device", "cuda", "--runs-dir", str(tmp_path / "runs")],
        stdin=terminal,
        stderr=terminal,
        stdout=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    os.close(terminal)
    said, deadline = b"", time.monotonic() + 120
    try:
        while select.select([leader], [], [], max(0.0, deadline - time.monotonic()))[0]:
            said += os.read(leader, 4096)
    except OSError:  # the terminal's other end closed: the child is done with it
        pass
    finally:
        os.close(leader)
        if child.poll() is None:  # the screen opened: the check came too late
            child.kill()
    assert child.wait(timeout=30) == 2, said
    lines = re.sub(r"\x1b\[[0-9;]*m", "", said.decode()).strip().splitlines()  # a terminal's colours left out
    assert lines[0].startswith("backend: torch") and lines[-1] == "error: --device cuda: torch here sees no CUDA device"
    assert len(lines) == 2, lines
