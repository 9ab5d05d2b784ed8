"""pytest's setup for the Python front end's tests (tests/python/test_*.py): the `ranks` marker,
the `work` folder, and no engine left alive from one test to the next.

The tests import the package from the source tree and load the library just built, and look
for neither: PYTHONPATH and ZERO_LIBRARY name them, as tests/python/run.sh sets them for ctest.
From the repository root, with a build in build/ and the tests' venv (scripts/python-test-env.sh):

    PYTHONPATH=python ZERO_LIBRARY=build/engine/libzero.so \\
        build-python-env/bin/python -m pytest tests/python

runs every 1-rank test in one process and skips the rest, saying how many ranks they need. A
test marked `@pytest.mark.ranks(N)` runs in a job of N ranks, each rank running pytest alike:

    PYTHONPATH=python ZERO_LIBRARY=build/engine/libzero.so build/tools/zero-run/zero-run -n 2 \\
        -- build-python-env/bin/python -m pytest tests/python/test_answers.py -m ranks

(`-m ranks` selects the marked tests, `-m "not ranks"` the 1-rank ones). ctest runs the modules
so, all of them in one process a rank per rank count, and a module that launches jobs of its own
alone (tests/CMakeLists.txt), with --zero-work in the build folder.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import zero
except ImportError as error:
    raise pytest.UsageError(
        f"tests/python: `import zero` failed ({error}); run pytest with PYTHONPATH=python (the "
        "package in the source tree) and ZERO_LIBRARY=build/engine/libzero.so (the library "
        "built), from the repository root") from error

from zero_checks import RANK, WORLD_SIZE


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--zero-work", metavar="DIR",
                     help="where the tests' work folders go (DIR/MODULE/TEST/rankR, emptied at "
                          "the test's start); by default under pytest's temporary folder")


def pytest_configure(config: pytest.Config) -> None:
    """In a job of several ranks, rank 0 reports as asked (-v: each test by name) and the
    others quietly (their failures and summary), so that their lines do not interleave."""
    if RANK > 0:
        config.option.verbose = min(config.option.verbose, 0) - 1


def pytest_report_header(config: pytest.Config) -> str:
    library = os.environ.get("ZERO_LIBRARY", "unset (a build of the checkout)")
    return f"zero: rank {RANK} of {WORLD_SIZE}, ZERO_LIBRARY {library}"


def ranks_of(item: pytest.Item) -> int:
    """How many ranks a test runs on: its `ranks` marker's count, else 1."""
    marker = item.get_closest_marker("ranks")
    return 1 if marker is None else int(marker.args[0])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test for another number of ranks than this job's is skipped, saying how to run it.
    Every rank decides alike, so the ranks run the same tests in the same order."""
    for item in items:
        ranks = ranks_of(item)
        if ranks != WORLD_SIZE:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {ranks} rank(s), this job has {WORLD_SIZE} (OMPI_COMM_WORLD_SIZE): "
                       f"run it under zero-run -n {ranks}, as ctest does"))


@pytest.fixture
def work(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test's own empty folder, and this rank's own: ROOT/MODULE/TEST/rankR, ROOT being
    --zero-work (ctest's: in the build folder) or pytest's temporary folder. Per rank, as no
    test's ranks write files into one folder together."""
    option = request.config.getoption("zero_work")
    root = Path(option) if option else tmp_path_factory.getbasetemp()
    test = re.sub(r"[^\w.-]+", "_", request.node.name)
    folder = root / request.path.stem / test / f"rank{RANK}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture(autouse=True)
def no_engine_outlives_its_test() -> Iterator[None]:
    """Destroys, after each test, every engine it left alive (a test that checks a refusal
    seldom destroys its engine), so that each test starts with none, as its own process did.
    Destroying is collective: every rank runs this after the same test."""
    yield
    for engine in reversed(list(zero._lifetime._live)):
        engine.destroy()
