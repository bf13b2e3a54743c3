"""Every row of the bad-input matrix (tests/bad_inputs.py) through the real command line in a subprocess: a bad
input gives one line naming the file and the problem, a non-zero exit, no traceback and no partial output; a
legal but unusual input (odd size, grayscale, 4-channel video) is processed completely.

In a plain run the selected rows' processes start together (a thread per CPU waits on them), each in its own
folder, and each test checks its own row's outcome; under pytest-xdist (which spreads the rows over workers)
each test runs its own row."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from bad_inputs import MARKER, ROWS, Outcome, Row, Shared, make_shared, run_row


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcomes]:
    """Row id -> the future outcome of every row selected in this session (none ahead of time under xdist)."""
    selected = {item.callspec.params["row"].id for item in request.session.items
                if getattr(item, "callspec", None) is not None and "row" in item.callspec.params}
    if os.environ.get("PYTEST_XDIST_WORKER"):
        selected = set()
    root = tmp_path_factory.mktemp("bad-inputs")
    shared = make_shared(root / "shared")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {row.id: pool.submit(run_row, row, root / row.id, shared) for row in ROWS if row.id in selected}
        yield Outcomes(futures, root, shared)


class Outcomes:
    """Outcomes started ahead of time, or run on request."""

    def __init__(self, futures: dict[str, Future[Outcome]], root: Path, shared: Shared) -> None:
        self.futures, self.root, self.shared = futures, root, shared

    def __getitem__(self, row: Row) -> Outcome:
        future = self.futures.get(row.id)
        return future.result() if future is not None else run_row(row, self.root / row.id, self.shared)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_gives_one_line_and_leaves_nothing_behind(row: Row, outcomes: Outcomes) -> None:
    outcome = outcomes[row]
    if outcome.skipped:
        pytest.skip(outcome.skipped)
    assert not outcome.problems(), (outcome.problems(), outcome.stderr[-2000:])
    assert outcome.returncode == 0 if row.handled else outcome.returncode != 0
    assert not (outcome.folder / MARKER).exists(), "a loader executed the pickle payload in the file"


def test_row_ids_are_unique() -> None:
    assert len({row.id for row in ROWS}) == len(ROWS)
