"""What differs between ORT releases: versions, recompute rules, config syntax, the stack.

- ``version``: ``OrtVersion``/``OrtVersionRange`` (1.14-1.19).
- ``rules``: each release family's recompute rules (which ops, which inputs ORT follows).
- ``config``: ``ORTMODULE_MEMORY_OPT_CONFIG`` entries, parsed, checked and rendered in each
  release's syntax (a string up to 1.18, a JSON file from 1.19).
- ``stack``: the installed ORT/torch pair and whether ORTModule can run with it.
- ``applied``: which of a trial's plans ORT applied (imported by its module: it reads a
  ``TrialResult``, and the child process imports this package without pydantic).
"""

from memopt.backends.ort.config import (
    ENV_VAR,
    ConfigEntry,
    ConfigError,
    OptimizationType,
    PlanCell,
    PlanKey,
    ValidatedConfig,
    export_line,
    format_config_string,
    parse_config_json,
    parse_config_string,
    plan_config_entries,
    plan_keys,
    read_config_file,
    render_json_config,
    takes_json_file,
    validate_entries,
)
from memopt.backends.ort.rules import FAMILIES, ProbeLevel, ReleaseRules, UnknownReleaseError, family_of, rules_for
from memopt.backends.ort.stack import (
    EXTENSIONS_INSTALL_COMMAND,
    TORCH_SUPPORTED,
    StackError,
    StackInfo,
    check_stack,
    inspect_stack,
    torch_problem,
)
from memopt.backends.ort.version import NEWEST_MINOR, OLDEST_MINOR, OrtVersion, OrtVersionError, OrtVersionRange

__all__ = [
    "ENV_VAR",
    "EXTENSIONS_INSTALL_COMMAND",
    "FAMILIES",
    "NEWEST_MINOR",
    "OLDEST_MINOR",
    "TORCH_SUPPORTED",
    "ConfigEntry",
    "ConfigError",
    "OptimizationType",
    "OrtVersion",
    "OrtVersionError",
    "OrtVersionRange",
    "PlanCell",
    "PlanKey",
    "ProbeLevel",
    "ReleaseRules",
    "StackError",
    "StackInfo",
    "UnknownReleaseError",
    "ValidatedConfig",
    "check_stack",
    "export_line",
    "family_of",
    "format_config_string",
    "inspect_stack",
    "parse_config_json",
    "parse_config_string",
    "plan_config_entries",
    "plan_keys",
    "read_config_file",
    "render_json_config",
    "rules_for",
    "takes_json_file",
    "torch_problem",
    "validate_entries",
]
