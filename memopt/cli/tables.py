"""Tables whose ORT config entries survive copying: an entry is never wrapped or cut, at any
terminal width, piped or not; the other columns give way, and past the terminal's width the
lines run on rather than a column being dropped."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Column, Table

from memopt.cli import console

__all__ = ["add_entry_column", "print_table"]


def add_entry_column(table: Table, header: str, entries: Iterable[str]) -> None:
    """A column of config entries (or plan keys): each whole on one line."""
    longest = max((len(entry) for entry in entries), default=0)
    table.add_column(header, no_wrap=True, min_width=max(longest, len(header)))


def print_table(table: Table) -> None:
    """Print at the console's width, or wider where the columns' minimums need it: rich never
    draws wider than its console and would drop a column instead."""
    # A column that never wraps needs its widest cell; one that folds, its minimum. Each also
    # takes its padding and one separator.
    needed = sum(_least_width(column) + 3 for column in table.columns)
    width = console.width
    console.width = max(width, needed)
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def _least_width(column: Column) -> int:
    if not column.no_wrap:
        return column.min_width or 0
    cells = [column.header, *column.cells]
    return max(column.min_width or 0, *(console.measure(cell).maximum for cell in cells))
