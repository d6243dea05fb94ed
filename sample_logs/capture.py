"""Regenerate ``sample_logs/``: real ORTModule logs of every ORT training release that installs here.

Usage (from the repository root)::

    .venv/bin/python sample_logs/capture.py [--versions 1.17.3 1.18.0] [--cache DIR] [--recipes gpt bert mlp]

One virtual environment serves every release. Each older release is fetched with
``pip download --no-deps``, unpacked into ``<cache>/<version>/`` (outside the repository),
selected with ``PYTHONPATH`` and gets its C++ extensions built in place (CPU ones only;
the CUDA ones of the GPU wheels need nvcc). Releases before 1.19 were compiled against
NumPy 1.x, so ``<cache>/numpy1/`` (numpy 1.26.4, unpacked the same way) follows them on
``PYTHONPATH``. 1.19.2 is the one installed in the running interpreter's environment when
it is that version, else it is fetched like the others. Every step is idempotent: what is
already downloaded, unpacked or built is reused.

Each scenario runs ``python -m memopt probe <recipe> --size tiny --batch 4 --device cpu``
(the ``hf-*`` models: ``sample_logs/hf_tiny.py -o arch=<arch>``)
in a child process; its ``ort.log`` is copied to ``sample_logs/<version>/<recipe>-<scenario>-<level>.log``
with this machine's paths replaced (``<repo>``, ``<ort-cache>``, ``<run>``, ``~``), the
no-config run's execution training graph to ``sample_logs/graphs/<version>/<recipe>.onnx``
(and the graph ORTModule handed its session, without weights, to
``sample_logs/graphs/<version>/session-input/<recipe>.onnx``: ORT's node indices), and ``sample_logs/MANIFEST.json`` describes every file (entries of versions not re-run
are kept). The valid configs are built from the plans/subgraphs ORT printed in the
no-config run of the same release and recipe.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import onnx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NUMPY1_SPEC = "numpy==1.26.4"
BATCH = 4
SIZE = "tiny"
EXECUTION_GRAPH = "memopt_execution_model_training.onnx"
# The graph ORTModule handed its session: its node positions are ORT's node indices.
SESSION_INPUT_GRAPH = "memopt_optimized_training.onnx"
SESSION_INPUTS = "session-input"
# Recipe name -> what `memopt probe` is given. castmask (in this folder) has an up-cast kept
# for backward, so ORT prints a compromise plan; the built-in tiny recipes print none on CPU.
# hf-* are tiny Hugging Face models (hf_tiny.py, here) trained on their own loss.
HF_ARCHITECTURES = ("gpt2", "llama", "t5", "bert", "qwen2")
RECIPES: dict[str, list[str]] = {
    "gpt": ["gpt", "--size", SIZE],
    "bert": ["bert", "--size", SIZE],
    "mlp": ["mlp", "--size", SIZE],
    "castmask": ["sample_logs/castmask.py", "--size", SIZE],
    **{f"hf-{arch}": ["sample_logs/hf_tiny.py", "-o", f"arch={arch}"] for arch in HF_ARCHITECTURES},
}
# The same models trained the way users who bundle model and loss do: forward returns the
# scalar loss, so the loss runs (and fuses) inside ORT's graph.
LOSS_ONLY = "-lossonly"
RECIPES.update({
    f"{name}{LOSS_ONLY}": [*args, "-o", "loss_only=true"]
    for name, args in {**RECIPES, "cnn": ["cnn", "--size", SIZE]}.items()
    if name != "castmask"
})
# no-config run only (the HF and loss-only models are evidence for scan parity, not for the parser)
CHEAP = {"mlp", *(f"hf-{arch}" for arch in HF_ARCHITECTURES), *(name for name in RECIPES if name.endswith(LOSS_ONLY))}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Release:
    version: str
    spec: str  # what `pip download` fetches
    cuda_wheel: bool  # GPU wheel: build only the CPU extensions
    numpy1: bool  # compiled against NumPy 1.x

    @property
    def minor(self) -> tuple[int, int]:
        major, minor, *_ = (int(part) for part in self.version.split("."))
        return major, minor


RELEASES: dict[str, Release] = {
    "1.15.1": Release("1.15.1", "onnxruntime-training==1.15.1", cuda_wheel=True, numpy1=True),
    "1.16.3": Release("1.16.3", "onnxruntime-training==1.16.3", cuda_wheel=True, numpy1=True),
    "1.17.3": Release("1.17.3", "onnxruntime-training-cpu==1.17.3", cuda_wheel=False, numpy1=True),
    "1.18.0": Release("1.18.0", "onnxruntime-training-cpu==1.18.0", cuda_wheel=False, numpy1=True),
    "1.19.2": Release("1.19.2", "onnxruntime-training-cpu==1.19.2", cuda_wheel=False, numpy1=False),
}

# Builds the C++ extensions of the ORT package found first on PYTHONPATH, skipping the CUDA
# ones when asked: install.py builds them whenever torch and the wheel were built with CUDA
# and offers no switch to skip them (only ONNXRUNTIME_FORCE_CUDA to force them).
_BUILD_SNIPPET = """
import sys
from onnxruntime.training.ortmodule.torch_cpp_extensions import install
if sys.argv[1] == "cpu-only":
    install._list_cuda_extensions = lambda: []
install.build_torch_cpp_extensions()
"""


# --------------------------------------------------------------------------- setup


def log(message: str) -> None:
    print(f"[capture] {message}", file=sys.stderr, flush=True)


def run_checked(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(list(cmd), env=env, cwd=cwd, check=True)


def download_and_unpack(spec: str, wheels: Path, target: Path) -> None:
    """``pip download --no-deps`` the wheel of ``spec`` and unzip it into ``target`` (once)."""
    marker = target / ".unpacked"
    if marker.is_file():
        return
    name, _, version = spec.partition("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    wheel = next(iter(sorted(wheels.glob(pattern))), None)
    if wheel is None:
        wheels.mkdir(parents=True, exist_ok=True)
        run_checked([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", spec, "-d", str(wheels)])
        wheel = next(iter(sorted(wheels.glob(pattern))))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    log(f"unpacking {wheel.name} -> {target}")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    marker.write_text(wheel.name + "\n")


def _imported_from(package: str) -> list[str]:
    """The site-packages folder ``package`` is imported from (without importing it)."""
    spec = importlib.util.find_spec(package)
    return [str(Path(spec.origin).parent.parent)] if spec and spec.origin else []


def installed_ort_version() -> str | None:
    probe = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('onnxruntime-training-cpu'))"],
        capture_output=True, text=True,
    )
    return probe.stdout.strip() or None if probe.returncode == 0 else None


def prepare(release: Release, cache: Path) -> list[str]:
    """Make ``release`` importable with built extensions; return the PYTHONPATH entries selecting it."""
    if release.version == "1.19.2" and installed_ort_version() == release.version:
        return []  # the environment's own ORT
    folder = cache / release.version
    download_and_unpack(release.spec, cache / "wheels", folder)
    paths = [str(folder)]
    if release.numpy1:
        download_and_unpack(NUMPY1_SPEC, cache / "wheels", cache / "numpy1")
        paths.append(str(cache / "numpy1"))
    extensions = folder / "onnxruntime" / "training" / "ortmodule" / "torch_cpp_extensions"
    if not any(extensions.glob("*.so")):
        log(f"building the C++ extensions of {release.version} (a few minutes)")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        mode = "cpu-only" if release.cuda_wheel else "all"
        run_checked([sys.executable, "-c", _BUILD_SNIPPET, mode], env=env, cwd=cache)
    return paths


def interpreter(release: Release, paths: list[str], cache: Path) -> str:
    """The interpreter given to ``memopt probe --python``: this one, with ``paths`` put on PYTHONPATH.

    The parent ``memopt`` CLI must not see these paths: it imports pandas, which fails
    under NumPy 1.x; only the child that runs ORTModule needs the old release and NumPy.
    """
    if not paths:
        return sys.executable
    wrapper = cache / f"python-{release.version}"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"export PYTHONPATH='{paths[0]}'\"${{PYTHONPATH:+:$PYTHONPATH}}\"'{''.join(':' + p for p in paths[1:])}'\n"
        f"exec '{sys.executable}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return str(wrapper)


# --------------------------------------------------------------------------- reading logs


def clean(text: str) -> str:
    return ANSI.sub("", text).replace("\r\n", "\n")


def plan_table(text: str) -> list[dict[str, Any]]:
    """Rows of the Python feature table's Plan sub-table (1.17+)."""
    rows = []
    for match in re.finditer(
        r"^ - Plan (\d+)\s+:\s+(ON|OFF)\s+:\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$", clean(text), re.MULTILINE
    ):
        rows.append({
            "plan": int(match[1]), "on": match[2] == "ON", "config": match[3], "freq": int(match[4]),
            "max_saving": match[5], "saving_symbolic": match[6],
        })
    return rows


def format_a_blocks(text: str) -> list[dict[str, Any]]:
    """Subgraph blocks of every "MemoryOptimizer Summary" (≤1.16), raw or re-wrapped, in order."""
    blocks: list[dict[str, Any]] = []
    section = ""
    for line in clean(text).splitlines():
        body = line.strip()
        if body.startswith("########") and body.endswith("########"):
            section = body.strip("#")
        elif body.startswith("Subgraph: "):
            blocks.append({"section": section, "subgraph": body.removeprefix("Subgraph: ").strip()})
        elif body.startswith("OptimizationType: ") and blocks:
            blocks[-1]["optimization_type"] = body.removeprefix("OptimizationType: ")
        elif body.startswith("PatternShape:") and blocks:
            frequency = re.search(r"Frequency:(\d+)", body)
            blocks[-1]["patterns"] = blocks[-1].get("patterns", 0) + 1
            blocks[-1]["frequency"] = blocks[-1].get("frequency", 0) + (int(frequency[1]) if frequency else 0)
    return blocks


def log_facts(text: str) -> dict[str, Any]:
    """Short facts read off a log with plain regexes, for tests to check parsers against."""
    plain = clean(text)
    rows = plan_table(plain)
    memory_row = re.search(r"^Memory Optimizer\s+:\s+(ON|OFF)\s+:\s+(.*?)\s*$", plain, re.MULTILINE)
    dims = re.search(r"symbolic dim values:\s*\n\s*(.*?)\s*$", plain, re.MULTILINE)
    errors = [line.strip() for line in plain.splitlines() if re.match(r"^\w*(Error|Exception|RuntimeException)\b.*:", line.strip())]
    blocks = format_a_blocks(plain)
    facts: dict[str, Any] = {
        "memory_optimizer_summaries": plain.count("MemoryOptimizer Summary:"),
        "memory_insight_summaries": plain.count("MemoryInsight Summary"),
        "format_a_subgraph_blocks": len(blocks),
        "format_a_blocks": blocks,
        "insight_options": len(re.findall(r"^\|\s+\|>>Option \d+", plain, re.MULTILINE)),
        "insight_status": [m.strip() for m in re.findall(r"^\|\s+\|  Status\s+: (.*?)\s*\|$", plain, re.MULTILINE)],
        "user_config_lines": re.findall(r"MemoryInsight Summary - User config(?: file path)?: (.*)$", plain, re.MULTILINE),
        "plan_rows": len(rows),
        "plans_on": sum(row["on"] for row in rows),
        "plans": rows,
        "memory_optimizer_row": (memory_row[1] + " : " + memory_row[2]) if memory_row else None,
        "first_batch_dims": dims[1].rstrip(",") if dims else None,
        "recomputed_node_lines": len(re.findall(r"is Recomputed$|is applying following optimization", plain, re.MULTILINE)),
        "total_recomputed_nodes": [int(n) for n in re.findall(r"Total number of recomputed nodes: (\d+)", plain)],
        "no_boundary_warning": "No transformer layer boundary nodes found" in plain,
        "python_logger_rewrap": "[session creation] Filtered logs" in plain,
        "error_lines": errors[-3:],
    }
    return facts


# --------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    name: str
    levels: list[str]
    env: dict[str, str] = field(default_factory=dict)
    config_text: str | None = None  # 1.19: content of the JSON config file
    note: str = ""


def subgraphs_printed(text: str, release: Release) -> tuple[list[tuple[str, int]], list[str]]:
    """(recompute subgraphs with freq, compromise subgraphs) ORT printed in a no-config log."""
    if release.minor >= (1, 17):
        recompute, compromise = [], []
        for row in plan_table(text):
            for key in row["config"].split(","):
                subgraph, kind, _ = key.rsplit(":", 2)
                if kind == "1" and all(s != subgraph for s, _ in recompute):
                    recompute.append((subgraph, row["freq"]))
                elif kind == "2" and subgraph not in compromise:
                    compromise.append(subgraph)
        return recompute, compromise
    blocks = format_a_blocks(text)
    recompute_a: list[tuple[str, int]] = []
    compromise_a: list[str] = []
    for block in blocks:
        if block["section"] == "Recompute" and all(s != block["subgraph"] for s, _ in recompute_a):
            recompute_a.append((block["subgraph"], block.get("frequency", 0)))
        elif block["section"] == "RecomputeWithCompromise" and block["subgraph"] not in compromise_a:
            compromise_a.append(block["subgraph"])
    return recompute_a, compromise_a


def config_entries(release: Release, recompute: list[tuple[str, int]], compromise: list[str]) -> tuple[list[str], str]:
    """A valid config from printed subgraphs: a partial count, an all-count, a type 0 / type 2 entry."""
    if not recompute:
        return [], "ORT printed no recompute subgraph"
    ranked = sorted(recompute, key=lambda item: -item[1])  # stable: printed order among equals
    partial = ranked[0][0]
    rest = [s for s, _ in recompute if s != partial]
    if release.minor >= (1, 17) and compromise:  # keep the type-2 entry's subgraph unique in the config
        rest = [s for s in rest if s != compromise[0]] + [s for s in rest if s == compromise[0]]
    entries = [f"{partial}:1:2"]
    notes = [f"{partial}:1:2 is a partial count"]
    if rest:
        entries.append(f"{rest[0]}:1:-1")
    if release.minor >= (1, 17):
        if compromise:
            entries.append(f"{compromise[0]}:2:-1")
            if any(e.rsplit(":", 2)[0] == compromise[0] for e in entries[:-1]):
                notes.append(f"{compromise[0]} appears twice (types 1 and 2): ORT keeps the last; "
                             "the Python Plan table still shows both ON")
        elif len(rest) > 1:
            entries.append(f"{rest[1]}:2:-1")
            notes.append(f"ORT printed no compromise plan: {rest[1]}:2:-1 names a recompute-only subgraph (matches nothing)")
    else:
        if compromise and compromise[0] not in (partial, *rest[:1]):
            entries.append(f"{compromise[0]}:1:-1")
            notes.append(f"{compromise[0]} is from the RecomputeWithCompromise section")
        elif compromise:
            notes.append(f"{compromise[0]}:1 also selects its RecomputeWithCompromise section (same subgraph string)")
        unused = [s for s in rest[1:] if s not in compromise[:1]]
        if unused:
            entries.append(f"{unused[0]}:0:-1")
    return entries, "; ".join(notes)


def scenarios(release: Release, recipe: str, no_config_log: str, config_dir: Path) -> list[Scenario]:
    recompute, compromise = subgraphs_printed(no_config_log, release)
    entries, note = config_entries(release, recompute, compromise)
    first = recompute[0][0] if recompute else "Gelu+"
    minor = release.minor
    # 1.16 VERBOSE (raw TAB form of the C++ summary) for gpt only: VERBOSE logs are large.
    verbose_116 = minor == (1, 16) and recipe == "gpt"
    config_level = ["INFO", "DEVINFO"] if minor >= (1, 17) else ["INFO", "VERBOSE"] if verbose_116 else ["INFO"]
    result: list[Scenario] = []

    def json_file(name: str, content: str) -> str:
        path = config_dir / f"{recipe}-{name}.json"
        path.write_text(content)
        return str(path)

    if entries:
        if minor >= (1, 19):
            text = json.dumps([entries[0], ",".join(entries[1:])])
            result.append(Scenario("config", config_level, {"ORTMODULE_MEMORY_OPT_CONFIG": json_file("config", text)}, text, note))
        else:
            result.append(Scenario("config", config_level, {"ORTMODULE_MEMORY_OPT_CONFIG": ",".join(entries)}, note=note))
    # DEVINFO of the level runs (the C++ summary of the generated config) for gpt only: size budget.
    level_levels = ["INFO", "DEVINFO"] if recipe == "gpt" else ["INFO"]
    if minor >= (1, 17):
        result.append(Scenario("level1", level_levels, {"ORTMODULE_MEMORY_OPT_LEVEL": "1"}))
    if minor >= (1, 18):
        result.append(Scenario("level2", level_levels, {"ORTMODULE_MEMORY_OPT_LEVEL": "2"}))
    # bad configs fail the same way for every recipe: not for bert, to keep sample_logs/ small.
    bad = {} if recipe == "bert" else {"bad-fields": f"{first}:1", "bad-nonnumeric": f"{first}:1:x"}
    for name, value in bad.items():
        if minor >= (1, 19):
            text = json.dumps([value])
            result.append(Scenario(name, ["INFO"], {"ORTMODULE_MEMORY_OPT_CONFIG": json_file(name, text)}, text))
        else:
            result.append(Scenario(name, ["INFO"], {"ORTMODULE_MEMORY_OPT_CONFIG": value}))
    if minor >= (1, 19) and bad:
        text = f"{first}:1:-1\n"
        result.append(Scenario("bad-notjson", ["INFO"], {"ORTMODULE_MEMORY_OPT_CONFIG": json_file("bad-notjson", text)}, text,
                               "file content is a 1.18-style string, not JSON"))
        result.append(Scenario("bad-plainstring", ["INFO"], {"ORTMODULE_MEMORY_OPT_CONFIG": f"{first}:1:-1"},
                               note="1.18-style string in the env var: 1.19 takes it as a file path"))
    return result


# --------------------------------------------------------------------------- running


class Capture:
    def __init__(self, cache: Path, out: Path, work: Path) -> None:
        self.cache = cache
        self.out = out
        self.work = work
        self.entries: list[dict[str, Any]] = []
        # torch and transformers print their own paths (the shared environment's site-packages)
        packages = {str(Path(p).resolve()): "<site-packages>" for p in site.getsitepackages() + _imported_from("torch")}
        self.replacements = sorted(
            {**packages, str(cache.resolve()): "<ort-cache>", str(REPO): "<repo>", str(Path.home()): "~"}.items(),
            key=lambda item: -len(item[0]),
        )

    def sanitize(self, text: str, run_dir: Path) -> str:
        text = text.replace(str(run_dir), "<run>")
        for old, new in self.replacements:
            text = text.replace(old, new)
        return text

    def probe(self, release: Release, paths: list[str], recipe: str, level: str, env: dict[str, str], label: str) -> tuple[Path, dict[str, Any]]:
        runs = self.work / release.version / label
        if runs.exists():
            shutil.rmtree(runs)
        runs.mkdir(parents=True)
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMODULE_") and k != "PYTHONPATH"}
        child_env.update(env)
        cmd = [sys.executable, "-m", "memopt", "probe", *RECIPES[recipe], "--batch", str(BATCH), "--steps", "1",
               "--device", "cpu", "--log-level", level, "--runs-dir", str(runs), "--timeout", "900",
               "--python", interpreter(release, paths, self.cache)]
        log(f"{release.version} {label}: {' '.join(f'{k}={v}' for k, v in env.items())}")
        done = subprocess.run(cmd, env=child_env, cwd=REPO, capture_output=True, text=True)
        run_dirs = [p for p in runs.iterdir() if p.is_dir()]
        if len(run_dirs) != 1:
            raise RuntimeError(f"probe made no run folder (exit {done.returncode}): {done.stderr[-2000:]}")
        run_json = json.loads((run_dirs[0] / "run.json").read_text())
        run_json["probe_exit"] = done.returncode
        return run_dirs[0], run_json

    def record(self, release: Release, paths: list[str], recipe: str, scenario: Scenario, level: str) -> tuple[str, Path]:
        label = f"{recipe}-{scenario.name}-{level.lower()}"
        run_dir, run_json = self.probe(release, paths, recipe, level, scenario.env, label)
        text = self.sanitize((run_dir / "ort.log").read_text(errors="replace"), run_dir)
        target = self.out / release.version / f"{label}.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        result = run_json.get("result", {})
        self.entries.append({
            "file": str(target.relative_to(self.out)),
            "kind": "log",
            "version": release.version,
            "package": release.spec.partition("==")[0],
            "recipe": recipe,
            "size": SIZE,
            "probe_args": RECIPES[recipe],
            "batch": BATCH,
            "scenario": scenario.name,
            "env": {k: self.sanitize(v, run_dir) for k, v in scenario.env.items()},
            "config_file_content": scenario.config_text,
            "log_level": level,
            "status": result.get("status"),
            "returncode": result.get("returncode"),
            "error": self.sanitize(result["error"], run_dir) if result.get("error") else None,
            "note": scenario.note,
            "facts": log_facts(text),
        })
        return text, run_dir

    def release(self, release: Release, recipes: Sequence[str]) -> None:
        paths = prepare(release, self.cache)
        config_dir = self.work / release.version / "configs"
        config_dir.mkdir(parents=True, exist_ok=True)
        for recipe in recipes:
            base = Scenario("no-config", ["INFO"])
            text, run_dir = self.record(release, paths, recipe, base, "INFO")
            graph = run_dir / "onnx" / EXECUTION_GRAPH
            if graph.is_file():
                target = self.out / "graphs" / release.version / f"{recipe}.onnx"
                target.parent.mkdir(parents=True, exist_ok=True)
                copy_graph(graph, target)
                self.entries.append({
                    "file": str(target.relative_to(self.out)), "kind": "graph", "version": release.version,
                    "package": release.spec.partition("==")[0], "recipe": recipe, "size": SIZE, "probe_args": RECIPES[recipe], "batch": BATCH,
                    "scenario": "no-config", "env": {}, "log_level": "INFO", "status": "ok", "returncode": 0,
                    "note": f"{EXECUTION_GRAPH} of the run logged in {release.version}/{recipe}-no-config-info.log",
                })
            session_input = run_dir / "onnx" / SESSION_INPUT_GRAPH
            if graph.is_file() and session_input.is_file():
                target = self.out / "graphs" / release.version / SESSION_INPUTS / f"{recipe}.onnx"
                target.parent.mkdir(parents=True, exist_ok=True)
                copy_graph(session_input, target, weights=False)
                self.entries.append({
                    "file": str(target.relative_to(self.out)), "kind": "graph", "version": release.version,
                    "package": release.spec.partition("==")[0], "recipe": recipe, "size": SIZE, "probe_args": RECIPES[recipe], "batch": BATCH,
                    "scenario": "no-config", "env": {}, "log_level": "INFO", "status": "ok", "returncode": 0,
                    "note": f"{SESSION_INPUT_GRAPH} (without weights) of the run logged in {release.version}/{recipe}-no-config-info.log",
                })
            if release.minor == (1, 16) and recipe == "gpt":
                self.record(release, paths, recipe, base, "VERBOSE")
            if recipe in CHEAP:
                continue
            for scenario in scenarios(release, recipe, text, config_dir):
                for level in scenario.levels:
                    self.record(release, paths, recipe, scenario, level)


def copy_graph(source: Path, target: Path, weights: bool = True) -> None:
    """Copy a graph without its nodes' doc strings (the exporter's Python stack traces: most
    of the file, and nothing ORT's analysis reads); unless ``weights``, also without its
    initializers and value infos (only its nodes are read)."""
    model = onnx.load(str(source))
    for node in model.graph.node:
        node.doc_string = ""
    if not weights:
        del model.graph.initializer[:]
        del model.graph.value_info[:]
    onnx.save(model, str(target))


def write_manifest(out: Path, entries: list[dict[str, Any]], redone: set[tuple[str, str]]) -> None:
    """Write MANIFEST.json: ``entries`` plus the old ones of (version, recipe) pairs not re-run."""
    path = out / "MANIFEST.json"
    kept: list[dict[str, Any]] = []
    if path.is_file():
        old = json.loads(path.read_text()).get("files", [])
        kept = [e for e in old if (e.get("version"), e.get("recipe")) not in redone]
    torch_version = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    manifest = {
        "generated_by": "sample_logs/capture.py",
        "date": date.today().isoformat(),
        "torch": torch_version,
        "python": ".".join(map(str, sys.version_info[:3])),
        "device": "cpu",
        "facts_note": "facts are read off each log by capture.py's plain regexes (ANSI codes stripped), not by memopt's parser",
        "files": sorted(kept + entries, key=lambda e: (e["version"], e["file"])),
    }
    path.write_text(json.dumps(manifest, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=list(RELEASES), choices=list(RELEASES))
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "memopt" / "ort",
                        help="where wheels are downloaded, unpacked and built (outside the repository)")
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: sample_logs/)")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memopt-capture-runs-") as work:
        capture = Capture(args.cache, args.out.resolve(), Path(work))
        failed: list[str] = []
        for version in args.versions:
            try:
                capture.release(RELEASES[version], args.recipes)
            except (subprocess.CalledProcessError, RuntimeError, OSError) as err:
                log(f"{version} failed: {err}")
                failed.append(version)
        redone = {(v, r) for v in args.versions if v not in failed for r in args.recipes}
        write_manifest(capture.out, capture.entries, redone)
    if failed:
        log(f"not captured: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
