"""Parser throughput and memory on large logs built by repeating the real sample logs.

    .venv/bin/python bench/bench_parse.py [--sizes 10 100] [--repeats 3]

Two kinds of log per size (MB): "all samples" concatenates every log in sample_logs/ (all
releases, all formats) until the size is reached, so the summaries found grow with it;
"one run, long" is one real 1.19 log padded in the middle with the real ORT INFO lines of
its session (graph-transformer lines), so it holds two summaries whatever its size: what a
long training run's log looks like.

In-process it times ``memopt.backends.ort.logparse.parse_file`` (median of --repeats runs, min-max; wall
clock and the process's CPU time, which a busy machine inflates less) and measures peak
Python memory with tracemalloc. Through the CLI it runs ``python -m memopt parse LOG`` (table
output to /dev/null) and reports the wall time and the child's CPU time (user + system),
start-up included, and the child's peak RSS.
Reading is streamed, so memory follows what is found (the summaries kept), not the file's
size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from memopt.backends.ort.logparse import parse_file

SAMPLES = Path(__file__).parent.parent / "sample_logs"


def all_samples(path: Path, megabytes: int) -> int:
    sources = [p.read_bytes() for p in sorted(SAMPLES.glob("*/*.log"))]
    target, written = megabytes * 2**20, 0
    with path.open("wb") as out:
        while written < target:
            for text in sources:
                out.write(text)
                written += len(text)
    return written


def one_run_long(path: Path, megabytes: int) -> int:
    log = (SAMPLES / "1.19.2" / "gpt-config-devinfo.log").read_bytes()
    padding = b"".join(line for line in log.splitlines(keepends=True) if b"graph_transformer.cc" in line)
    target, written = megabytes * 2**20, 2 * len(log)
    with path.open("wb") as out:
        out.write(log)
        while written < target:
            out.write(padding)
            written += len(padding)
        out.write(log)
    return written


KINDS = {"all samples": all_samples, "one run, long": one_run_long}


def cli_run(path: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MiB) of ``python -m memopt parse PATH``."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "memopt", "parse", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"memopt parse {path} failed")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        "| log | size (MB) | summaries | in-process wall (s) | MB/s | CPU (s) | MB/s by CPU | peak memory (MiB) "
        "| CLI wall (s) | CLI MB/s | CLI CPU (s) | CLI MB/s by CPU | CLI peak RSS (MiB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for (kind, build), megabytes in ((k, m) for k in KINDS.items() for m in args.sizes):
            path = Path(folder) / f"big-{megabytes}.log"
            size = build(path, megabytes) / 2**20
            walls, cpus, cli_walls, cli_cpus, cli_rss = [], [], [], [], []
            for _ in range(args.repeats):
                started, cpu_started = time.perf_counter(), time.process_time()
                result = parse_file(path)
                walls.append(time.perf_counter() - started)
                cpus.append(time.process_time() - cpu_started)
                seconds, cpu, rss = cli_run(path)
                cli_walls.append(seconds)
                cli_cpus.append(cpu)
                cli_rss.append(rss)
            tracemalloc.start()
            parse_file(path)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(
                f"| {kind} | {size:.0f} | {len(result.summaries)} | {spread(walls)} | {size / statistics.median(walls):.0f} "
                f"| {spread(cpus)} | {size / statistics.median(cpus):.0f} | {peak / 2**20:.1f} "
                f"| {spread(cli_walls)} | {size / statistics.median(cli_walls):.0f} "
                f"| {spread(cli_cpus)} | {size / statistics.median(cli_cpus):.0f} | {max(cli_rss):.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
