"""perf.runs, the one model of a saved run: finding and reading runs of a storage folder, the verdict files, and
one error style for every bad file; real files in a temporary storage."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perf.runs import (
    HistoryError,
    describe_injected,
    load_run,
    load_runs,
    run_files,
)
from perf.verdicts import load_verdicts

ROOT = Path(__file__).resolve().parents[2]


def _run(*names: str, commit: str = "abc1234def", dirty: bool = False, when: str = "2026-01-02T10:00:00") -> dict:
    return {"benchmarks": [{"name": n, "fullname": f"perf/t.py::{n}", "group": "inference", "params": {"batch": 8},
                            "stats": {"median": 0.002, "iqr": 0.0001, "rounds": 3, "data": [0.002, 0.0021, 0.0019]}}
                           for n in names],
            "machine_info": {"perf": {"device": "cpu"}}, "commit_info": {"id": commit, "dirty": dirty},
            "datetime": when}  # fmt: skip


def _save(folder: Path, name: str, doc: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_runs_of_every_machine_folder_are_read_oldest_first(tmp_path: Path) -> None:
    _save(tmp_path / "m2", "0001_b.json", _run("test_b"))
    _save(tmp_path / "m1", "0002_a.json", _run("test_a"))
    _save(tmp_path / "m1", "0001_a.json", _run("test_a"))
    runs = load_runs(tmp_path)
    assert [(r.machine_id, r.number) for r in runs] == [("m1", 1), ("m2", 1), ("m1", 2)]
    assert [r.number for r in load_runs(tmp_path, "m1")] == [1, 2]


def test_a_machine_folder_given_as_the_storage_is_read_too(tmp_path: Path) -> None:
    _save(tmp_path / "m1", "0001_a.json", _run("test_a"))
    (run,) = load_runs(tmp_path / "m1")
    assert run.machine_id == "m1"


def test_only_saved_run_files_count(tmp_path: Path) -> None:
    machine = tmp_path / "m1"
    good = _save(machine, "0001_a.json", _run("test_a"))
    _save(machine, "notes.json", "{}")
    _save(machine, "12_short.json", "{}")
    (machine / "0002_folder.json").mkdir()
    assert run_files(tmp_path) == [good]


def test_a_dangling_link_or_fifo_named_as_a_run_is_named_not_passed_over(tmp_path: Path) -> None:
    """Passed over, the run before it was judged as the latest and imported as if the storage were whole."""
    import os

    machine = tmp_path / "m1"
    _save(machine, "0001_a.json", _run("test_a"))
    (machine / "0002_a.json").symlink_to(tmp_path / "moved-away.json")
    with pytest.raises(HistoryError, match=r"0002_a\.json': no such file"):
        load_runs(tmp_path)
    (machine / "0002_a.json").unlink()
    os.mkfifo(machine / "0002_a.json")
    with pytest.raises(HistoryError, match=r"0002_a\.json': cannot read a saved run: it is a FIFO"):
        load_runs(tmp_path)


def test_runs_numbered_10000_and_up_are_read_in_the_order_of_their_numbers(tmp_path: Path) -> None:
    for number in (10001, 9999, 10000, 9998):  # pytest-benchmark saves after 9999_x.json as 10000_x.json
        _save(tmp_path / "m1", f"{number:04d}_x.json", _run("test_a", commit=f"c{number}"))
    assert [p.name for p in run_files(tmp_path)] == ["9998_x.json", "9999_x.json", "10000_x.json", "10001_x.json"]
    runs = load_runs(tmp_path)
    assert [(r.number, r.name, r.commit) for r in runs[-2:]] == [(10000, "10000", "c10000"), (10001, "10001", "c10001")]


def test_a_saved_run_gives_benchmarks_stats_and_its_identity(tmp_path: Path) -> None:
    path = _save(tmp_path / "m1", "0007_x.json", _run("test_a", dirty=True))
    run = load_run(path)
    bench = run.benchmarks["perf/t.py::test_a"]
    assert bench.has_rounds and bench.median_s == pytest.approx(0.002) and bench.stat("iqr") == 0.0001
    assert math.isnan(bench.stat("q1"))  # not saved
    assert bench.params == {"batch": 8} and bench.group == "inference" and "data" not in bench.stats
    assert run.number == 7 and run.short_commit == "abc1234+dirty" and run.fingerprint == {"device": "cpu"}
    assert run.label == "0007 (2026-01-02 10:00, abc1234+dirty)"


def test_a_saved_run_knows_its_run_id_and_the_test_only_options_it_was_made_with(tmp_path: Path) -> None:
    doc = _run("test_a")
    doc["perf_run"] = {"run_id": "9f1c2e", "injected": {"inject_delay_ms": 20.0}}
    run = load_run(_save(tmp_path / "m1", "0001_x.json", doc))
    assert run.run_id == "9f1c2e" and run.injected == {"inject_delay_ms": 20.0}
    assert describe_injected(run.injected) == "--perf-inject-delay=20.0 (ms)"
    normal = load_run(_save(tmp_path / "m1", "0002_x.json", _run("test_a")))
    assert normal.run_id is None and normal.injected == {} and describe_injected(normal.injected) == ""


def test_a_run_saved_before_runs_were_marked_is_known_injected_by_its_benchmarks(tmp_path: Path) -> None:
    doc = _run("test_a", "test_b")
    doc["benchmarks"][1]["extra_info"] = {"injected": {"regression": "layer:5%"}}
    doc["perf_run"] = {"run_id": None, "injected": {}}
    run = load_run(_save(tmp_path / "m1", "0001_x.json", doc))
    assert run.injected == {"regression": "layer:5%"}
    assert describe_injected({**run.injected, "future_knob": 3}) == "--perf-regression=layer:5%, future_knob=3"


def test_a_saved_run_keeps_its_raw_rounds_in_seconds_in_their_order(tmp_path: Path) -> None:
    bench = load_run(_save(tmp_path / "m1", "0012_x.json", _run("test_a"))).benchmarks["perf/t.py::test_a"]
    assert bench.data is not None and bench.data.tolist() == [0.002, 0.0021, 0.0019]


@pytest.mark.parametrize(("content", "problem"), [
    (None, "no such file"), ("{not json", "cannot read a saved run"),
    ("[" * 100_000 + "]" * 100_000, "cannot read a saved run: not valid JSON: nested too deeply"),
    ('{"benchmarks": [], "n": ' + "7" * 5000 + "}",
     "cannot read a saved run: not valid JSON: Exceeds the limit (4300 digits) for integer string conversion"),
    ("[1, 2]", "not a usable saved run: the top level is a list, expected an object with a 'benchmarks' list"),
    ('{"benchmarks": [{"name": "x"}]}', "not a usable saved run: benchmarks[0] has no string 'fullname'"),
])  # fmt: skip
def test_a_bad_saved_run_is_one_error_naming_the_file(tmp_path: Path, content: str | None, problem: str) -> None:
    path = tmp_path / "0003_bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(HistoryError) as e:
        load_run(path)
    assert str(e.value).startswith(f"'{path}': {problem}") and "\n" not in str(e.value), str(e.value)


def test_a_null_metric_is_a_metric_not_saved_and_a_listed_one_is_named(tmp_path: Path) -> None:
    doc = _run("test_a")
    doc["benchmarks"][0]["extra_info"] = {"metrics": {"wall": None}}
    bench = load_run(_save(tmp_path / "m1", "0001_x.json", doc)).benchmarks["perf/t.py::test_a"]
    assert bench.metrics().keys() == {"time"}
    doc["benchmarks"][0]["extra_info"] = {"metrics": {"wall": {"data": [1.0, None]}}}
    with pytest.raises(HistoryError, match=r"extra_info.metrics.wall.data\[1\] is None, not a number$"):
        load_run(_save(tmp_path / "m1", "0002_x.json", doc))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(["stats.median", "stats.min", "stats.iqr", "stats.rounds", "stats.data[1]",
                              "extra_info.metrics.wall.data[0]"]),
       value=st.one_of(st.floats(-1e100, -1e-300), st.integers(-2**53, -1)))
def test_a_negative_time_or_count_is_one_error_naming_it(tmp_path: Path, where: str, value: float) -> None:
    doc = _run("test_a")
    bench = doc["benchmarks"][0]
    bench["extra_info"] = {"metrics": {"wall": {"data": [0.001, 0.002]}}}
    holder, key = {"stats.data[1]": (bench["stats"]["data"], 1),
                   "extra_info.metrics.wall.data[0]": (bench["extra_info"]["metrics"]["wall"]["data"], 0)}.get(
        where, (bench["stats"], where.removeprefix("stats.")))  # fmt: skip
    holder[key] = value
    with pytest.raises(HistoryError) as e:  # once shown as a negative time, and a traceback in the gate and noise
        load_run(_save(tmp_path / "m1", "0001_x.json", doc))
    assert str(e.value).endswith(f"'perf/t.py::test_a': {where} is {value!r}, negative: expected a time or a count "
                                 ">= 0"), str(e.value)


@pytest.mark.parametrize(("where", "value", "problem"), [
    ("commit_info.dirty", "false", "commit_info.dirty is a string, expected a boolean"),  # once read as dirty
    ("perf_run.injected", "layer:5%", "perf_run.injected is a string, expected an object"),  # once a normal run
    ("perf_run.injected", ["regression"], "perf_run.injected is a list, expected an object"),
    ("perf_run", "r1", "'perf_run' is a string, expected an object"),
])  # fmt: skip
def test_a_mark_of_another_type_is_one_error_never_read_as_its_opposite(tmp_path: Path, where: str, value: object,
                                                                         problem: str) -> None:  # fmt: skip
    doc = _run("test_a")
    parent, key = where.split(".") if "." in where else (None, where)
    (doc.setdefault(parent, {}) if parent else doc)[key] = value
    with pytest.raises(HistoryError) as e:
        load_run(_save(tmp_path / "m1", "0001_x.json", doc))
    assert str(e.value).endswith(f"not a usable saved run: {problem}"), str(e.value)


def test_a_bad_run_is_skipped_into_the_list_given_and_all_bad_is_an_error(tmp_path: Path) -> None:
    machine = tmp_path / "m1"
    _save(machine, "0001_a.json", _run("test_a"))
    bad = _save(machine, "0002_a.json", '{"benchmarks": [')
    skipped: list[str] = []
    assert [r.number for r in load_runs(tmp_path, skipped=skipped)] == [1]
    assert skipped == [f"'{bad}': cannot read a saved run: Expecting value: line 1 column 17 (char 16)"]
    with pytest.raises(HistoryError, match="cannot read a saved run"):
        load_runs(tmp_path)  # without a list to skip into, the first bad file is the error
    (machine / "0001_a.json").write_text("[]")
    with pytest.raises(HistoryError, match=r"0001_a.json': not a usable saved run: .* \(and 1 more bad saved runs\)"):
        load_runs(tmp_path, skipped=[])


def test_storage_that_is_missing_or_lacks_the_machine_is_one_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match=f"benchmark storage '{tmp_path / 'nowhere'}': no such folder"):
        load_runs(tmp_path / "nowhere")
    _save(tmp_path / "m1", "0001_a.json", _run("test_a"))
    with pytest.raises(HistoryError, match=r"no saved runs of machine 'm9' \(machines with runs: m1\)"):
        load_runs(tmp_path, "m9")


def test_an_error_naming_a_file_with_a_newline_stays_one_line(tmp_path: Path) -> None:
    path = _save(tmp_path, "0001_a\nb.json", "not json")
    with pytest.raises(HistoryError) as e:
        load_run(path)
    assert "\n" not in str(e.value) and "0001_a\\nb.json" in str(e.value)


@pytest.mark.parametrize("doc", [
    {"rows": [{"fullname": "perf/t.py::test_a", "name": "test_a", "verdict": "Slower"}]},
    [{"name": "test_a", "status": "slower"}],
    {"results": [{"name": "test_a", "verdict": "slower"}]},
    {"test_a": {"verdict": "slower"}},
    {"test_a": "slower"},
])  # fmt: skip
def test_verdict_files_of_every_shape_give_one_verdict_per_benchmark(doc: object, tmp_path: Path) -> None:
    path = _save(tmp_path, "verdicts.json", doc)
    verdicts = load_verdicts(path=path)
    assert verdicts is not None and verdicts.path == path
    entry = verdicts.entry("perf/t.py::test_a", "test_a")
    assert entry is not None and entry["verdict"] == "slower"
    assert verdicts.entry("perf/t.py::test_b", "test_b") is None


def test_the_gates_verdicts_are_found_in_the_reports_folder_when_there(tmp_path: Path) -> None:
    assert load_verdicts(tmp_path) is None
    _save(tmp_path, "perf-compare.json", {"summary": {"failed": False}, "rows": [{"name": "a", "verdict": "faster"}]})
    verdicts = load_verdicts(tmp_path)
    assert verdicts is not None and verdicts["summary"] == {"failed": False}


def test_the_gates_verdicts_name_the_run_they_judged_and_their_baseline(tmp_path: Path) -> None:
    path = _save(tmp_path, "perf-compare.json", {
        "format": 2, "rows": [{"name": "a", "verdict": "slower"}], "current": {"run_id": "c1", "injected": {"x": 1}},
        "baseline": {"path": "/ci/.benchmarks/m/0007_abc.json", "number": 7, "commit": "abc1234def", "run_id": "b1"},
    })  # fmt: skip
    verdicts = load_verdicts(path=path)
    assert verdicts is not None and (verdicts.current_run_id, verdicts.baseline_run_id) == ("c1", "b1")
    assert verdicts.current_injected == {"x": 1} and verdicts.baseline_path == "/ci/.benchmarks/m/0007_abc.json"
    assert verdicts.baseline_label == "run 0007 (commit abc1234, file 0007_abc.json)"
    judged, other = _run("a"), _run("a")
    judged["perf_run"] = {"run_id": "c1", "injected": {}}
    other["perf_run"] = {"run_id": "b1", "injected": {}}
    assert verdicts.judges(load_run(_save(tmp_path / "m", "0008_a.json", judged)))
    assert not verdicts.judges(load_run(_save(tmp_path / "m", "0007_a.json", other)))


def test_a_verdict_file_that_names_no_run_judges_none(tmp_path: Path) -> None:
    verdicts = load_verdicts(path=_save(tmp_path, "v.json", {"rows": [{"name": "a", "verdict": "slower"}]}))
    assert verdicts is not None and verdicts.current_run_id is None
    assert verdicts.baseline_label == "not named in the file"
    assert not verdicts.judges(load_run(_save(tmp_path / "m", "0001_a.json", _run("a"))))  # no id either


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    ("{", "cannot read the verdicts: Expecting property name"),
    ('{"rows": ' + "[" * 100_000, "cannot read the verdicts: not valid JSON: nested too deeply"),
    ('{"rows": [{"name": "a", "verdict": "slower", "ratio": ' + "1" * 4301 + "}]}",
     "cannot read the verdicts: not valid JSON: Exceeds the limit (4300 digits)"),
    ('{"rows": [{"name": "a", "verdict": "slower", "ratio": 1' + "0" * 400 + "}]}",
     "not usable compare verdicts: rows[0].ratio is an integer of about 10^400, too large for a number"),
    ('{"rows": [{"name": "a\\ud800", "verdict": "slower"}]}',
     "not usable compare verdicts: rows[0].name is not valid Unicode text (it holds \\ud800, a lone surrogate)"),
    ('{"rows": []}', "holds no compare verdicts (entries with a name and a 'verdict')"),
    ('[{"verdict": "slower"}]', "holds no compare verdicts"),
])  # fmt: skip
def test_a_bad_verdict_file_is_one_error_naming_it(content: str | None, problem: str, tmp_path: Path) -> None:
    path = tmp_path / "verdicts.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(HistoryError) as e:
        load_verdicts(path=path)
    assert str(e.value).startswith(f"'{path}': {problem}")


def test_reading_runs_does_not_import_the_gate() -> None:
    code = "import json, sys, perf.runs; print(json.dumps(sorted(m for m in sys.modules if m.startswith('perf.'))))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout)
    assert "perf.runs" in loaded and not [m for m in loaded if m.startswith(("perf.gate", "perf.measure"))], loaded


def test_a_run_saved_with_unserializable_params_is_read_with_the_cases_fields(tmp_path: Path) -> None:
    doc = _run("perf/test_inference_speed.py::test_inference_speed[torch-fp32-b1]")
    doc["benchmarks"][0]["params"] = {"case": "UNSERIALIZABLE[Case(variant='torch', backend='torch', precision='fp32', "
                                      "batch=1, options={}, source=Source(codec='mp4v', decoder='opencv', "
                                      "encode=True))]", "streams": 2, "odd": "UNSERIALIZABLE[<object at 0x1>]"}
    run = load_run(_save(tmp_path, "0001_old.json", doc))
    (bench,) = run.benchmarks.values()
    assert bench.params["case"] == {"variant": "torch", "backend": "torch", "precision": "fp32", "batch": 1,
                                    "options": {}, "source": "Source(codec='mp4v', decoder='opencv', encode=True)"}
    assert bench.params["streams"] == 2 and bench.params["odd"] == "UNSERIALIZABLE[<object at 0x1>]"


@pytest.mark.parametrize("nesting", ["-" * 200_000 + "1", "[" * 200_000 + "]" * 200_000, "(" * 5_000 + ")" * 5_000])
def test_an_old_param_nested_past_the_parser_is_read_as_written(nesting: str, tmp_path: Path) -> None:
    doc = _run("perf/test_inference_speed.py::test_inference_speed[torch-fp32-b1]")
    doc["benchmarks"][0]["params"] = {"case": f"UNSERIALIZABLE[Case(variant={nesting})]"}
    (bench,) = load_run(_save(tmp_path, "0001_old.json", doc)).benchmarks.values()
    assert bench.params["case"] in (f"UNSERIALIZABLE[Case(variant={nesting})]", {"variant": ()})
