"""The GitHub Actions workflows: actionlint-clean, and the GPU workflow's runner, baseline and artifacts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
GPU_LABELS = "[self-hosted, linux, gpu]"
# The GPU runner's custom label, for actionlint's runner-label check.
ACTIONLINT_CONFIG = "self-hosted-runner:\n  labels:\n    - gpu\n"


def _steps(workflow: str) -> list[str]:
    """The text of each step (``      - ...`` blocks) of a workflow file."""
    return re.split(r"\n(?=      - )", (WORKFLOWS / workflow).read_text())[1:]


def _step(workflow: str, *needles: str) -> str:
    (step,) = [s for s in _steps(workflow) if all(needle in s for needle in needles)]
    return step


def test_workflows_pass_actionlint(tmp_path: Path) -> None:
    actionlint = shutil.which("actionlint") or shutil.which("actionlint", path=os.path.dirname(sys.executable))
    if actionlint is None:
        pytest.skip("actionlint not installed")
    config = tmp_path / "actionlint.yaml"
    config.write_text(ACTIONLINT_CONFIG)
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {"cpu.yml", "gpu.yml"} <= {f.name for f in files}
    # actionlint also runs shellcheck on the `run:` scripts when shellcheck is on PATH.
    result = subprocess.run(
        [actionlint, "-no-color", "-config-file", str(config), *map(str, files)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_gpu_jobs_run_on_self_hosted_gpu_runners() -> None:
    runs_on = re.findall(r"^\s+runs-on: (.*)$", (WORKFLOWS / "gpu.yml").read_text(), flags=re.MULTILINE)
    assert runs_on and all(labels == GPU_LABELS for labels in runs_on), runs_on


def test_gpu_workflow_runs_on_pull_requests_and_pushes_to_main() -> None:
    text = (WORKFLOWS / "gpu.yml").read_text()
    assert re.search(r"^  push:\n    branches: \[main\]$", text, flags=re.MULTILINE)
    assert re.search(r"^  pull_request:$", text, flags=re.MULTILINE)


def test_gpu_workflow_uploads_benchmarks_and_reports_always() -> None:
    step = _step("gpu.yml", "actions/upload-artifact@", ".benchmarks/")
    assert "reports/" in step
    assert "if: always()" in step
    assert "include-hidden-files: true" in step  # .benchmarks/ would be skipped as a hidden directory


def test_gpu_workflow_compares_with_main_baseline_of_the_same_runner() -> None:
    restore = _step("gpu.yml", "actions/cache/restore@")
    assert "restore-keys: perf-baseline-main-${{ runner.name }}-" in restore
    save = _step("gpu.yml", "actions/cache/save@")
    assert "key: perf-baseline-main-${{ runner.name }}-" in save
    bench = _step("gpu.yml", "pytest perf --perf-device cuda --benchmark-autosave")
    assert '--perf-compare="$BASELINE"' in bench and 'if [ -n "$BASELINE" ]' in bench


def test_gpu_workflow_summarises_the_comparison() -> None:
    summary = _step("gpu.yml", "GITHUB_STEP_SUMMARY", "pytest-benchmark compare")
    assert "--columns=min,median,mean,stddev" in summary and "reports/*.md" in summary
    profile = _step("gpu.yml", "GITHUB_STEP_SUMMARY", "reports/nsys/*/summary.md")
    assert "if: always()" in profile
    assert "--perf-nsys" in _step("gpu.yml", "pytest perf -m nsys")


def test_cpu_workflow_installs_cpu_torch_before_the_project() -> None:
    text = (WORKFLOWS / "cpu.yml").read_text()
    assert "runs-on: ubuntu-latest" in text and 'python-version: "3.11"' in text
    install = _step("cpu.yml", "pip install torch==")
    assert install.index("download.pytorch.org/whl/cpu") < install.index('pip install -e ".[test]"')
    assert "--perf-device cpu" in _step("cpu.yml", "pytest perf")


def test_workflows_run_user_commands_not_development_scripts() -> None:
    """Every step runs what a user can run (pip, pytest, perf-report): no script from tools/ or .dev/."""
    for workflow in sorted(WORKFLOWS.glob("*.yml")):
        text = workflow.read_text()
        assert "tools/" not in text and ".dev/" not in text, workflow.name


@pytest.mark.parametrize("output", ["reports/perf-report.md", "report/index.html", "detector-out/detect-results.json",
                                    ".benchmarks/Linux-CPython-3.11-64bit/0001_x.json", ".perf-cache/onnx/x.onnx"])
def test_what_the_commands_write_by_default_is_ignored_by_git(output: str) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(["git", "check-ignore", "--no-index", "-q", output], cwd=REPO, check=False)
    assert result.returncode == 0, f"{output} is not ignored by .gitignore"
