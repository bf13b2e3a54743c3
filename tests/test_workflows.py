"""The GitHub Actions workflows -- valid against GitHub's workflow schema (check-jsonschema's vendored copy,
offline, on every run; actionlint too where it is installed), and the GPU workflow's runner, baseline and
artifacts -- and tox.ini's environments."""

from __future__ import annotations

import configparser
import json
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
#: check-jsonschema's built-in schemas, shipped in its wheel: GitHub's workflow schema (SchemaStore's, vendored)
#: and its own rule that every job has a timeout-minutes (a hung self-hosted GPU job would hold the runner 6 h).
WORKFLOW_SCHEMAS = ("vendor.github-workflows", "custom.github-workflows-require-timeout")
#: A proxy nobody listens on: a check that tried to download anything would fail instead of passing.
NO_NETWORK = "http://127.0.0.1:9"
TOX_ENVS = {"unit", "perf-cpu", "bad-inputs", "perf-gpu", "profile"}


def _schema_errors(schema: str, files: list[Path]) -> list[str]:
    """``check-jsonschema --builtin-schema <schema>`` on ``files``, with every HTTP(S) request sent to a dead
    proxy: one ``<file>: <path>: <message>`` per error (the most specific one), [] when all are valid."""
    env = {**os.environ, "HTTP_PROXY": NO_NETWORK, "HTTPS_PROXY": NO_NETWORK, "http_proxy": NO_NETWORK,
           "https_proxy": NO_NETWORK, "NO_PROXY": "", "no_proxy": ""}  # fmt: skip
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, "-o", "json",
                             *map(str, files)], env=env, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode not in (0, 1) or not result.stdout.startswith("{"):
        pytest.fail(f"check-jsonschema did not run (exit {result.returncode}; it is in the test extra: "
                    f"pip install -e '.[test]'):\n{result.stdout}{result.stderr}")
    report = json.loads(result.stdout)
    errors = [f"{Path(e['filename']).name}: {e.get('best_deep_match', e)['path']}: "
              f"{e.get('best_deep_match', e)['message']}" for e in report["errors"]]
    errors += [f"{Path(e['filename']).name}: {e['message']}" for e in report.get("parse_errors", [])]
    assert (result.returncode == 0) == (report["status"] == "ok" and not errors), result.stdout
    return errors


def _tox(*args: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """``tox <args>`` on the repository's tox.ini, its environments under ``workdir``."""
    pytest.importorskip("tox", reason="tox not installed (pip install 'tox>=4.11')")
    return subprocess.run([sys.executable, "-m", "tox", *args, "--workdir", str(workdir)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def _steps(workflow: str) -> list[str]:
    """The text of each step (``      - ...`` blocks) of a workflow file."""
    return re.split(r"\n(?=      - )", (WORKFLOWS / workflow).read_text())[1:]


def _step(workflow: str, *needles: str) -> str:
    (step,) = [s for s in _steps(workflow) if all(needle in s for needle in needles)]
    return step


@pytest.mark.parametrize("schema", WORKFLOW_SCHEMAS)
def test_workflows_are_valid_against_the_github_workflow_schema_offline(schema: str) -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {"cpu.yml", "gpu.yml"} <= {f.name for f in files}
    assert _schema_errors(schema, files) == []


@pytest.mark.parametrize(("workflow", "good", "bad", "schema", "error"), [
    ("gpu.yml", "runs-on: [self-hosted", "runs_on: [self-hosted", "vendor.github-workflows",
     "gpu.yml: $.jobs.benchmark: 'runs-on' is a required property"),
    ("cpu.yml", "timeout-minutes: 30", "timeout-minutes: thirty", "vendor.github-workflows",
     "cpu.yml: $.jobs.test['timeout-minutes']: 'thirty' is not of type 'number'"),
    ("cpu.yml", "    timeout-minutes: 30\n", "", "custom.github-workflows-require-timeout",
     "cpu.yml: $.jobs.test: 'timeout-minutes' is a required property"),
    ("cpu.yml", "\njobs:\n", "\njobs: [\n", "vendor.github-workflows", "cpu.yml: Failed to parse {tmp}/cpu.yml"),
])  # fmt: skip
def test_the_schema_check_rejects_a_broken_copy_of_a_workflow(tmp_path: Path, workflow: str, good: str, bad: str,
                                                              schema: str, error: str) -> None:  # fmt: skip
    text = (WORKFLOWS / workflow).read_text(encoding="utf-8")
    assert good in text
    broken = tmp_path / workflow
    broken.write_text(text.replace(good, bad, 1), encoding="utf-8")
    assert _schema_errors(schema, [broken]) == [error.format(tmp=tmp_path)]


def test_workflows_pass_actionlint_where_it_is_installed(tmp_path: Path) -> None:
    actionlint = shutil.which("actionlint") or shutil.which("actionlint", path=os.path.dirname(sys.executable))
    if actionlint is None:
        pytest.skip("actionlint not installed (an extra check; the schema check above always runs)")
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


def test_checkouts_leave_no_token_in_the_working_tree() -> None:
    """No step pushes, and the GPU jobs run a pull request's code on a self-hosted runner: the checkout's token
    must not stay in .git/config for that code (or an uploaded folder) to read."""
    for workflow in ("cpu.yml", "gpu.yml"):
        checkouts = [s for s in _steps(workflow) if "uses: actions/checkout@" in s]
        assert checkouts and all("persist-credentials: false" in s for s in checkouts), (workflow, checkouts)


def _jobs(workflow: str) -> dict[str, str]:
    """Each job's text, by name."""
    text = (WORKFLOWS / workflow).read_text().split("\njobs:\n", 1)[1]
    return dict(re.findall(r"^  ([\w-]+):\n(.*?)(?=^  [\w-]+:\n|\Z)", text, flags=re.MULTILINE | re.DOTALL))


def test_gpu_jobs_run_on_self_hosted_gpu_runners_and_the_comment_job_never_meets_their_code() -> None:
    jobs = _jobs("gpu.yml")
    assert set(jobs) == {"benchmark", "profile", "comment"}
    for name in ("benchmark", "profile"):
        assert f"runs-on: {GPU_LABELS}" in jobs[name], name
    comment = jobs["comment"]  # the only job that may write: GitHub-hosted, no checkout of the pull request
    assert "runs-on: ubuntu-latest" in comment and "pull-requests: write" in comment
    assert "actions/checkout" not in comment and "permissions:\n  contents: read" in (WORKFLOWS / "gpu.yml").read_text()


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
    assert "compare=(--perf-compare --perf-min-effect" in bench and 'if [ -n "$BASELINE" ]' in bench


def test_gpu_workflow_summarises_the_verdicts_the_ab_and_the_change_points() -> None:
    summary = _step("gpu.yml", "GITHUB_STEP_SUMMARY", "reports/job-summary.md")
    for part in ("reports/ab/perf-ab.md", "reports/perf-compare.md", "perf-html/summary.md"):
        assert part in summary
    assert "if: always()" in summary
    report = _step("gpu.yml", "perf-report")
    assert '--store "$PERF_STORE"' in report and "if: always()" in report
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


def test_tox_lists_every_environment_of_tox_ini(tmp_path: Path) -> None:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini", encoding="utf-8")
    defined = {section.partition(":")[2] for section in ini.sections() if section.startswith("testenv:")}
    assert defined == TOX_ENVS
    result = _tox("-l", workdir=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(result.stdout.split()) == defined, result.stdout  # tox 4's -l prints env_list alone
    by_label = {label: set(_tox("l", "-m", label, "--no-desc", workdir=tmp_path).stdout.split())
                for label in ("cpu", "gpu")}  # fmt: skip
    assert by_label == {"cpu": {"unit", "perf-cpu", "bad-inputs"}, "gpu": {"perf-gpu", "profile"}}


def test_a_gpu_tox_environment_without_a_cuda_device_stops_before_installing_anything(tmp_path: Path) -> None:
    from perf.measure.machine import cuda_device_count

    if cuda_device_count() > 0:
        pytest.skip("a CUDA device is visible here: the GPU environments would run")
    result = _tox("-e", "perf-gpu,profile", workdir=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    for env in ("perf-gpu", "profile"):
        assert re.search(rf"^{env} needs a CUDA device \(a CUDA build of torch in .+\) and found none; on a CPU "
                         rf"machine run: tox -m cpu$", result.stderr, flags=re.MULTILINE), output
        assert f"{env}: FAIL code 1" in output, output
    assert "commands_pre[1]" not in output and "pip install" not in result.stderr, output  # nothing installed


def test_no_source_file_is_ignored_by_git() -> None:
    """An output pattern (``report/``) must not hide a source folder of the same name (``perf/report/``)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    sources = [str(p.relative_to(REPO)) for folder in ("detector", "perf", "tests") for p in (REPO / folder).rglob("*.py")
               if "__pycache__" not in p.parts]  # fmt: skip
    result = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=REPO, input="\n".join(sources),
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.stdout.split() == [], f"ignored by .gitignore: {result.stdout.split()}"


def test_pull_requests_are_judged_by_a_paired_ab_against_their_merge_base() -> None:
    assert "fetch-depth: 0" in _step("gpu.yml", "actions/checkout@", "perf-ab measures the merge base")
    ab = _step("gpu.yml", "perf-ab --base")
    assert "if: github.event_name == 'pull_request'" in ab and '"origin/$BASE_REF"' in ab
    assert '--pairs "$PERF_AB_PAIRS"' in ab and "-- perf -m ci --perf-device cuda" in ab
    assert "if: github.event_name != 'pull_request'" in _step("gpu.yml", "pytest perf --perf-device cuda --benchmark-autosave")


def test_one_pull_request_comment_is_updated_not_one_per_push() -> None:
    script = _step("gpu.yml", "actions/github-script@")
    assert "const marker = '<!-- detector-perf: gpu verdicts -->'" in script
    assert "c.body.startsWith(marker)" in script and "updateComment" in script and "createComment" in script
    upload = _step("gpu.yml", "name: perf-summary-")
    assert "path: reports/job-summary.md" in upload


def test_caches_live_outside_the_workspace_checkout_cleans() -> None:
    caches = _step("gpu.yml", "Caches outside the workspace")
    assert 'cache="${RUNNER_TOOL_CACHE:-$HOME/.cache}/detector-perf"' in caches
    for variable in ("PERF_CACHE=$cache", "DETECTOR_CACHE=$cache/detector", "TORCHINDUCTOR_CACHE_DIR=$cache/torchinductor"):
        assert variable in caches
    for step in ("pytest perf --perf-device cuda --benchmark-autosave", "perf-ab --base", "--perf-noise="):
        assert '--perf-cache-dir "$PERF_CACHE/perf"' in _step("gpu.yml", step), step


def test_the_gpu_build_of_onnxruntime_replaces_the_cpu_build_and_tensorrt_can_be_installed() -> None:
    install = _step("gpu.yml", "Install (the runner's Python", "onnxruntime-gpu", "TENSORRT_PACKAGE")
    assert install.index("pip uninstall -y onnxruntime") < install.index('--force-reinstall --no-deps "onnxruntime-gpu')
    assert "TENSORRT_PACKAGE: ${{ vars.PERF_TENSORRT_PACKAGE }}" in install
    assert "onnxruntime-gpu" in (REPO / "pyproject.toml").read_text()


def test_a_changed_machine_records_a_new_baseline_instead_of_failing_every_run(tmp_path: Path) -> None:
    """The baseline step's own script, run for real: a baseline from before a driver update is not compared."""
    from pytest_benchmark.utils import get_machine_id

    from perf.measure.machine import machine_fingerprint

    step = _step("gpu.yml", "perf-history comparable")
    script = step.split("run: |\n", 1)[1]
    script = "\n".join(line[10:] for line in script.splitlines())
    folder = tmp_path / ".benchmarks" / get_machine_id()
    folder.mkdir(parents=True)
    saved = {"machine_info": {"perf": {**machine_fingerprint(), "device": "cuda", "driver_version": "1.0-old"}},
             "benchmarks": [{"fullname": "t::a", "name": "a", "group": None, "stats": {"median": 1e-3}}],
             "datetime": "2026-11-01T00:00:00", "commit_info": {"id": "abc"}}  # fmt: skip
    (folder / "0001_x.json").write_text(json.dumps(saved))
    outputs = tmp_path / "outputs"
    env = {**os.environ, "GITHUB_OUTPUT": str(outputs), "RUNNER_NAME": "gpu-1",
           "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])}
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "::notice::The machine changed since the baseline (driver_version: saved '1.0-old'" in result.stdout
    assert "path=\n" in outputs.read_text()  # recorded as the new baseline, not compared
