"""The docs name what exists: every option, dotted name, module path and method.md section they (or the code's
docstrings) point at is there, so a rename or a removal cannot leave a page pointing at nothing."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/architecture.md", "docs/method.md", "docs/options.md", "docs/reliability.md")


def _text(name: str) -> str:
    return (ROOT / name).read_text()


def _backticked(text: str) -> set[str]:
    return set(re.findall(r"`([^`\n]+)`", text))


def _resolves(dotted: str) -> bool:
    """``perf.gate.judge.judge`` -> whether the longest importable module prefix has the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_perf_option_is_in_options_md_and_options_md_names_no_other() -> None:
    from perf.options import all_options

    doc = _text("docs/options.md")
    options = [o for o in all_options() if o.help is not None]
    missing = [o.flag for o in options if not re.search(rf"`{re.escape(o.flag)}(?![\w-])", doc)]
    known = {flag for o in all_options() for flag in (o.flag, *o.aliases)}
    named = set(re.findall(r"--perf-[a-z0-9-]*[a-z0-9]", doc)) | set(re.findall(r"--nsys-[a-z-]*[a-z]", doc))
    assert not missing, f"options missing from docs/options.md: {missing}"
    assert named <= known, f"docs/options.md names options that do not exist: {sorted(named - known)}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_dotted_name_of_a_doc_resolves(doc: str) -> None:
    names = [n for n in _backticked(_text(doc)) if re.fullmatch(r"(perf|detector)(\.\w+)+", n)]
    assert names or doc in ("README.md", "docs/options.md")
    assert not [n for n in names if not _resolves(n)], f"{doc} names what does not exist"


def test_every_module_path_of_architecture_md_is_a_file() -> None:
    files = [p.relative_to(ROOT).as_posix() for p in ROOT.glob("**/*.py") if ".venv" not in p.parts]
    paths = [t.split(" ")[0] for t in _backticked(_text("docs/architecture.md")) if re.fullmatch(r"[\w/.]+\.py", t)]
    missing = [p for p in paths if not any(f == p or f.endswith("/" + p) for f in files)]
    assert len(paths) > 50 and not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def _method_sections() -> dict[int, str]:
    parts = re.split(r"^## (\d+)\. ", _text("docs/method.md"), flags=re.M)
    return {int(number): body for number, body in zip(parts[1::2], parts[2::2])}


def test_method_md_sections_named_by_the_code_and_docs_exist() -> None:
    sections = _method_sections()
    sources = [*ROOT.glob("perf/**/*.py"), *ROOT.glob("detector/**/*.py"), *(ROOT / d for d in DOCS[:2] + DOCS[3:])]
    wrong = []
    for path in sources:
        text = re.sub(r"\s*\n\s*(?:#:?\s*)?", " ", path.read_text())  # a reference wrapped over lines or comments
        for m in re.finditer(r"method\.md\)?,? \(?(?:sections? )?(\d+)(?:-(\d+)| and (\d+))?(?:, item (\d+))?", text):
            numbers = {int(n) for n in m.group(1, 2, 3) if n}
            if m.group(2):
                numbers |= set(range(int(m.group(1)), int(m.group(2)) + 1))
            if not numbers <= sections.keys():
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
            elif m.group(4) and not re.search(rf"^{m.group(4)}\. ", sections[int(m.group(1))], flags=re.M):
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0)} (no such item)")
    assert not wrong, "references to docs/method.md sections that do not exist:\n" + "\n".join(wrong)


def test_the_readme_detector_commands_use_options_their_command_has() -> None:
    from detector.cli import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    block = re.search(r"## The detector CLI\n+```bash\n(.+?)\n```", _text("README.md"), flags=re.S)
    assert block is not None, "the README's detector CLI block is gone"
    lines = [line.split() for line in block.group(1).splitlines() if line.startswith("detector ")]
    wrong = [f"detector {words[1]} {flag}" for words in lines
             for flag in re.findall(r"--[a-z][a-z0-9-]*", " ".join(words))
             if flag not in commands[words[1]]._option_string_actions]  # fmt: skip
    assert len(lines) >= 8 and not wrong, f"README options the detector command does not have: {wrong}"
