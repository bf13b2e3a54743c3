"""``python3 -m detector.train {train,eval,anchors} ...``: the training subcommands without the main CLI (same options)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from detector.errors import DetectorError
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
    """Parse ``argv``, run the subcommand, return the exit status (2 with one line on a user error)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except DetectorError as exc:
        print(f"detector: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("detector: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
