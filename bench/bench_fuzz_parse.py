"""Fuzzing ``memopt parse`` with mutated real logs: how many end in a traceback (target: 0).

    .venv/bin/python bench/bench_fuzz_parse.py [--mutants 10000] [--cli 100] [--seed 0]

Every mutant starts from a real log in sample_logs/ (all releases) cut to the region around
its memory-optimizer report, then gets 1-30 mutations: lines deleted, duplicated, cut or
swapped; characters inserted; and the hostile texts a fuzz run found (numbers of thousands
of digits, ``1e400``, ``²``, ``1**1**…`` chains, 2,000-term sums, deep parentheses, rich
markup such as ``[/x]``, NUL bytes, ANSI codes, rank tags, CR line ends, per-step memory
lines with damaged figures).

In-process, each mutant runs through the CLI's own entry (typer's ``CliRunner`` on
``memopt.cli.app``) in one of the three output modes in turn (table, ``--json``, ``--csv``);
an exception other than ``SystemExit`` or ``MemoptError`` (which ``memopt.cli.main`` prints
as one line) is a traceback. The nastiest mutants (slowest
in-process, then most warnings) then run through ``python -m memopt parse`` as real
subprocesses in all three modes; "Traceback" on stderr or an exit status other than 0 and 2
counts. Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

import memopt.cli.parse  # noqa: F401  (registers the command)
from memopt.cli import app
from memopt.errors import MemoptError

SAMPLES = Path(__file__).parent.parent / "sample_logs"
MODES = ((), ("--json",), ("--csv",))
HOSTILE = (
    "9" * 5000,
    "1e400*d0",
    "1e400*input_ids_dim0",
    "²",
    "1" + "**1" * 3000,
    "+".join(["input_ids_dim0"] * 2000),
    "(" * 3000 + "a" + ")" * 3000,
    "-" * 5000 + "a",
    "99999999999999999999999",
    "[/x]",
    "[bold red]markup[/]",
    "[enforce fail at alloc_cpu.cpp:117]",
    "\x00",
    "\x1b[31m",
    "\r",
    "Max(" * 500 + "1" + ")" * 500,
    "2**64**64",
    "nan",
    "inf",
    "1/0",
)
# Lines a fuzzer should meet too: per-step memory lines (ORT 1.17-1.18 and 1.19 forms) and
# rank tags, which no sample log holds.
EXTRA_LINES = (
    "[0/2] step 1 memory (MiB) | phase: pre_forward | allocated: 10 | max allocated: 12 | cached: 20 "
    "| max cached: 20 | inactive: 0 | max inactive: 0",
    "rank-0 step 3 memory (MiB) | phase: post_backward | allocated: 900 | max allocated: 1200 | cached: 1300 "
    "| max cached: 1400 | inactive: 5 | max inactive: 9 | param: 400 | grad: 400 | buffer: 1",
    "[rank1]: Memory Optimizer     :  ON   :  Memory Optimization Level: [USER_SPECIFIED], Optimization Config: [x]",
)


@dataclass
class Outcome:
    name: str
    seconds: float
    warnings: int
    traceback: str | None


def sample_regions() -> list[tuple[str, list[str]]]:
    """Each real log, cut to 300 lines before and after its first report line (whole if short)."""
    regions = []
    for path in sorted(SAMPLES.glob("*/*.log")):
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        marks = [i for i, line in enumerate(lines) if "Summary" in line or "Memory Optimizer" in line]
        centre = marks[0] if marks else len(lines) // 2
        regions.append((f"{path.parent.name}/{path.name}", lines[max(0, centre - 300) : centre + 300]))
    return regions


def mutate(rng: random.Random, lines: list[str]) -> list[str]:
    lines = list(lines)
    for _ in range(rng.randint(1, 30)):
        if len(lines) < 2:
            break
        index = rng.randrange(len(lines))
        operation = rng.randrange(9)
        if operation == 0:
            del lines[index]
        elif operation == 1:
            lines.insert(index, lines[rng.randrange(len(lines))])
        elif operation == 2:
            lines[index] = lines[index][: rng.randrange(len(lines[index]) + 1)]
        elif operation == 3:
            other = rng.randrange(len(lines))
            lines[index], lines[other] = lines[other], lines[index]
        elif operation == 4:
            position = rng.randrange(len(lines[index]) + 1)
            character = rng.choice("|:=()*x \t0123456789,%[]-+.e/\x1b\x00²")
            lines[index] = lines[index][:position] + character + lines[index][position:]
        elif operation in (5, 6):
            # Replace a number or a word of a report line with hostile text.
            words = lines[index].split(" ")
            target = rng.randrange(len(words))
            words[target] = rng.choice(HOSTILE)
            lines[index] = " ".join(words)
        elif operation == 7:
            lines.insert(index, rng.choice(EXTRA_LINES))
        else:
            tag = rng.choice(("[rank0]: ", "[rank1]: ", "[1,0]<stdout>:", "3: "))
            lines[index] = tag + lines[index]
    return lines


def run_in_process(runner: CliRunner, path: Path, mode: tuple[str, ...]) -> tuple[float, int, str | None]:
    started = time.perf_counter()
    result = runner.invoke(app, ["parse", str(path), *mode], catch_exceptions=True)
    seconds = time.perf_counter() - started
    failure = None
    if result.exception is not None and not isinstance(result.exception, (SystemExit, MemoptError)):
        failure = f"{type(result.exception).__name__}: {str(result.exception)[:200]}"
    return seconds, result.output.count("warning:"), failure


def run_cli(path: Path, mode: tuple[str, ...]) -> str | None:
    completed = subprocess.run(
        [sys.executable, "-m", "memopt", "parse", str(path), *mode], capture_output=True, timeout=300
    )
    stderr = completed.stderr.decode(errors="replace")
    if "Traceback" in stderr or completed.returncode not in (0, 2):
        return f"rc {completed.returncode}: {stderr.strip().splitlines()[-1][:200] if stderr.strip() else ''}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mutants", type=int, default=10_000)
    parser.add_argument("--cli", type=int, default=100, help="how many of the nastiest mutants to run as subprocesses")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    regions = sample_regions()
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    outcomes: list[Outcome] = []
    nastiest: list[tuple[float, int, int, str, str]] = []  # a heap of the slowest, text kept
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mutant.log"
        for index in range(args.mutants):
            name, lines = regions[index % len(regions)]
            text = "\n".join(mutate(rng, lines)) + "\n"
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
            seconds, warnings, failure = run_in_process(runner, path, MODES[index % len(MODES)])
            outcomes.append(Outcome(name, seconds, warnings, failure))
            heapq.heappush(nastiest, (seconds, warnings, index, name, text))
            if len(nastiest) > args.cli:
                heapq.heappop(nastiest)
        in_process_wall = time.perf_counter() - started
        failures = [outcome for outcome in outcomes if outcome.traceback]
        cli_failures: list[str] = []
        cli_started = time.perf_counter()
        for _, _, index, name, text in nastiest:
            path = Path(folder) / f"nasty-{index}.log"
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
            for mode in MODES:
                if (problem := run_cli(path, mode)) is not None:
                    cli_failures.append(f"{name} {' '.join(mode) or 'table'}: {problem}")
        cli_wall = time.perf_counter() - cli_started
    times = [outcome.seconds for outcome in outcomes]
    print(f"seed {args.seed}; {len(regions)} real logs (all releases) as seeds")
    print()
    print("| run | mutants | invocations | tracebacks | median time per invocation (ms) | slowest (ms) | wall (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(
        f"| in-process (CliRunner; table, --json, --csv in turn) | {len(outcomes):,} | {len(outcomes):,} "
        f"| {len(failures)} | {statistics.median(times) * 1000:.1f} | {max(times) * 1000:.0f} | {in_process_wall:.0f} |"
    )
    print(
        f"| `python -m memopt parse`, nastiest {len(nastiest)} × 3 modes | {len(nastiest)} | {3 * len(nastiest)} "
        f"| {len(cli_failures)} | – | – | {cli_wall:.0f} |"
    )
    for outcome in failures[:20]:
        print(f"in-process traceback: {outcome.name}: {outcome.traceback}")
    for problem in cli_failures[:20]:
        print(f"CLI traceback: {problem}")


if __name__ == "__main__":
    main()
