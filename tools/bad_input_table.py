"""Run every row of the bad-input matrix (tests/bad_inputs.py) and print a markdown table: row | exit | message.

    PYTHONPATH=. python tools/bad_input_table.py [--only ID,ID]   # exit 1 if any row breaks its contract

The rows are the ones tests/test_bad_inputs.py asserts; a row that breaks its contract is marked FAILS.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bad_inputs import ROWS, make_shared, run_row, summary, table  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--only", help="comma-separated row ids (default: all)")
    args = parser.parse_args()
    wanted = set(args.only.split(",")) if args.only else None
    rows = [row for row in ROWS if wanted is None or row.id in wanted]
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as tmp:
        shared = make_shared(Path(tmp) / "shared")
        outcomes = [run_row(row, Path(tmp) / row.id, shared) for row in rows]
    print(table(outcomes))
    print()
    print(summary(outcomes))
    return 1 if any(o.problems() for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
