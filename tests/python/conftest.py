"""conftest.py: fixtures of the Python tests (run by ctest as python_tests,
with PYTHONPATH=<build>/python; see run_pytest.sh).

Every test must end with zero bytes held by keel (keel.process_bytes()),
like the C tests: sessions and outputs released, nothing leaked."""
import gc
import os

import pytest

import keel

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(HERE, "models")


def model(name):
    return os.path.join(MODELS, name)


@pytest.fixture(autouse=True)
def keel_holds_nothing_after():
    yield
    if keel.process_bytes():      # a cycle may still hold a session: collect first
        gc.collect()
    assert keel.process_bytes() == 0, "keel still holds memory after the test"
