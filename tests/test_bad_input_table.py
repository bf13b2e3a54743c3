"""``python tests/bad_input_table.py``, the command that prints the bad-input table of docs/reliability.md, run as a
user runs it (a subprocess) on two rows of the matrix."""

from __future__ import annotations

import configparser
import json
import re
import subprocess
import sys
from pathlib import Path

from bad_inputs import ROWS

TOOL = Path(__file__).with_name("bad_input_table.py")
REPO = TOOL.parents[1]


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


def test_table_has_one_line_per_row_with_its_exit_status_and_message() -> None:
    result = run_tool("--only", "backend-unknown,precision-unknown")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["| row | exit | message |", "|---|---|---|"]
    assert re.fullmatch(r"\| backend-unknown \| 2 \| detector: error: unknown backend 'tensorflow'; .* \|", lines[2])
    assert re.fullmatch(r"\| precision-unknown \| 2 \| detector: error: .*unknown precision 'fp8'.* \|", lines[3])
    assert lines[4] == ""
    assert json.loads(lines[5]) == {"rows": 2, "passing": 2, "failing": [], "skipped": []}
    assert len(lines) == 6


def test_unknown_row_id_is_a_usage_error_naming_it() -> None:
    result = run_tool("--only", "backend-unknown,no-such-row")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "--only" in result.stderr and "no-such-row" in result.stderr and "Traceback" not in result.stderr


def test_list_prints_every_row_id_and_runs_nothing() -> None:
    result = run_tool("--list")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [row.id for row in ROWS]


def test_tox_env_bad_inputs_runs_the_command() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini", encoding="utf-8")
    assert tox["testenv:bad-inputs"]["commands"].strip() == "python tests/bad_input_table.py {posargs}"
