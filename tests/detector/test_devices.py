"""detector.devices: the one parser of device names and the one list of precisions, and every former parser
(the command line's, the suite's option and session, the runners') going through it."""

from __future__ import annotations

import argparse
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detector import choices, devices
from detector.backends import base
from detector.errors import BackendError
from perf import options, session, subject

# Names near the valid ones: every device word, colons, ASCII and non-ASCII digits, case and spaces.
names = st.text(alphabet="autocpudaCUDA:0123456789-x ²١", max_size=9) | st.sampled_from(
    ["auto", "cpu", "cuda", "cuda:0", "cuda:12", "cuda:", "cpu:0", "auto:0", "gpu", "CUDA:1", " cpu "])


@pytest.mark.parametrize(("name", "expected"), [
    ("auto", ("auto", None)), ("cpu", ("cpu", None)), ("cuda", ("cuda", None)), ("cuda:0", ("cuda", 0)),
    ("cuda:12", ("cuda", 12)),
])  # fmt: skip
def test_parse_device_gives_type_and_index(name: str, expected: tuple[str, int | None]) -> None:
    assert devices.parse_device(name) == expected


@pytest.mark.parametrize("name", ["gpu", "", "cuda:", "cuda:-1", "cuda:x", "cpu:0", "auto:0", "CPU", " cpu", "cuda:²",
                                  "cuda:١"])
def test_parse_device_rejects_other_names_listing_the_allowed_forms(name: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"unknown device {name!r}; allowed: auto, cpu, cuda or cuda:N")):
        devices.parse_device(name)


def test_parse_device_without_auto_refuses_auto() -> None:
    with pytest.raises(ValueError, match=r"'auto'; allowed: cpu, cuda or cuda:N$"):
        devices.parse_device("auto", allow_auto=False)


def _accepts(parse, *args) -> bool:  # noqa: ANN001 - any parser
    try:
        parse(*args)
    except (ValueError, argparse.ArgumentTypeError, BackendError):
        return False
    return True


@given(names)
def test_perf_device_option_accepts_what_the_owner_accepts(text: str) -> None:
    assert _accepts(options.parse_device, text) == _accepts(devices.parse_device, text.strip().lower())


@given(names)
def test_command_line_device_accepts_what_the_owner_accepts(text: str) -> None:
    assert _accepts(choices.device_name, text) == _accepts(devices.parse_device, text.strip().lower())


@given(names)
def test_runner_device_is_the_owners_parse_without_auto(text: str) -> None:
    try:
        expected = devices.parse_device(text, allow_auto=False)
    except ValueError:
        with pytest.raises(BackendError, match=r"runner 'r': unknown device .*; allowed: cpu, cuda \(or cuda:N\)"):
            base._parse_device("r", text, ("cpu", "cuda"))
    else:
        assert base._parse_device("r", text, ("cpu", "cuda")) == expected


@given(names, st.integers(0, 16))
def test_session_resolves_the_index_the_owner_parsed(text: str, count: int) -> None:
    try:
        kind, index = devices.parse_device(text)
    except ValueError:
        with pytest.raises(ValueError, match="unknown device"):
            session.resolve_device(text, count)
        return
    resolved, missing = session.resolve_device(text, count)
    if kind == "auto":
        assert (resolved, missing) == ("cuda" if count else "cpu", None)
    elif index is not None and index >= count:
        assert missing == f"no CUDA device {index} (found {count})"
    else:
        assert resolved == text
        assert (missing is None) == (kind == "cpu" or count > 0)


# The rules the three string parsers had before they went through the owner: the suite's regex and the command
# line's and the runners' partition checks. They agree with it on ASCII names; the owner refuses non-ASCII digits
# (the old rules passed "cuda:²" or "cuda:١" on, for torch to fail on) and the runners now refuse "cuda:".
_OLD_OPTION = re.compile(r"auto|cpu|cuda(:\d+)?")


def _old_command_line(name: str) -> bool:
    kind, colon, index = name.partition(":")
    return name == "auto" or (kind in ("cpu", "cuda") and not colon) or (kind == "cuda" and index.isdigit())


def _old_runner(text: str) -> tuple[str, int | None] | None:
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind != "cuda" or not index.isdigit())):
        return None
    return kind, (int(index) if index else None)


@given(st.text(alphabet="autocpudaCUDA:0123456789-x ", max_size=9))
def test_owner_keeps_the_former_parsers_results_on_ascii_names(text: str) -> None:
    name = text.strip().lower()
    assert _accepts(options.parse_device, text) == bool(_OLD_OPTION.fullmatch(name))
    assert _accepts(choices.device_name, text) == _old_command_line(name)
    if not text.endswith(":"):
        new = base._parse_device("r", text, ("cpu", "cuda")) if _accepts(base._parse_device, "r", text,
                                                                            ("cpu", "cuda")) else None
        assert new == _old_runner(text)


def test_every_precision_list_is_the_owners() -> None:
    from detector.backends import registry
    from detector.trt import build

    assert devices.PRECISIONS == ("fp32", "fp16", "int8")
    assert options.PRECISIONS is devices.PRECISIONS
    assert base.PRECISIONS is devices.PRECISIONS
    assert subject.PRECISIONS is devices.PRECISIONS
    assert build.PRECISIONS is devices.PRECISIONS
    assert choices.PRECISIONS is devices.PRECISIONS
    assert base.DEVICES is registry.DEVICES is devices.DEVICES
    assert choices.DEVICE_FORMS is devices.DEVICE_FORMS


def test_a_bare_cuda_is_torchs_current_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a host whose current device is GPU 1
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert devices.device_index("cuda") == 1
    assert devices.device_index(torch.device("cuda")) == 1
    assert devices.device_index("cuda:0") == 0 and devices.device_index(torch.device("cuda", 2)) == 2
    with pytest.raises(ValueError, match="device 'cpu' is not a CUDA device"):
        devices.device_index("cpu")


def test_a_bare_cuda_without_a_cuda_device_reads_as_gpu_0(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.device_index("cuda") == 0
