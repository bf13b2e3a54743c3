"""The README opens with the two set-up commands, and CI runs the second one word for word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.S)[:2]


def test_readme_opens_with_install_and_run_then_install_and_test() -> None:
    main_job, tests = _readme_commands()
    assert "pip install torch==2.13.0" in main_job and "detector detect" in main_job
    assert "pip install torch==2.13.0" in tests and "pytest tests" in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_commands()[1] in ci


def test_readme_model_settings_go_into_the_existing_pyproject_section() -> None:
    """The README's settings block is TOML for this repository's [tool.pytest.ini_options], with only the suite's ini
    names: a pytest.ini would replace that section (its markers and test paths) without a word."""
    import tomllib

    from perf.options import all_options

    text = (ROOT / "README.md").read_text()
    block = re.search(r"```toml\n(.+?)\n```", text, flags=re.S)
    assert block is not None, "the README's model settings block is gone"
    settings = tomllib.loads(block.group(1))
    ini_names = {option.dest for option in all_options() if option.ini}
    assert settings and set(settings) <= ini_names, set(settings) - ini_names
    assert all(isinstance(value, str) for value in settings.values())
    assert "[tool.pytest.ini_options]" in (ROOT / "pyproject.toml").read_text()
    assert "[pytest]" not in text
