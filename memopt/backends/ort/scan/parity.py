"""How memopt's scan compares with the Plan table ORT printed for the same graph."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.logparse import Plan, parse_file
from memopt.backends.ort.scan import scan_graph
from memopt.backends.ort.scan.patterns import Pattern
from memopt.backends.ort.scan.savings import UNKNOWN_DIM_PREFIX
from memopt.graph.polynomial import NotPolynomialError, Polynomial

__all__ = [
    "SCENARIOS",
    "SESSION_INPUTS",
    "Parity",
    "PlanParity",
    "captured_cases",
    "captured_parity",
    "compare_plans",
    "logged_parity",
]

# The captured runs memopt is compared with (sample_logs/README.md): the scenario's name in
# the log file, and whether ORT analysed with transformer layer boundaries (LEVEL=1/2).
SCENARIOS = {"no-config": False, "level1": True, "level2": True}
# Beside each release's graphs: the graph ORTModule handed its session in the same run (its
# node positions are ORT's node indices, which break ties in some releases' node order).
SESSION_INPUTS = "session-input"
# The value an unknown dim takes when savings naming it are compared (any size ORT could see).
_UNKNOWN_DIM_VALUE = 7919


@dataclass(frozen=True)
class PlanParity:
    key: str
    in_scan: bool
    in_log: bool
    scan_frequency: int | None = None
    log_frequency: int | None = None
    saving_matches: bool | None = None  # ORT's expression is one ORT could print for the scan's plan
    saving_exact: bool | None = None  # ... and equals the exact saving (no one-output-per-node quirk)
    scan_saving: str | None = None  # memopt's figure ORT would print, as an expression
    log_saving: str | None = None  # ORT's printed expression

    @property
    def agrees(self) -> bool:
        return self.in_scan and self.in_log and self.scan_frequency == self.log_frequency and bool(self.saving_matches)

    def difference(self) -> str | None:
        """Where this row differs, in one line; None when it agrees."""
        if self.agrees:
            return None
        if not self.in_log:
            return f"{self.key}: in memopt's table (frequency {self.scan_frequency}), not in ORT's"
        if not self.in_scan:
            return f"{self.key}: in ORT's table (frequency {self.log_frequency}), not in memopt's"
        if self.scan_frequency != self.log_frequency:
            return f"{self.key}: frequency {self.scan_frequency} in memopt's table, {self.log_frequency} in ORT's"
        return f"{self.key}: saving {self.scan_saving} in memopt's table, {self.log_saving} in ORT's"


@dataclass(frozen=True)
class Parity:
    plans: tuple[PlanParity, ...]

    @property
    def agreeing(self) -> int:
        return sum(p.agrees for p in self.plans)

    @property
    def complete(self) -> bool:
        return bool(self.plans) and self.agreeing == len(self.plans)

    def differences(self) -> list[str]:
        """One line per row that differs."""
        return [line for plan in self.plans if (line := plan.difference()) is not None]


def compare_plans(patterns: Iterable[Pattern], logged: Iterable[Plan], dims: Mapping[str, int] | None = None) -> Parity:
    """Match patterns and logged plans by key (subgraph string and type).

    Savings are compared as expressions; where the log names dims the graph does not
    (ORT's names for one axis vary between runs), as values at the log's ``dims``.
    """
    # Keyed by config entry and type: ORT <= 1.16 enables compromise plans as type 1 too.
    scanned = {(p.key, int(p.kind)): p for p in patterns}
    printed = {(p.key, int(p.optimization)): p for p in logged}
    rows = []
    for key in sorted(scanned.keys() | printed.keys()):
        pattern, plan = scanned.get(key), printed.get(key)
        if pattern is None or plan is None:
            rows.append(
                PlanParity(
                    key[0],
                    pattern is not None,
                    plan is not None,
                    pattern.frequency if pattern else None,
                    plan.frequency if plan else None,
                )
            )
            continue
        logged_saving = _polynomial(plan)
        both = PlanParity(key[0], True, True, pattern.frequency, plan.frequency)
        if logged_saving is None:  # Format A (<= 1.16) prints stashed shapes, not bytes
            logged_elements = _logged_elements(plan)
            matches = logged_elements is not None and _same(logged_elements, pattern.elements, dims)
            shapes = str(logged_elements) if logged_elements is not None else None
            rows.append(replace(both, saving_matches=matches, scan_saving=str(pattern.elements), log_saving=shapes))
            continue
        renamed = logged_saving.symbols != pattern.exact.symbols
        # ORT numbers unknown dims in its own call order: any number names the same unknown dim.
        placeholders = {
            s: _UNKNOWN_DIM_VALUE
            for s in logged_saving.symbols | pattern.exact.symbols
            if s.startswith(UNKNOWN_DIM_PREFIX)
        }
        known = {**(dims or {}), **placeholders}
        at = known if renamed and logged_saving.symbols | pattern.exact.symbols <= set(known) else None
        rows.append(
            replace(
                both,
                saving_matches=pattern.ort_matches(logged_saving, at),
                saving_exact=logged_saving == pattern.exact,
                scan_saving=str(pattern.ort),
                log_saving=str(logged_saving),
            )
        )
    return Parity(tuple(rows))


def captured_cases(samples: Path) -> list[tuple[str, str, str]]:
    """(release, model, scenario) for every captured graph with a log of that scenario."""
    cases = []
    for graph in sorted(samples.glob("graphs/*/*.onnx")):
        release = graph.parent.name
        for scenario in SCENARIOS:
            if (samples / release / f"{graph.stem}-{scenario}-info.log").is_file():
                cases.append((release, graph.stem, scenario))
    return cases


def logged_parity(patterns: Iterable[Pattern], log_path: Path) -> Parity | None:
    """``patterns`` against the last Plan table ORT printed in ``log_path``; None when it printed none."""
    summaries = [s for s in parse_file(log_path).run_summaries if s.plans]
    if not summaries:
        return None
    return compare_plans(patterns, summaries[-1].plans, dict(summaries[-1].dims))


def captured_parity(samples: Path, release: str, model: str, scenario: str) -> Parity:
    """memopt's scan of a release's captured graph against the Plan table that release printed."""
    session_input = samples / "graphs" / release / SESSION_INPUTS / f"{model}.onnx"
    report = scan_graph(
        load_graph(
            samples / "graphs" / release / f"{model}.onnx",
            session_input=session_input if session_input.is_file() else None,
        ),
        release,
        layer_boundary=SCENARIOS[scenario],
    )
    return logged_parity(report.patterns, samples / release / f"{model}-{scenario}-info.log") or Parity(())


def _logged_elements(plan: Plan) -> Polynomial | None:
    total = Polynomial()
    for cluster in plan.clusters:
        for output in cluster.outputs:
            if output.element_count is None or cluster.frequency is None:
                return None
            try:
                total = total + Polynomial.from_expression(output.element_count).scale(cluster.frequency)
            except NotPolynomialError:
                return None
    return total


def _same(logged: Polynomial, scanned: Polynomial, dims: Mapping[str, int] | None) -> bool:
    if logged == scanned:
        return True
    names = logged.symbols | scanned.symbols
    return dims is not None and names <= set(dims) and logged.evaluate(dims) == scanned.evaluate(dims)


def _polynomial(plan: Plan) -> Polynomial | None:
    if plan.saving_symbolic is None:
        return None
    try:
        return Polynomial.from_expression(plan.saving_symbolic)
    except NotPolynomialError:
        return None
