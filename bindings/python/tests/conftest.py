import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import framework_groups  # noqa: E402
import harness  # noqa: E402


def pytest_configure(config):
    # One framework per pytest process (TensorFlow and torch abort together):
    # $HVD_TEST_GROUP's files only, the import guard, $HVD_TEST_REPORT.
    framework_groups.install(config)


@pytest.fixture(scope="session")
def hvdrun():
    path = harness.find_hvdrun()
    if path is None:
        pytest.fail("no hvdrun executable: build it (cmake --build <dir> --target hvdrun) or set "
                    "HVD_HVDRUN; the multi-process tests need it")
    return path


@pytest.fixture
def hvd_world():
    """The numpy API on a world of one, shut down afterwards."""
    import hvd
    hvd.init()
    yield hvd
    while hvd.is_initialized():
        hvd.shutdown()


def pytest_report_header(config):
    try:
        return [f"hvd library: {harness.C.library_path()}",
                f"hvdrun: {harness.find_hvdrun()}"]
    except Exception as e:  # reported by the tests themselves
        return [f"hvd library: not loadable ({e})"]
