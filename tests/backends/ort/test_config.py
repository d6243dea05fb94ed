"""ORTMODULE_MEMORY_OPT_CONFIG codec: what ORT rejects, what it silently ignores, atomic JSON files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memopt.backends.ort.config import (
    ConfigEntry,
    ConfigError,
    PlanKey,
    export_line,
    format_config_string,
    parse_config_json,
    parse_config_string,
    plan_key,
    read_config_file,
)
from memopt.backends.ort.logparse import OptimizationType
from memopt.backends.ort.tune.export import ConfigExport, write_config
from memopt.backends.ort.version import OrtVersion, OrtVersionError
from memopt.errors import MemoptError

V1_16, V1_17, V1_18, V1_19 = (OrtVersion.parse(text) for text in ("1.16.3", "1.17", "1.18.0", "1.19.2"))
DOC_CONFIG = "BiasGelu+Cast+Cast+:1:2,Cast+:2:-1,Dropout+:0:-1"


def test_parses_the_doc_config() -> None:
    config = parse_config_string(DOC_CONFIG, V1_17)
    assert [str(entry) for entry in config.entries] == DOC_CONFIG.split(",")
    assert config.entries[1].optimization is OptimizationType.COMPROMISE
    assert any("partial counts" in warning for warning in config.warnings)
    assert any("type 0" in warning for warning in config.warnings)


@pytest.mark.parametrize(
    ("text", "version", "reason"),
    [
        ("X+:1", V1_18, "2 ':'-separated field"),
        ("X+:1:-1:0", V1_17, "4 ':'-separated field"),
        ("Cast+:2:-1", V1_16, "type 2"),
        ("X+:3:-1", V1_18, "type 3"),
        ("X+:1:-2", V1_18, "below -1"),
        ("X+:x:-1", V1_17, "Fail to convert to int from string: x"),
        ("X+:1:", V1_17, "not an integer"),
        ("X+:1:99999999999", V1_18, "not an integer"),
        ("X+:1:-1," * 300, V1_18, "2048"),
    ],
)
def test_rejects_what_ort_rejects(text: str, version: OrtVersion, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason.replace("(", r"\(")) as caught:
        parse_config_string(text, version)
    assert "\n" not in str(caught.value)


def test_the_2048_limit_is_1_17_and_1_18_only() -> None:
    long = ",".join(f"Op{i}+:1:-1" for i in range(300))
    assert len(long) > 2048
    assert len(parse_config_string(long, V1_16).entries) == 300
    assert len(parse_config_string(long, V1_19).entries) == 300


@pytest.mark.parametrize(
    ("text", "version", "warning"),
    [
        (" X+:1:-1", V1_18, "does not trim"),
        ("X+:1abc:-1", V1_18, "reads type '1abc' as 1"),
        ("X+:1:-1,,Y+:1:-1", V1_18, "empty items"),
        ("X+:1:-1,X+:2:-1", V1_18, "keeps only the last"),
        ("X+:1:0", V1_18, "all occurrences but the last"),
        ("X+:1:3", V1_19, "all occurrences"),
        ("X+:1:0", V1_16, "recomputes nothing"),
        ("", V1_18, "enables nothing"),
    ],
)
def test_warns_on_what_ort_silently_ignores(text: str, version: OrtVersion, warning: str) -> None:
    assert any(warning in message for message in parse_config_string(text, version).warnings)


def test_unknown_subgraphs_and_types_are_flagged_against_known_plans() -> None:
    known = {"Gelu+:1", "Cast+:2"}
    warnings = parse_config_string("Gelu+:1:-1,Cast+:1:-1,Nope+:1:-1", V1_18, known).warnings
    assert len(warnings) == 2
    assert "that type" in warnings[0] and "that subgraph" in warnings[1]


def test_json_config_for_1_19() -> None:
    config = parse_config_json('["BiasGelu+Cast+Cast+:1:2", "Cast+:2:-1,Dropout+:0:-1", ""]', V1_19)
    assert ",".join(map(str, config.entries)) == DOC_CONFIG


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "fails to parse"),
        ("{", "fails to parse"),
        ('{"a": 1}', "not an object"),
        ('"X+:1:-1"', "not a string"),
        ("[1]", "is a number"),
        ('["X+:1"]', "field"),
    ],
)
def test_json_errors(text: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        parse_config_json(text, V1_19)


def test_json_is_1_19_only_and_strings_are_not_1_19() -> None:
    with pytest.raises(ConfigError):
        parse_config_json("[]", V1_18)
    with pytest.raises(ConfigError):
        format_config_string([ConfigEntry("X+", OptimizationType.RECOMPUTE)], V1_19)


def test_a_written_json_config_is_atomic_and_never_clobbers(tmp_path: Path) -> None:
    entries = (ConfigEntry("Gelu+", OptimizationType.RECOMPUTE), ConfigEntry("Cast+", OptimizationType.COMPROMISE))
    target = tmp_path / "cfg.json"
    written = write_config(ConfigExport(entries, V1_19, target), overwrite=False)
    assert json.loads(target.read_text()) == ["Gelu+:1:-1", "Cast+:2:-1"]
    assert read_config_file(written, V1_19).entries == entries
    target.write_text("keep me")
    with pytest.raises(MemoptError, match="exists"):
        write_config(ConfigExport(entries, V1_19, target), overwrite=False)
    assert target.read_text() == "keep me"
    write_config(ConfigExport(entries[:1], V1_19, target), overwrite=True)
    assert json.loads(target.read_text()) == ["Gelu+:1:-1"]
    assert sorted(os.listdir(tmp_path)) == ["cfg.json"]  # no temporary file left behind


def test_format_and_export_line() -> None:
    entries = [ConfigEntry("Gelu+", OptimizationType.RECOMPUTE), ConfigEntry("Cast+", OptimizationType.COMPROMISE, 2)]
    assert format_config_string(entries, V1_17) == "Gelu+:1:-1,Cast+:2:2"
    assert export_line("Gelu+:1:-1") == "export ORTMODULE_MEMORY_OPT_CONFIG=Gelu+:1:-1"
    assert export_line("/tmp/my cfg.json") == "export ORTMODULE_MEMORY_OPT_CONFIG='/tmp/my cfg.json'"
    with pytest.raises(ConfigError, match="1.17"):
        format_config_string(entries, V1_16)


@pytest.mark.parametrize("text", ["2.0", "1.13", "1.20", "latest", ""])
def test_unsupported_versions(text: str) -> None:
    with pytest.raises(OrtVersionError):
        OrtVersion.parse(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("AB+:,-0129 x\t")), max_size=40), st.sampled_from([V1_16, V1_17, V1_19]))
def test_random_configs_raise_only_config_errors(text: str, version: OrtVersion) -> None:
    try:
        config = parse_config_string(text, version)
    except MemoptError:
        return
    # Whatever is accepted formats back to a string ORT reads the same way.
    if version.minor < 19 and config.entries:
        again = parse_config_string(format_config_string(config.entries, version), version)
        assert again.entries == config.entries


def test_plan_keys_are_built_and_read_only_through_the_ort_vocabulary() -> None:
    gelu = plan_key("Gelu+", OptimizationType.RECOMPUTE)
    assert isinstance(gelu, PlanKey) and gelu == "Gelu+:1:-1" and gelu.short == "Gelu+"
    assert ConfigEntry("Cast+", OptimizationType.COMPROMISE, 3).key == "Cast+:2:3"
    shorthand = PlanKey.from_short(["Gelu+", "Cast+:2:-1", "Add+:1:3"])
    assert shorthand == "Gelu+:1:-1,Cast+:2:-1,Add+:1:3" and shorthand.cells == ("Gelu+:1", "Cast+:2", "Add+:1")
    assert PlanKey.from_short(PlanKey(shorthand).short.split(",")) == shorthand
