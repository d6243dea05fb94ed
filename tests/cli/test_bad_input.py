"""Every bad input gets one line saying what to do, exit 2, no traceback (and, where it is
refused up front, nothing created).

All of these are real runs: real broken recipes, a real interpreter without ORT, a real
torch release ORTModule cannot use, and a real ORT install whose extensions are unbuilt.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import RECIPES
from support.cli import CliRun, assert_one_line_error, memopt

from memopt.backends.ort.stack import inspect_stack

TORCH_2_13_WHEEL = next(Path("/opt/wheels").glob("torch-2.13.*.whl"), None) if Path("/opt/wheels").is_dir() else None


def probe(runs_dir: Path, recipe: str, *extra: str, env: dict[str, str] | None = None) -> CliRun:
    return memopt("probe", recipe, "--batch", "2", "--steps", "1", "--runs-dir", str(runs_dir), *extra, env=env)


@pytest.mark.parametrize(
    ("recipe", "fragments"),
    [
        (str(RECIPES / "fails_import.py"), ["failed to import: RuntimeError: this recipe cannot be imported"]),
        (str(RECIPES / "no_make_batch.py"), ["has no make_batch()"]),
        (str(RECIPES / "batch_of_three.py"), ["make_batch() returned a list of 3; expected (inputs, target)"]),
        (str(RECIPES / "model_not_module.py"), ["build_model() returned int; expected a torch.nn.Module"]),
        (str(RECIPES / "vector_loss.py"), ["loss() returned [2]; expected a scalar tensor"]),
        (str(RECIPES / "crashes_in_step.py"), ["the training step failed", "ValueError: labels are missing"]),
    ],
)
@pytest.mark.ort
def test_broken_recipe(runs_dir: Path, recipe: str, fragments: list[str]) -> None:
    run = probe(runs_dir, recipe)
    assert_one_line_error(run, *fragments)
    assert "(log: " in run.stderr
    assert "Traceback" in (run.run_dir / "ort.log").read_text()  # the detail is kept in the run folder


@pytest.mark.ort
def test_unknown_recipe_option(runs_dir: Path) -> None:
    assert_one_line_error(probe(runs_dir, "gpt", "--size", "tiny", "-o", "colour=red"), "takes no option colour")


@pytest.mark.subprocess
def test_malformed_option_and_device(runs_dir: Path) -> None:
    assert_one_line_error(probe(runs_dir, "gpt", "-o", "colour"), "--option must look like key=value")
    assert_one_line_error(probe(runs_dir, "gpt", "--device", "tpu"), "--device must be auto, cpu or cuda")


@pytest.mark.subprocess
def test_interpreter_without_ort_training(runs_dir: Path) -> None:
    base_python = Path(sys.base_prefix) / "bin" / "python3"
    has_ort = subprocess.run(
        [base_python, "-c", "import importlib.util as u; print(u.find_spec('onnxruntime'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if has_ort != "None":
        pytest.skip(f"{base_python} has onnxruntime installed")
    run = probe(runs_dir, "gpt", "--python", str(base_python))
    assert_one_line_error(
        run, "the ORT training stack cannot run", "onnxruntime-training is not installed", "pip install 'memopt[cpu]'"
    )


def _shadow(source: Path, target: Path, drop: set[Path]) -> None:
    """Mirror ``source`` into ``target`` with symlinks, leaving out the paths in ``drop``."""
    target.mkdir(parents=True)
    for entry in source.iterdir():
        if entry in drop:
            continue
        if any(entry in d.parents for d in drop):
            _shadow(entry, target / entry.name, drop)
        else:
            (target / entry.name).symlink_to(entry)


@pytest.mark.subprocess
def test_extensions_not_built(runs_dir: Path, tmp_path: Path) -> None:
    stack = inspect_stack()
    extensions = Path(stack.extensions_dir)
    ort_dir = extensions.parents[2]
    built = {p for p in extensions.iterdir() if p.suffix == ".so" or p.name == "build"}
    _shadow(ort_dir, tmp_path / "onnxruntime", built)
    run = probe(runs_dir, "gpt", env={"PYTHONPATH": str(tmp_path)})
    assert_one_line_error(
        run,
        "ORTModule's C++ extensions are not built",
        "python -m onnxruntime.training.ortmodule.torch_cpp_extensions.install",
    )


@pytest.fixture(scope="session")
def torch_2_13_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv holding torch 2.13 (the CPU wheel this machine kind ships), no deps."""
    if TORCH_2_13_WHEEL is None:
        pytest.skip("no torch 2.13 wheel on this machine")
    venv = tmp_path_factory.mktemp("torch213")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([venv / "bin" / "pip", "install", "--quiet", "--no-deps", str(TORCH_2_13_WHEEL)], check=True)
    return venv / "bin" / "python"


@pytest.mark.ort
@pytest.mark.long
def test_torch_ortmodule_cannot_use(runs_dir: Path, tmp_path: Path, torch_2_13_python: Path) -> None:
    ort_only = tmp_path / "ort_only"
    ort_only.mkdir()
    (ort_only / "onnxruntime").symlink_to(Path(inspect_stack().extensions_dir).parents[2])
    run = probe(runs_dir, "gpt", "--python", str(torch_2_13_python), env={"PYTHONPATH": str(ort_only)})
    assert_one_line_error(run, "torch 2.13.0", "cannot run ORTModule 1.19.2", "pip install 'torch==2.4.1'")


@pytest.mark.ort
def test_timeout_kills_the_run(runs_dir: Path) -> None:
    run = probe(runs_dir, "gpt", "--size", "small", "--timeout", "3")
    assert_one_line_error(run, "the run timed out", "killed after 3 s")
    assert run.record()["result"]["status"] == "timed_out"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("trial", "gpt", "-b", "2", "--timeout", "nan"), "--timeout must be a finite number of seconds above zero"),
        (("trial", "gpt", "-b", "2", "--timeout", "inf"), "--timeout must be a finite number of seconds above zero"),
        (("probe", "gpt", "--timeout", "0"), "--timeout must be a finite number of seconds above zero"),
        (("tune", "gpt", "--target-batch", "8", "--budget", "1GiB", "--no-tui", "--timeout", "-5"), "--timeout"),
        (("trial", "gpt", "-b", "2", "--budget", "9" * 400 + "B"), "more memory than any device has"),
        (("scan", "gpt", "--dims", "x=-5"), "--dims x=-5: a dim is a size, at least 1"),
        (("scan", "gpt", "--plot", "/missing/dir/p.png"), "the folder /missing/dir does not exist"),
        (("trial", "gpt", "-b", "2", "--python", "/bin/false"), "--python /bin/false is not a Python"),
        (("trial", "gtp", "-b", "2"), "recipe 'gtp' not found"),
        (("tune", "gtp", "--target-batch", "8", "--budget", "1GiB", "--no-tui"), "recipe 'gtp' not found"),
        (("plan", "gpt", "--target-batch", "8", "--budget", "1GiB", "--margin", "1.5"), "--margin must be a fraction"),
        (("export", "--torch", "Gelu+", "gpt", "-b", "2", "--margin", "-0.1"), "--margin must be a fraction"),
    ],
)
@pytest.mark.subprocess
def test_bad_input_is_refused_before_anything_is_created(tmp_path: Path, args: tuple[str, ...], fragment: str) -> None:
    run = memopt(*args, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert_one_line_error(run, fragment)
    assert not (tmp_path / "runs").exists()


@pytest.mark.subprocess
def test_runs_dir_naming_a_file_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("mine\n")
    run = memopt("trial", "gpt", "-b", "2", "--runs-dir", str(plain), cwd=tmp_path)
    assert_one_line_error(run, f"--runs-dir {plain} is a file, not a folder")
    assert plain.read_text() == "mine\n"


@pytest.mark.ort
def test_a_batch_too_large_to_allocate_is_out_of_memory(runs_dir: Path) -> None:
    run = memopt("trial", "mlp", "--size", "tiny", "-b", "1000000000", "--budget", "16GiB", "--runs-dir", str(runs_dir))
    assert run.returncode == 3, run.stderr
    assert "at batch 1000000000 on CPU: out of memory" in run.stdout
    # torch's own words, brackets and all, printed as is, not read as markup (the line number is torch's: 117 in 2.4.1)
    assert re.search(r"\[enforce fail at alloc_cpu\.cpp:\d+\]", run.stdout), run.stdout
