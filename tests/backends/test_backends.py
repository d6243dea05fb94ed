"""The back ends as the commands and the child reach them: by name, through one interface."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from memopt.backends import BackendName, backend_for, choose_backend
from memopt.child import ChildRequest
from memopt.errors import MemoptError


@pytest.mark.parametrize("name", list(BackendName))
def test_each_name_gives_its_back_end(name: BackendName) -> None:
    backend = backend_for(name)
    assert backend.name is name and backend.label


def test_an_unknown_back_end_is_one_error_naming_the_choices() -> None:
    with pytest.raises(MemoptError, match="--backend 'tf': choose ort or torch"):
        choose_backend("tf")


def test_the_asked_back_end_is_chosen_and_said() -> None:
    chosen = choose_backend("torch")
    assert chosen.name is BackendName.TORCH and chosen.backend.name is BackendName.TORCH
    assert chosen.line() == "backend: torch (--backend)"


@pytest.mark.parametrize("name", list(BackendName))
def test_the_child_reads_its_back_end_back_as_a_name(name: BackendName) -> None:
    request = ChildRequest("gpt", 2, 1, "cpu", "INFO", False, backend=name)
    read = ChildRequest(**json.loads(json.dumps(asdict(request))))
    assert read == request and read.backend is name
