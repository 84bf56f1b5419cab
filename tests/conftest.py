"""Fixtures shared across test modules."""
import pytest


@pytest.fixture(scope="session")
def rule_replay_harness(tmp_path_factory):
    """tests/rule_replay_harness.cc built once for the session (every rule's replay_row
    hook next to the step-by-step replay); skips without a C++ compiler."""
    from optimizer_rule_runs import build_replay_harness  # imports MXNet: only when asked
    lib = build_replay_harness(tmp_path_factory.mktemp("rule_replay_harness"))
    if lib is None:
        pytest.skip("no C++ compiler to build tests/rule_replay_harness.cc")
    return lib
