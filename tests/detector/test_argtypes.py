"""The one argument-parser family (`detector.argtypes`): what a parser made by `value_parser` accepts, and how it
words a rejected value, through a real argparse parser where the user sees it."""

from __future__ import annotations

import argparse

import pytest

from detector.argtypes import ASIDE, positive_int, split_list, value_error, value_parser


def _error_line(parse: object, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    parser = argparse.ArgumentParser(prog="prog")
    parser.add_argument("--x", type=parse)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--x", text])
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_rejected_value_is_argparses_usage_error_in_the_suites_wording(capsys: pytest.CaptureFixture[str]) -> None:
    even = value_parser(int, lambda v: v % 2 == 0, "an even integer")
    assert even("4") == 4
    assert _error_line(even, "3", capsys) == "prog: error: argument --x: Could not parse value: '3'. Expected an " \
        "even integer."
    assert _error_line(even, "x", capsys).endswith("Could not parse value: 'x'. Expected an even integer.")


def test_the_detector_commands_wording_puts_what_is_expected_in_parentheses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _error_line(positive_int, "0", capsys) == "prog: error: argument --x: Could not parse value: '0' " \
        "(expected a positive integer)."
    assert str(value_error("9", "a multiple of 32", ASIDE)) == "Could not parse value: '9' (expected a multiple of 32)."


def test_an_unreadable_value_can_be_worded_apart_from_one_out_of_range() -> None:
    parse = value_parser(float, lambda v: v > 0, "a number > 0", unreadable="a number, e.g. 2")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^Could not parse value: 'x'\. Expected a number, e\.g\. 2"):
        parse("x")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^Could not parse value: '-1'\. Expected a number > 0\.$"):
        parse("-1")


def test_a_convert_that_returns_none_rejects_and_its_own_error_passes_through() -> None:
    nonempty = value_parser(lambda text: text.strip() or None, bool, "some text")
    with pytest.raises(argparse.ArgumentTypeError, match="Expected some text"):
        nonempty("  ")
    net_size = value_parser(positive_int, lambda v: v % 32 == 0, "a multiple of 32", ASIDE)
    with pytest.raises(argparse.ArgumentTypeError, match=r"\(expected a positive integer\)"):
        net_size("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"\(expected a multiple of 32\)"):
        net_size("40")


def test_split_list_strips_drops_empty_items_and_keeps_duplicates_only_when_asked() -> None:
    assert split_list(" a, b,,a ,") == ["a", "b"]
    assert split_list(" a, b,,a ,", unique=False) == ["a", "b", "a"]
    assert split_list(" , ") == []
