"""The hypothesis profile a run gets (``tests/conftest.py``): derandomised under CI and ``nox -s tests``."""

from __future__ import annotations

import hypothesis
import pytest

from tests.conftest import hypothesis_profile


@pytest.mark.parametrize(
    ("env", "profile"),
    [
        ({}, "default"),
        ({"CI": ""}, "default"),
        ({"CI": "0"}, "default"),
        ({"CI": "false"}, "default"),
        ({"CI": "true"}, "ci"),
        ({"CI": "1"}, "ci"),
        ({"JARP_HYPOTHESIS_PROFILE": "ci"}, "ci"),
        ({"JARP_HYPOTHESIS_PROFILE": "default", "CI": "true"}, "default"),
    ],
)
def test_profile_choice(env: dict[str, str], profile: str) -> None:
    assert hypothesis_profile(env) == profile


def test_ci_profile_is_derandomised_without_deadline() -> None:
    ci = hypothesis.settings.get_profile("ci")
    assert ci.derandomize
    assert ci.deadline is None
    assert ci.database is None  # nothing to replay: the examples follow from the test's code


def test_this_run_has_the_profile_its_environment_asks_for() -> None:
    expected = hypothesis.settings.get_profile(hypothesis_profile())
    assert hypothesis.settings.default.derandomize == expected.derandomize
