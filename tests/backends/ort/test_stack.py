"""Reading the ORT training stack without importing it."""

from __future__ import annotations

import pytest

from memopt.backends.ort.stack import (
    StackError,
    StackInfo,
    check_stack,
    inspect_stack,
    torch_problem,
)


def test_this_environment_can_run_ortmodule() -> None:
    info = inspect_stack()
    assert info.ort_version == "1.19.2" and info.has_ortmodule and info.extensions_built
    check_stack(info)


@pytest.mark.parametrize("version", ["2.1.2", "2.4.1", "2.4.1+cu118", "2.6.0"])
def test_supported_torch(version: str) -> None:
    assert torch_problem(version) is None


@pytest.mark.parametrize("version", ["2.0.1", "2.7.0", "2.8.0", "2.13.0+cpu"])
def test_unsupported_torch(version: str) -> None:
    assert "cannot run ORTModule" in torch_problem(version)


def test_check_order_names_the_first_missing_piece() -> None:
    missing = StackInfo(None, None, None, False, None, False, "2.4.1")
    with pytest.raises(StackError, match="onnxruntime-training is not installed"):
        check_stack(missing)
    inference_only = StackInfo("1.19.2", "onnxruntime", None, False, None, False, "2.4.1")
    with pytest.raises(StackError, match="has no training support"):
        check_stack(inference_only)
