"""Fast unit tests of memory budgets (memopt/run/budget.py): parsing and resolving against a device."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memopt.errors import MemoptError
from memopt.run import DEFAULT_FRACTION, Budget, BudgetError, parse_budget, resolve_budget

GiB = 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.5GiB", int(2.5 * GiB)),
        ("2500MB", 2_500_000_000),
        ("123456789B", 123_456_789),
        ("1.5G", 1_500_000_000),
        ("1 KiB", 1024),
        ("3tib", 3 * 1024**4),
        ("2Gb", 2_000_000_000),  # units are bytes, whatever the case
        ("512B", 512),
        (".5MiB", 512 * 1024),
        ("  7 MB  ", 7_000_000),
    ],
)
def test_sizes_are_read_as_bytes(text: str, expected: int) -> None:
    budget = parse_budget(text)
    assert budget.bytes == expected and budget.fraction is None
    assert budget.text == text.strip()
    assert budget.bytes_of(None) == expected  # bytes need no device


@pytest.mark.parametrize(("text", "fraction"), [("80%", 0.8), ("100%", 1.0), ("0.5%", 0.005), (" 50 % ", 0.5)])
def test_percentages_are_read_as_a_fraction_of_the_device(text: str, fraction: float) -> None:
    budget = parse_budget(text)
    assert budget.bytes is None and budget.fraction == pytest.approx(fraction)
    assert budget.bytes_of(10 * GiB) == int(10 * GiB * budget.fraction)


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "80",
        "123456789",
        "0B",
        "0GiB",
        "0.1",
        "0.0000001KB",
        "0%",
        "150%",
        "100.5%",
        "2.5XB",
        "",
        "GiB",
        "-1GiB",
        "1e9",
        "5 % 5",
    ],
)
def test_unreadable_or_empty_budgets_are_refused(text: str) -> None:
    with pytest.raises(BudgetError):
        parse_budget(text)


def test_budget_errors_name_the_text_and_are_memopt_errors() -> None:
    with pytest.raises(MemoptError, match=r"'2\.5XB'.*2\.5GiB, 2500MB or 80%"):
        parse_budget("2.5XB")
    with pytest.raises(BudgetError, match="at most 100"):
        parse_budget("150%")
    with pytest.raises(BudgetError, match="more than zero"):
        parse_budget("0B")
    with pytest.raises(
        BudgetError, match="--budget 80 has no unit: write it as 80GiB, 80MiB or 80% .*or 80B for bytes"
    ):
        parse_budget("80")


@given(
    st.integers(min_value=1, max_value=10**6),
    st.sampled_from([("B", 1), ("kb", 1000), ("MB", 1000**2), ("KiB", 1024), ("MiB", 1024**2)]),
)
def test_whole_sizes_in_any_unit_are_exact(number: int, unit: tuple[str, int]) -> None:
    suffix, factor = unit
    assert parse_budget(f"{number}{suffix}").bytes == number * factor


def test_fraction_without_device_memory_is_refused() -> None:
    with pytest.raises(BudgetError, match="80%.*unknown"):
        parse_budget("80%").bytes_of(None)


def test_resolve_passes_bytes_through_on_any_device() -> None:
    budget = parse_budget("2GiB")
    assert resolve_budget(budget, "cpu", None) == 2 * GiB
    assert resolve_budget(budget, "cuda", 80 * GiB) == 2 * GiB


def test_resolve_fraction_needs_the_device_total() -> None:
    budget = parse_budget("50%")
    assert resolve_budget(budget, "cuda", 8 * GiB) == 4 * GiB
    assert resolve_budget(budget, "cpu", 16 * GiB) == 8 * GiB
    with pytest.raises(BudgetError):
        resolve_budget(budget, "cuda", None)


def test_no_budget_is_the_default_fraction_of_the_device() -> None:
    assert DEFAULT_FRACTION == 0.9
    assert resolve_budget(None, "cuda", 80 * GiB) == int(80 * GiB * 0.9)


def test_no_budget_on_cuda_with_unknown_memory_is_refused() -> None:
    for total in (None, 0):
        with pytest.raises(BudgetError, match="unknown"):
            resolve_budget(None, "cuda", total)


def test_no_budget_on_cpu_is_the_default_fraction_of_physical_memory() -> None:
    assert resolve_budget(None, "cpu", 64 * GiB) == int(64 * GiB * 0.9)
    assert resolve_budget(parse_budget("80%"), "cpu", 64 * GiB) == int(64 * GiB * 0.8)
    with pytest.raises(BudgetError, match="unknown"):
        resolve_budget(None, "cpu", None)


def test_budget_built_by_hand_resolves_like_a_parsed_one() -> None:
    assert Budget("1000B", bytes=1000).bytes_of(None) == 1000
    assert Budget("25%", fraction=0.25).bytes_of(4000) == 1000
