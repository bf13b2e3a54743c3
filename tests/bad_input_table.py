"""Print the bad-input matrix (tests/bad_inputs.py) as a markdown table: row | exit | message.

    python tests/bad_input_table.py [--only ID,ID] [--list]     (or: tox -e bad-inputs [-- --only ID,ID])

Each row runs as tests/test_bad_inputs.py runs it (its command in a subprocess, in a fresh temporary folder), one
after the other; the table is followed by a one-line JSON summary. A row that breaks its contract is marked
FAILS and makes the exit status 1; an unknown row id is a usage error (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

# tests/, this script's folder, is sys.path[0] when it runs as `python tests/bad_input_table.py`.
from bad_inputs import ROWS, make_shared, run_row, summary, table


def parse_row_ids(text: str) -> list[str]:
    """``--only``: comma-separated ids of :data:`bad_inputs.ROWS`."""
    ids = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(ids) - {row.id for row in ROWS})
    if not ids or unknown:
        raise argparse.ArgumentTypeError(f"Could not parse value: {text!r} (unknown rows: {', '.join(unknown)}; "
                                         "--list prints every row id).")
    return ids


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--only", type=parse_row_ids, metavar="ID,ID",
                        help="comma-separated row ids to run. Default: every row.")
    parser.add_argument("--list", action="store_true", help="print the row ids, one per line, and run nothing.")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(row.id for row in ROWS))
        return 0
    wanted = set(args.only) if args.only else None
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
