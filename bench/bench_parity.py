"""Parity of memopt's scan with every ORT release's own Plan table, on the captured runs.

    .venv/bin/python bench/bench_parity.py

Reads sample_logs/ (real graphs and logs of ORT 1.15.1–1.19.2, see its README) and prints
one markdown row per release, model and scenario: plans memopt reproduces exactly (same
key and type, same frequency, savings ORT could print for memopt's plan) out of all plans
either side has (``hf-*``: tiny Hugging Face models, sample_logs/hf_tiny.py; ``*-lossonly``:
the same models with ``forward`` returning only the loss, on 1.17.3–1.19.2).
tests/backends/ort/scan/test_scan_releases.py asserts the same; tests/backends/ort/scan/test_loss_only.py the rows at the loss.
"""

from __future__ import annotations

from pathlib import Path

from memopt.backends.ort.scan.parity import captured_cases, captured_parity

SAMPLES = Path(__file__).parent.parent / "sample_logs"


def main() -> None:
    print("| ORT | model | scenario | plans agreeing | not agreeing |")
    print("|---|---|---|---:|---|")
    total = agreeing = 0
    for release, model, scenario in captured_cases(SAMPLES):
        parity = captured_parity(SAMPLES, release, model, scenario)
        total += len(parity.plans)
        agreeing += parity.agreeing
        gaps = ", ".join(f"`{p.key}`" for p in parity.plans if not p.agrees) or "-"
        print(f"| {release} | {model} | {scenario} | {parity.agreeing}/{len(parity.plans)} | {gaps} |")
    print(f"\nAll: {agreeing}/{total} plans ({100 * agreeing / total:.1f}%).")


if __name__ == "__main__":
    main()
