"""``python3 -m detector.train {train,eval,anchors} ...``: the training subcommands without the main CLI (same options)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from detector.cli import run  # the CLI's error handling, one owner
from detector.train.cli import add_anchors_parser, add_eval_parser, add_train_parser

_DESCRIPTION = "The training subcommands of 'detector' (train, eval, anchors) on their own, with the same options."


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python3 -m detector.train`` (abbreviated options refused)."""
    parser = argparse.ArgumentParser(prog="python3 -m detector.train", description=_DESCRIPTION,
                                     allow_abbrev=False)
    parser.add_argument("-v", "--verbose", action="store_true", help="log every module's progress (default: "
                        "warnings only)")
    sub = parser.add_subparsers(dest="command", required=True)
    add_train_parser(sub)
    add_eval_parser(sub)
    add_anchors_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand as ``detector`` runs it (`detector.cli.run`: one line and exit 2 on a
    user error, an unwritable output or too little memory; 130 on Ctrl-C, 143 on SIGTERM)."""
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
