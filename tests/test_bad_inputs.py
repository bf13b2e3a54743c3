"""Every row of the bad-input matrix (tests/bad_inputs.py) through the real command line in a subprocess: a bad
input gives one line naming the file and the problem, a non-zero exit, no traceback and no partial output; a
legal but unusual input (odd size, grayscale, 4-channel video) is processed completely.

The rows' processes start together (a thread per CPU waits on them), each in its own folder; each test checks
its own row's outcome."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
import pytest

from bad_inputs import MARKER, ROWS, Outcome, Row, make_shared, run_row


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Outcome]]]:
    """Row id -> the future outcome of every row selected in this session, all started at once."""
    selected = {item.callspec.params["row"].id for item in request.session.items
                if getattr(item, "callspec", None) is not None and "row" in item.callspec.params}
    root = tmp_path_factory.mktemp("bad-inputs")
    shared = make_shared(root / "shared")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        yield {row.id: pool.submit(run_row, row, root / row.id, shared) for row in ROWS if row.id in selected}


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_gives_one_line_and_leaves_nothing_behind(row: Row, outcomes: dict[str, Future[Outcome]]) -> None:
    outcome = outcomes[row.id].result()
    assert not outcome.problems(), (outcome.problems(), outcome.stderr[-2000:])
    assert outcome.returncode == 0 if row.handled else outcome.returncode != 0
    assert not (outcome.folder / MARKER).exists(), "a loader executed the pickle payload in the file"


def test_row_ids_are_unique() -> None:
    assert len({row.id for row in ROWS}) == len(ROWS)
