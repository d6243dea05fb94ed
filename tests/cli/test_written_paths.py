"""Paths memopt writes and reads as the user names them: only a new path or a regular file is
written (a FIFO, a device node, a symlink or a folder is refused, ``--force`` or not); a plan
that needs no recompute leaves no older config behind in ``--out``; a config argument naming
a folder or device is refused; a pipe is read as a stream; a read-only mount is named as such;
recipe options and sizes are checked before anything runs.

Device nodes are made here with ``mknod`` (root only), never the system's own."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, memopt
from support.logsamples import PLAIN_LOG
from support.mounts import tmpfs

from memopt.backends.ort import ConfigEntry, ConfigError, OptimizationType, OrtVersion
from memopt.backends.ort.logparse import parse_file
from memopt.backends.ort.trials import parse_trial_config
from memopt.backends.ort.tune.export import ConfigExport, write_config
from memopt.errors import MemoptError
from memopt.recipes import RecipeError, check_recipe, load_recipe
from memopt.run import Journal
from memopt.run.files import replace_atomically

ROOT = Path(__file__).resolve().parents[2]
V1_19 = OrtVersion.parse("1.19.2")
REFUSED = "memopt writes only to a regular file or a new path"
SPECIAL_KINDS = ("fifo", "device", "symlink", "dangling symlink", "folder")


def make_special(folder: Path, kind: str, name: str = "target.json") -> Path:
    """A ``kind`` of non-regular file at ``folder / name``: a FIFO, a character device made with
    mknod (the null device's numbers; skipped unless root), a symlink to a user's regular file,
    a symlink to nothing, or a folder."""
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs root")
    elif kind == "symlink":
        mine = folder / "mine.json"
        mine.write_text('["Mine+:1:-1"]\n')
        path.symlink_to(mine)
    elif kind == "dangling symlink":
        path.symlink_to(folder / "nowhere.json")
    else:
        path.mkdir()
    return path


def snapshot(path: Path) -> tuple[int, str | None, str | None]:
    """What stands at ``path``: its file type, where a link points, a linked file's text."""
    mode = os.lstat(path).st_mode
    link = str(path.readlink()) if path.is_symlink() else None
    text = path.read_text() if path.is_symlink() and path.exists() else None
    return stat.S_IFMT(mode), link, text


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# -- one check before every write ------------------------------------------------------------


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
@pytest.mark.parametrize("overwrite", [True, False])
def test_nothing_but_a_regular_file_or_a_new_path_is_written(tmp_path: Path, kind: str, overwrite: bool) -> None:
    target = make_special(tmp_path, kind)
    before = snapshot(target)
    with pytest.raises(MemoptError) as refused:
        replace_atomically(target, '["New+:1:-1"]\n', overwrite=overwrite)
    message = str(refused.value)
    assert REFUSED in message or "is a folder" in message, message
    assert "--force" not in message and "\n" not in message
    assert snapshot(target) == before
    assert leftovers(tmp_path) == []


def test_a_config_export_onto_a_special_file_is_refused_and_a_regular_file_replaced(tmp_path: Path) -> None:
    entries = (ConfigEntry("Gelu+", OptimizationType.RECOMPUTE),)
    fifo = make_special(tmp_path, "fifo")
    for overwrite in (False, True):
        with pytest.raises(MemoptError, match=f"is a FIFO \\(named pipe\\); {REFUSED}"):
            write_config(ConfigExport(entries, V1_19, fifo), overwrite=overwrite)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    regular = tmp_path / "cfg.json"
    regular.write_text("[]\n")
    write_config(ConfigExport(entries, V1_19, regular), overwrite=True)
    assert json.loads(regular.read_text()) == ["Gelu+:1:-1"]


# -- --config: a file, or the config itself ---------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "said"), [("folder", "a folder"), ("device", "a character device"), ("fifo", "a FIFO")]
)
def test_a_config_argument_naming_a_folder_device_or_fifo_is_refused(tmp_path: Path, kind: str, said: str) -> None:
    path = make_special(tmp_path, kind, "configs")
    with pytest.raises(ConfigError, match=f"the config {path} is {said}"):
        parse_trial_config(str(path), V1_19)


def test_a_config_argument_is_a_file_or_the_config_itself(tmp_path: Path) -> None:
    saved = tmp_path / "cfg.json"
    saved.write_text('["Gelu+:1:-1"]')
    linked = tmp_path / "current"
    linked.symlink_to(saved)  # read through: only writes refuse links
    for text in (str(saved), str(linked)):
        assert [str(e) for e in parse_trial_config(text, V1_19).entries] == ["Gelu+:1:-1"]
    assert [str(e) for e in parse_trial_config("Gelu+,Cast+:2:-1", V1_19).entries] == ["Gelu+:1:-1", "Cast+:2:-1"]
    with pytest.raises(ConfigError, match="does not exist"):
        parse_trial_config(str(tmp_path / "typo" / "cfg"), V1_19)


# -- parse: every input a stream ----------------------------------------------------------------


def test_a_log_fed_through_a_fifo_parses_as_the_file_does(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    feeder = threading.Thread(target=lambda: fifo.write_bytes(PLAIN_LOG.read_bytes()))
    feeder.start()
    streamed = parse_file(fifo)
    feeder.join()
    whole = parse_file(PLAIN_LOG)
    assert streamed.lines_read == whole.lines_read
    assert [s.plan_cells for s in streamed.summaries] == [s.plan_cells for s in whole.summaries]


# -- recipe options: a value of the parameter's kind ------------------------------------------


@pytest.mark.parametrize(
    ("recipe", "options", "said"),
    [
        ("gpt", {"tied": "maybe"}, "-o tied=maybe is not true or false"),
        ("gpt", {"tied": 1}, "-o tied=1 is not true or false"),
        ("gpt", {"n_layer": 1.5}, "-o n_layer=1.5 is not a whole number"),
        ("gpt", {"n_layer": True}, "-o n_layer=true is not a whole number"),
        ("bert", {"mask_prob": "lots"}, "-o mask_prob=lots is not a number"),
    ],
)
def test_a_recipe_option_of_the_wrong_kind_is_refused(recipe: str, options: dict[str, object], said: str) -> None:
    with pytest.raises(RecipeError, match=said):
        check_recipe(recipe, options)


def test_recipe_options_of_their_kind_pass() -> None:
    check_recipe("gpt", {"tied": False, "n_layer": 2, "seq_len": 16})
    check_recipe("bert", {"mask_prob": 1})  # an integer is a number


def test_an_imported_recipe_checks_its_options_by_its_signature(tmp_path: Path) -> None:
    """Where the recipe is imported (the child), its annotations (text, with postponed
    evaluation) and its defaults say the kinds."""
    recipe = tmp_path / "typed_recipe.py"
    recipe.write_text(
        "from __future__ import annotations\n"
        "from typing import Optional\n"
        "def build_model(flag: bool = False, width: Optional[int] = None, rate=0.5):\n"
        "    return None\n"
        "def make_batch(batch_size: int, label: str = 'x'):\n"
        "    return None, None\n"
    )
    for options, said in (
        ({"flag": "maybe"}, "-o flag=maybe is not true or false"),
        ({"width": "wide"}, "-o width=wide is not a whole number"),
        ({"rate": "fast"}, "-o rate=fast is not a number"),
    ):
        with pytest.raises(RecipeError, match=said):
            load_recipe(str(recipe), options)
    loaded = load_recipe(str(recipe), {"flag": True, "width": 3, "rate": 1, "label": "y"})
    assert dict(loaded.options) == {"flag": True, "width": 3, "rate": 1, "label": "y"}


# -- the command line ---------------------------------------------------------------------------


def _writing_commands(target: Path, runs: Path) -> dict[str, tuple[str, ...]]:
    """Each command that writes a path the user names, aimed at ``target`` with --force."""
    return {
        "config emit": ("config", "emit", "Gelu+", "--ort-version", "1.19.2", "--out", str(target), "--force"),
        "parse": ("parse", str(PLAIN_LOG), "-e", "1", "--config-out", str(target), "--force"),
        "plan": ("plan", "mlp", "--target-batch", "2", "--budget", "1GiB", "--out", str(target), "--force")
        + ("--runs-dir", str(runs)),
        "scan": ("scan", "gpt", "--plot", str(target), "--runs-dir", str(runs)),
    }


@pytest.mark.subprocess
@pytest.mark.parametrize("command", ["config emit", "parse", "plan", "scan"])
@pytest.mark.parametrize(
    ("kind", "said"), [("fifo", "a FIFO"), ("device", "a character device"), ("symlink", "a symlink")]
)
def test_every_command_refuses_to_write_a_special_file_even_with_force(
    tmp_path: Path, command: str, kind: str, said: str
) -> None:
    target = make_special(tmp_path, kind, "plans.png" if command == "scan" else "target.json")
    before = snapshot(target)
    run = memopt(*_writing_commands(target, tmp_path / "runs")[command], cwd=tmp_path)
    assert_one_line_error(run, f"{target} is {said}", REFUSED)
    assert "--force" not in run.stderr
    assert snapshot(target) == before
    assert not (tmp_path / "runs").exists()  # refused before anything ran


@pytest.mark.subprocess
def test_parse_reads_a_process_substitution_as_it_reads_the_file(tmp_path: Path) -> None:
    """``memopt parse <(cat log)``: the shell hands over /dev/fd/N, a pipe that cannot seek."""
    piped = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m memopt parse <(cat "{PLAIN_LOG}")'],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )
    assert piped.returncode == 0, piped.stderr
    direct = memopt("parse", str(PLAIN_LOG))
    table = [line for line in direct.stdout.splitlines() if "Plan" in line or ":1:-1" in line]
    assert table and all(line in piped.stdout for line in table)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("trial", "mlp", "--batch", "99999999999999999999"), "--batch 99999999999999999999 is out of range"),
        (
            ("trial", "mlp", "-b", "2", "--steps", "99999999999999999999"),
            "--steps 99999999999999999999 is out of range",
        ),
        (("trial", "gpt", "-b", "2", "--seq", "99999999999999999999"), "--seq 99999999999999999999 is out of range"),
        (("plan", "mlp", "--target-batch", "99999999999999999999", "--budget", "1GiB"), "--target-batch 9"),
        (("plan", "mlp", "--target-batch", "8", "--budget", "1GiB", "--calibrate", "2," + "9" * 20), "--calibrate 9"),
        (
            ("tune", "mlp", "--target-batch", "8", "--budget", "1GiB", "--no-tui", "--max-trials", "9" * 20),
            "out of range",
        ),
        (("scan", "gpt", "--probe-batch", "9" * 20), "--probe-batch 99999999999999999999 is out of range"),
        (("probe", "gpt", "--batch", "9" * 20), "--batch 99999999999999999999 is out of range"),
        (("trial", "gpt", "-b", "1", "-o", "tied=maybe"), "-o tied=maybe is not true or false"),
    ],
)
def test_absurd_sizes_and_option_values_are_refused_before_anything_runs(
    tmp_path: Path, args: tuple[str, ...], fragment: str
) -> None:
    run = memopt(*args, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert_one_line_error(run, fragment)
    assert "out of memory" not in run.stdout + run.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.subprocess
@pytest.mark.parametrize(("kind", "said"), [("folder", "a folder"), ("device", "a character device")])
def test_trial_refuses_a_config_naming_a_folder_or_device(tmp_path: Path, kind: str, said: str) -> None:
    path = make_special(tmp_path, kind, "configs")
    run = memopt("trial", "mlp", "-b", "2", "--config", str(path), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert_one_line_error(run, f"the config {path} is {said}, not a config file")
    assert not (tmp_path / "runs").exists()


# -- a read-only file system ---------------------------------------------------------------------


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs mounted read-only for the test (root only), unmounted after it."""
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mount:
        yield mount


@pytest.mark.subprocess
def test_a_read_only_file_system_is_named_as_such(read_only_mount: Path, tmp_path: Path) -> None:
    with pytest.raises(MemoptError, match="the file system is read-only: cannot write"):
        replace_atomically(read_only_mount / "cfg.json", "[]\n")
    with pytest.raises(MemoptError, match="the file system is read-only: cannot write the journal"):
        Journal.in_folder(read_only_mount / "runs").check_writable()
    out = read_only_mount / "cfg.json"
    emitted = memopt("config", "emit", "Gelu+", "--ort-version", "1.19.2", "--out", str(out))
    trial = memopt("trial", "mlp", "-b", "2", "--runs-dir", str(read_only_mount / "runs"), cwd=tmp_path)
    # The trial meets the read-only runs folder as it starts its run, after its backend line.
    for run, started in ((emitted, False), (trial, True)):
        assert_one_line_error(run, "the file system is read-only: cannot write", after_backend_line=started)
        assert "Permission denied" not in run.stderr


# -- plan --out when no recompute is needed ----------------------------------------------------------


@pytest.mark.ort
def test_plan_out_with_nothing_to_recompute_leaves_the_empty_config_a_job_can_export(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    out.write_text('["Gelu+:1:-1"]\n')  # an older plan's config, exported by the user's job script
    run = memopt(
        "plan",
        "mlp",
        "--size",
        "tiny",
        "--target-batch",
        "2",
        "--budget",
        "8GiB",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--force",
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    assert run.returncode == 0, run.stderr
    assert "no recompute is needed" in run.stdout
    assert f"wrote the empty config [] to {out}" in run.stdout
    assert "unset ORTMODULE_MEMORY_OPT_CONFIG" in run.stdout
    assert json.loads(out.read_text()) == []
    job = subprocess.run(
        [
            sys.executable,
            "examples/train_ddp.py",
            "--batch-size",
            "1",
            "--seq",
            "16",
            "--layers",
            "1",
            "--max-steps",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "ORTMODULE_MEMORY_OPT_CONFIG": str(out)},
        timeout=600,
    )
    assert job.returncode == 0, job.stderr[-2000:]  # ORT 1.19 reads [] as no recompute
