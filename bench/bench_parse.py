"""Parser throughput and memory on large logs built by repeating the real sample logs.

    .venv/bin/python bench/bench_parse.py [--sizes 10 100] [--repeats 3]

Two kinds of log per size (MB): "all samples" concatenates every log in sample_logs/ (all
releases, all formats) until the size is reached, so the summaries found grow with it;
"one run, long" is one real 1.19 log padded in the middle with the real ORT INFO lines of
its session (graph-transformer lines), so it holds two summaries whatever its size. It times
``memopt.logparse.parse_file`` (median of --repeats runs, min-max) and measures peak Python
memory with tracemalloc: reading is streamed, so memory follows what is found (the
summaries kept), not the file's size.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from memopt.logparse import parse_file

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| log | size (MB) | summaries | parse time (s), median [min–max] | MB/s | peak memory (MiB) |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for (kind, build), megabytes in ((k, m) for k in KINDS.items() for m in args.sizes):
            path = Path(folder) / f"big-{megabytes}.log"
            size = build(path, megabytes)
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                result = parse_file(path)
                times.append(time.perf_counter() - started)
            tracemalloc.start()
            parse_file(path)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            median = statistics.median(times)
            print(
                f"| {kind} | {size / 2**20:.0f} | {len(result.summaries)} | {median:.2f} [{min(times):.2f}–{max(times):.2f}] "
                f"| {size / 2**20 / median:.1f} | {peak / 2**20:.1f} |"
            )


if __name__ == "__main__":
    main()
