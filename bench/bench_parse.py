"""Parser throughput and memory on large logs built by repeating the real sample logs.

    .venv/bin/python bench/bench_parse.py [--sizes 10 100] [--repeats 3]

For each size (MB) it concatenates every log in sample_logs/ (all releases, all formats)
until the file reaches that size, then times ``memopt.logparse.parse_file`` on it
(median of --repeats runs, min-max) and measures the parser's peak Python memory with
tracemalloc. Prints a markdown table: MB/s and peak memory should not grow with size.
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


def build_log(path: Path, megabytes: int) -> int:
    sources = [p.read_bytes() for p in sorted(SAMPLES.glob("*/*.log"))]
    target, written = megabytes * 2**20, 0
    with path.open("wb") as out:
        while written < target:
            for text in sources:
                out.write(text)
                written += len(text)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| log size (MB) | summaries | parse time (s), median [min–max] | MB/s | parser peak memory (MiB) |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for megabytes in args.sizes:
            path = Path(folder) / f"big-{megabytes}.log"
            size = build_log(path, megabytes)
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
            print(f"| {size / 2**20:.0f} | {len(result.summaries)} | {median:.2f} [{min(times):.2f}–{max(times):.2f}] "
                  f"| {size / 2**20 / median:.1f} | {peak / 2**20:.1f} |")


if __name__ == "__main__":
    main()
