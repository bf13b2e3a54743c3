""""Why slower" (perf.profile.kernels): a real torch.profiler table of a real call, what moved between two tables,
and kernel names a person can tell apart."""

from __future__ import annotations

import pytest

from perf.profile.kernels import describe_changes, kernel_changes, kernel_table, short_name

#: Names as torch.profiler reported them on the H100 (2026-11-24), before and after a hand-written leaky ReLU.
WHERE = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::where_kernel_impl("
         "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float, "
         "float, bool)#1}, std::array<char*, 4ul> >(int, at::native::(anonymous namespace)::where_kernel_impl("
         "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float, "
         "float, bool)#1}, std::array<char*, 4ul>)")
LEAKY = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::leaky_relu_kernel("
         "at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() "
         "const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::leaky_relu_kernel("
         "at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() "
         "const::{lambda(float)#1}, std::array<char*, 2ul>)")
COMPARE = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::compare_scalar_kernel"
           "<float>(at::TensorIteratorBase&, at::native::(anonymous namespace)::OpType, float)::{lambda(float)#1}, "
           "std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::compare_scalar_kernel<float>("
           "at::TensorIteratorBase&, at::native::(anonymous namespace)::OpType, float)::{lambda(float)#1}, "
           "std::array<char*, 2ul>)")


def test_kernel_names_keep_what_tells_them_apart() -> None:
    assert short_name(WHERE) == "vectorized_elementwise_kernel<4, where_kernel_impl, array<char*, 4ul> >"
    assert short_name(LEAKY) == "vectorized_elementwise_kernel<4, leaky_relu_kernel, array<char*, 2ul> >"
    assert short_name(COMPARE) == "vectorized_elementwise_kernel<4, compare_scalar_kernel<float>, array<char*, 2ul> >"
    assert short_name("void fft2d_r2c_16x16<float>(float2*, float const*, int)") == "fft2d_r2c_16x16<float>"
    assert len(short_name("k<" + "x, " * 100 + "y>")) == 90


def _table(device: str, **us: float) -> dict:
    return {"device": device, "calls": 20, "rows": [{"name": n, "us_per_call": v, "count_per_call": 21} for n, v in
                                                    us.items()]}  # fmt: skip


def test_changes_list_new_gone_and_grown_kernels_largest_first() -> None:
    before = _table("cuda", leaky=496.0, conv=2000.0, fft=160.7)
    after = _table("cuda", where=835.7, mul=473.0, conv=2003.0, fft=239.3)
    changes = kernel_changes(before, after)
    assert [c["name"] for c in changes] == ["where", "leaky", "mul", "fft", "conv"]
    assert changes[1] == {"name": "leaky", "baseline_us": 496.0, "current_us": None, "delta_us": -496.0}
    lines = describe_changes(changes[:2])
    assert lines == ["+835.7 us/call  where (new -> 835.7 us)", "-496.0 us/call  leaky (496.0 -> gone us)"]
    assert kernel_changes(before, _table("cpu", where=1.0)) == [] and kernel_changes(None, after) == []


def test_a_real_model_change_shows_in_the_cpu_table() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(1, 3, 32, 32)
    conv = torch.nn.Conv2d(3, 8, 3)
    plain = kernel_table(lambda: conv(x), 3, device="cpu")
    changed = kernel_table(lambda: torch.nn.functional.hardswish(conv(x)), 3, device="cpu")
    assert plain["device"] == "cpu" and plain["calls"] == 3 and plain["rows"]
    assert all(row["us_per_call"] > 0 for row in plain["rows"])
    new = [c["name"] for c in kernel_changes(plain, changed, shown=15) if c["baseline_us"] is None]
    assert "aten::hardswish" in new
