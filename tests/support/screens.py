"""The tune screen as text, for Textual pilot tests: read off its SVG screenshot, and
normalised for comparing with a committed snapshot."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from memopt.tui.app import TuneApp

__all__ = ["assert_snapshot", "drawn_screen", "normalise", "screen_text"]

SNAPSHOTS = Path(__file__).resolve().parent.parent / "snapshots"


def screen_text(app: TuneApp) -> str:
    """The screen as plain text, read off Textual's SVG screenshot (one line per row)."""
    svg = app.export_screenshot()
    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text[^>]*\bx="([\d.]+)"[^>]*\by="([\d.]+)"[^>]*>([^<]*)</text>', svg):
        rows.setdefault(float(y), []).append((float(x), text))
    lines = ["".join(t for _, t in sorted(parts)) for _, parts in sorted(rows.items())]
    return "\n".join(
        line.replace("&#160;", " ").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").rstrip()
        for line in lines
    )


async def drawn_screen(app: TuneApp, pilot: Pilot[None]) -> tuple[str, str]:
    """The SVG screenshot and its text once the footer, the last widget to render, is drawn."""
    for _ in range(50):
        await pilot.pause(0.1)
        if "Toggle plan" in screen_text(app):
            break
    return app.export_screenshot(), screen_text(app)


def normalise(text: str) -> str:
    """Numbers, bar lengths, paths and spacing vary between runs; the layout and labels must not."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"[█·▁▂▃▄▅▆▇▏▎▍▌▋▊▉]+", "▮", line)
        line = re.sub(r"\d+(\.\d+)?", "9", line)
        line = re.sub(r"(MiB|GiB|KiB|B)\b", "U", line)
        line = re.sub(r"/\S+", "/PATH", line)
        line = re.sub(r"[ ─━]{2,}", " ", line)
        # The plan table's last columns get the width its numbers leave: "type" and "recompute"
        # come cut to "ty" or "typ", "re" or "rec", as those numbers' digits vary run to run.
        line = re.sub(r" (ty|typ|type)(?=│)", " type", line)
        line = re.sub(r" (re|rec|reco|recom|recomp|recompu|recomput|recompute)(?=│)", " recompute", line)
        out.append(line.rstrip())
    return "\n".join(out) + "\n"


def assert_snapshot(name: str, svg: str, text: str) -> None:
    """The screen's text, normalised, equals the committed ``snapshots/<name>.txt``."""
    normalised = normalise(text)
    golden = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("MEMOPT_UPDATE_SNAPSHOTS") == "1":  # a deliberate change: review the .svg, commit both
        golden.write_text(normalised)
        (SNAPSHOTS / f"{name}.svg").write_text(svg)
    assert golden.is_file(), "no committed snapshot: record one with MEMOPT_UPDATE_SNAPSHOTS=1 and commit it"
    if normalised != golden.read_text():
        (SNAPSHOTS / f"{name}.last.svg").write_text(svg)
        raise AssertionError(
            f"screen changed: compare tests/snapshots/{name}.last.svg with {name}.svg "
            "(a deliberate change: rerun with MEMOPT_UPDATE_SNAPSHOTS=1)"
        )


async def wait_for(pilot: Pilot[None], condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Let the app run until ``condition`` holds; fail after ``timeout`` seconds, naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await pilot.pause(0.2)
