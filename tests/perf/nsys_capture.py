"""Hand-made Nsight Systems SQLite exports for the tests of `perf.profile.capture_db` and what reads it: the tables
and columns the analysis and the summary read, filled with hand-placed rows (times in ns).

`clock_capture` is the suite clock's capture: an inference benchmark timed by ``CudaEventClock(lead_in_ms=0.5)``,
whose 4 readings each enqueue a 0.5 ms ``torch.cuda._sleep`` busy-wait (``spin_kernel``) around 3 timed calls of one
conv kernel (118-122 us) and one leaky ReLU (29-31 us) on stream 7; the last busy-wait, [12,060,000, 12,560,000) ns,
runs 60 us past the ``measured`` range [10,000,000, 12,500,000) ns, which holds 3 ``torch.infer`` ranges.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from perf.profile.capture_db import NO_STREAM

DATA = Path(__file__).parents[1] / "data" / "nsys"
US, MS = 1_000, 1_000_000
PID = 4242
MAIN = (PID << 24) | PID  # globalTid of the process's main thread

_COLUMNS = {
    "StringIds": "id INTEGER PRIMARY KEY, value TEXT NOT NULL",
    "ThreadNames": "nameId INTEGER, priority INTEGER, globalTid INTEGER",
    "NVTX_EVENTS": "start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER, textId INTEGER",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER, "
                                   "nameId INTEGER",
    "CUPTI_ACTIVITY_KIND_KERNEL": "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, "
                                  "correlationId INTEGER, demangledName INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, "
                                  "correlationId INTEGER, copyKind INTEGER, bytes INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMSET": "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, "
                                  "correlationId INTEGER",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "start INTEGER, end INTEGER, streamId INTEGER, correlationId INTEGER, "
                                           "syncType INTEGER, eventId INTEGER, eventSyncId INTEGER",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": "streamId INTEGER, correlationId INTEGER, eventId INTEGER, eventSyncId INTEGER",
    "OSRT_API": "start INTEGER, end INTEGER, globalTid INTEGER, nameId INTEGER",
}  # fmt: skip


class HandMade:
    """The subset of an nsys SQLite export that the analysis reads, filled by hand (times in ns)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {table: [] for table in _COLUMNS}
        self.strings: dict[str, int] = {}
        self.corr = 0

    def sid(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
            self.rows["StringIds"].append((self.strings[text], text))
        return self.strings[text]

    def thread(self, name: str, tid: int) -> int:
        gtid = (PID << 24) | tid
        self.rows["ThreadNames"].append((self.sid(name), 0, gtid))
        return gtid

    def nvtx(self, gtid: int, name: str, start: int, end: int) -> None:
        self.rows["NVTX_EVENTS"].append((start, end, 59, name, gtid, None))

    def cuda(self, gtid: int, name: str, start: int, end: int) -> int:
        self.corr += 1
        self.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append((start, end, gtid, self.corr, self.sid(name)))
        return self.corr

    def kernel(self, corr: int, start: int, end: int, name: str = "void conv_kernel(float*)", stream: int = 7) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_KERNEL"].append((start, end, 0, stream, corr, self.sid(name)))

    def memcpy(self, corr: int, start: int, end: int, kind: int, size: int, stream: int = 7) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append((start, end, 0, stream, corr, kind, size))

    def memset(self, corr: int, start: int, end: int, stream: int = 7) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append((start, end, 0, stream, corr))

    def event_sync(self, record_corr: int, sync_corr: int, stream: int = 7, event: int = 1) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_CUDA_EVENT"].append((stream, record_corr, event, sync_corr))
        self.rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append((0, 0, NO_STREAM, sync_corr, 1, event, sync_corr))

    def os(self, gtid: int, name: str, start: int, end: int) -> None:
        self.rows["OSRT_API"].append((start, end, gtid, self.sid(name)))

    def write(self, path: Path, tables: tuple[str, ...] | None = None) -> Path:
        conn = sqlite3.connect(path)
        for table, columns in _COLUMNS.items():
            if tables is None or table in tables or table == "StringIds":
                conn.execute(f"CREATE TABLE {table} ({columns})")
                marks = ", ".join("?" * len(columns.split(",")))
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", self.rows[table])
        conn.commit()
        conn.close()
        return path


SPIN = "void at::cuda::<unnamed>::spin_kernel(long)"
CONV = ("sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_warpsize1x2x1_g1_ffma_"
        "aligna4_alignc4_execute_kernel__5x_cudnn")  # fmt: skip
LEAKY = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::leaky_relu_kernel("
         "at::TensorIteratorBase &, const c10::Scalar &)::[lambda() (instance 1)]::operator ()() const::[lambda() "
         "(instance 2)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>"
         "(int, T2, T3)")  # fmt: skip
#: (start, duration, name) of the clock capture's 10 kernels.
CLOCK_KERNELS = (
    (10_020_000, 500_000, SPIN), (10_525_000, 120_000, CONV), (10_646_000, 30_000, LEAKY),
    (10_700_000, 500_000, SPIN), (11_204_000, 118_000, CONV), (11_323_000, 31_000, LEAKY),
    (11_380_000, 500_000, SPIN), (11_884_000, 122_000, CONV), (12_007_000, 29_000, LEAKY),
    (12_060_000, 500_000, SPIN),
)  # fmt: skip


def clock_capture(path: Path, nvtx: bool = True) -> Path:
    """The suite clock's capture (module docstring) written to ``path``; without its NVTX ranges if not ``nvtx``.

    CUDA API calls: cudaLaunchKernel 10 x 5,200 ns, cudaProfilerStop 9,000 ns, and the clock's event calls:
    cudaEventSynchronize 3 (519,000 + 520,000 + 521,000 ns), cudaEventRecordWithFlags_v11010 7 x 3,000,
    cudaEventCreateWithFlags 7 x 1,200, cudaEventElapsedTime 3 x 1,500, cudaEventDestroy 3 x 900 (23 calls,
    1,596,600 ns). No copies.
    """
    c = HandMade()
    main = c.thread("python", PID)
    if nvtx:
        c.nvtx(main, "measured", 10_000_000, 12_500_000)
        for start, end in ((10_030_000, 10_090_000), (10_710_000, 10_770_000), (11_390_000, 11_452_000)):
            c.nvtx(main, "torch.infer", start, end)
    for start, duration, name in CLOCK_KERNELS:
        c.kernel(c.cuda(main, "cudaLaunchKernel_v7000", start - 8_000, start - 2_800), start, start + duration, name)
    t = 13_000_000
    calls = [("cudaProfilerStop", 9_000)] + [("cudaEventSynchronize_v3020", d) for d in (519_000, 520_000, 521_000)]
    calls += [("cudaEventRecordWithFlags_v11010", 3_000)] * 7 + [("cudaEventCreateWithFlags_v3020", 1_200)] * 7
    calls += [("cudaEventElapsedTime_v3020", 1_500)] * 3 + [("cudaEventDestroy_v3020", 900)] * 3
    for name, duration in calls:
        c.cuda(main, name, t, t + duration)
        t += duration + 1_000
    return c.write(path)
