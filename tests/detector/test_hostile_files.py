"""Loading a user's weights, ONNX file or engine never executes code from it.

Two checks: an AST scan of every Python file of the project for calls that can run code from data (pickle and
its relatives, ``torch.load`` without ``weights_only=True``, ``numpy.load(allow_pickle=True)``, ``eval``/``exec``,
``yaml.load`` without a safe loader); and files crafted to hold a pickle payload -- it would create a marker file
when unpickled -- fed to every loader: each refuses it with one clear error naming the file, and the marker never
appears.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from bad_inputs import MARKER, engine_entry, handmade_onnx, pickle_payload

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("detector", "perf", "tools", "tests", "conftest.py")
#: Modules whose loading functions unpickle (or import) data.
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "marshal", "shelve", "jsonpickle"}
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__"}
#: Where an unsafe-looking call is deliberate: (file, function name) -> why.
ALLOWED = {("tests/detector/test_hostile_files.py", "loads"): "proves the hostile payload is live by unpickling it once"}


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def unsafe_calls(source: str, filename: str) -> list[str]:
    """``file:line: what`` for every call in ``source`` that can execute code from data."""
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}  # local name -> module it stands for
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                if root in UNSAFE_MODULES and (filename, alias.name) not in ALLOWED:
                    found.append(f"{filename}:{node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            target = aliases.get(func.id, func.id)
            name = func.id
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            target = f"{aliases.get(func.value.id, func.value.id)}.{func.attr}"
            name = func.attr
        else:
            continue
        module = target.split(".")[0]
        where = f"{filename}:{node.lineno}: {ast.unparse(func)}(...)"
        if (filename, name) in ALLOWED:
            continue
        if target == "__import__" and node.args and isinstance(node.args[0], ast.Constant):
            continue  # a fixed module name imports nothing from data
        if target in UNSAFE_BUILTINS or (module in UNSAFE_MODULES and name.startswith(("load", "Unpickler", "open"))):
            found.append(where)
        elif target == "torch.load":
            flag = _keyword(node, "weights_only")
            if not (isinstance(flag, ast.Constant) and flag.value is True):
                found.append(f"{where} without weights_only=True")
        elif target in ("numpy.load", "np.load"):
            flag = _keyword(node, "allow_pickle")
            if isinstance(flag, ast.Constant) and flag.value is not False or flag is not None and not isinstance(
                    flag, ast.Constant):
                found.append(f"{where} with allow_pickle")
        elif target == "yaml.load" and "Safe" not in ast.unparse(_keyword(node, "Loader") or ast.Constant(None)):
            found.append(f"{where} without a safe Loader")
    return found


def _python_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = REPO / name
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def test_no_project_code_can_execute_code_from_data() -> None:
    found = [hit for path in _python_files()
             for hit in unsafe_calls(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))]
    assert found == []


@pytest.mark.parametrize("snippet", [
    "import pickle\npickle.loads(b'')",
    "import pickle as p\np.load(open('f', 'rb'))",
    "from pickle import loads\nloads(b'')",
    "import torch\ntorch.load('m.pt')",
    "import torch\ntorch.load('m.pt', weights_only=False)",
    "import numpy as np\nnp.load('a.npy', allow_pickle=True)",
    "eval('1 + 1')",
    "exec('x = 1')",
    "import yaml\nyaml.load(open('c.yaml'))",
    "import marshal\nmarshal.loads(b'')",
])  # fmt: skip
def test_scan_finds_each_kind_of_unsafe_call(snippet: str) -> None:
    assert unsafe_calls(snippet, "x.py")


@pytest.mark.parametrize("snippet", [
    "import torch\ntorch.load('m.pt', weights_only=True)",
    "import numpy as np\nnp.load('a.npy')",
    "import yaml\nyaml.load(open('c.yaml'), Loader=yaml.SafeLoader)",
    "import json\njson.loads('{}')",
    "model.eval()",
])  # fmt: skip
def test_scan_accepts_safe_calls(snippet: str) -> None:
    assert unsafe_calls(snippet, "x.py") == []


def test_pickle_payload_really_executes_when_unpickled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The payload is live: unpickling it (what an unsafe loader would do) creates the marker."""
    import pickle  # noqa: S403 - the one place the payload is unpickled, to prove it works

    monkeypatch.chdir(tmp_path)
    pickle.loads(pickle_payload(tmp_path / "p.bin").read_bytes())  # noqa: S301
    assert (tmp_path / MARKER).exists()


def _load_weights(path: Path) -> None:
    from detector.model import default_cfg_path, load_model

    load_model(default_cfg_path(), path)


def _load_onnx(path: Path) -> None:
    from detector.export import load_onnx

    load_onnx(path)


def _load_engine_entry(path: Path) -> None:
    from detector.errors import ModelFileError
    from detector.trt.cache import check_entry

    problem = check_entry(path)
    if problem is not None:
        raise ModelFileError(problem)


@pytest.mark.parametrize("loader, suffix, problem", [
    (_load_weights, ".weights", "bad header"),
    (_load_onnx, ".onnx", "not a valid ONNX file"),
    (_load_engine_entry, ".engine", "does not match the digest"),
])  # fmt: skip
def test_loaders_refuse_a_pickle_payload_without_running_it(
    loader: object, suffix: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from detector.errors import DetectorError

    monkeypatch.chdir(tmp_path)
    if suffix == ".engine":  # a real cache entry whose engine bytes were replaced by the payload
        target = engine_entry(tmp_path / "cache", handmade_onnx(tmp_path / "m.onnx", (16, 16), 12))
        size = target.stat().st_size
        payload = pickle_payload(tmp_path / "p.bin").read_bytes()
        target.write_bytes(payload + b"\x00" * (size - len(payload)))  # same size: only the digest can tell
    else:
        target = pickle_payload(tmp_path / f"model{suffix}")
    with pytest.raises(DetectorError) as info:
        loader(target)  # type: ignore[operator]
    message = str(info.value)
    assert str(target) in message and problem in message and "\n" not in message
    assert not (tmp_path / MARKER).exists() and not (Path(os.getcwd()) / MARKER).exists()
