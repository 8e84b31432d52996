"""What downloading a job's log costs on Kubernetes: bytes the API server sends for a full
download in 1 MiB reads (the CLI's and the API's largest read), against the fake API server
of tests/backends/kubernetes (over real HTTP, with the kubelet's log format: nanosecond
timestamps at line starts, sinceTime in whole seconds, limitBytes).

- offset+limit: what the backend did before (limitBytes=offset+limit, then slice);
- cursor, 1 process: the backend now (timestamps=true; the job here has ended, so the
  pieces come from one answer kept open between reads; a running job's reads resume with
  sinceTime from the position the previous read reached);
- cursor, 3 processes: reads taking turns over 3 backends (gunicorn's 3 workers);
- burst: the whole log written within one second (a sinceTime resume's worst case);
- progress bar: one line that never ends (tqdm's \r redraws), written as the runtime does,
  in 16 KiB partial entries (one every 10 s), read by 1 process, then by 3 taking turns.

    .venv/bin/python bench/k8s_logs_bench.py [--mib 4 16 64] [--how progress]

Needs the Volcano CRD schemas (../shared/k8s-schemas). Lines of 120 bytes, 100 a second
(12 KB/s of log) unless `burst` or `progress bar`. Each cell: the bytes the API server sent
(x the log), the log bytes the kubelet read from its file to answer (x the log: it reads
from the file's start for every answer, whatever sinceTime says), and wall seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "backends" / "kubernetes"))

from conftest import SCHEMAS, FakeClock, make_backend, request  # noqa: E402
from k8s_fakeapi import FakeApiServer  # noqa: E402
from k8s_sim import Sim  # noqa: E402

MIB = 1 << 20
CHUNK = MIB


ENTRY = 16 * 1024  # containerd's max_container_log_line_size: a long line's partial entries


def setup(
    api: FakeApiServer, clock: FakeClock, size: int, per_line_s: float, *, bar: bool = False
) -> tuple[Sim, str]:
    sim = Sim(api)
    sim.namespace("gpuq-team-a")
    sim.queue("team-a")
    sim.node("h100-01")
    b = make_backend(api, clock, workload="indexed", request_timeout_s=120)
    eid = b.submit(request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb")).external_id
    pod = sim.run(eid)[0]
    if bar:  # one line, no newline: 16 KiB entries, one every 10 s
        start = clock() - size / ENTRY * 10 - 10
        step = 0
        for i in range(size // ENTRY):
            entry = bytearray()
            while len(entry) < ENTRY:
                entry += f"\r{step:7d}/9999999 [####......] loss {1 / (step + 1):.6f}".encode()
                step += 1
            sim.log(pod, bytes(entry[:ENTRY]), at=start + i * 10)
    else:
        start = clock() - size / 120 * per_line_s - 10
        for i in range(size // 120):
            line = f"step {i:08d} ".encode().ljust(119, b".") + b"\n"
            sim.log(pod, line, at=start + i * per_line_s)
    sim.succeed(eid)
    b.close()
    return sim, eid


def old_way(api: FakeApiServer, clock: FakeClock, eid: str) -> int:
    """The earlier backend: every read asks for offset+limit bytes."""
    b = make_backend(api, clock, workload="indexed", request_timeout_s=120)
    ns = eid.split("/")[0]
    ((_, pod_name),) = api.store.objects[api.store.types[("", "v1", "pods")]]
    offset = 0
    while True:
        data = b._read_log(ns, pod_name, offset + CHUNK)[offset:]
        offset += len(data)
        if len(data) < CHUNK:
            break
    b.close()
    return offset


def cursor_way(api: FakeApiServer, clock: FakeClock, eid: str, workers: int) -> int:
    backends = [
        make_backend(api, clock, workload="indexed", request_timeout_s=120) for _ in range(workers)
    ]
    offset, i = 0, 0
    while True:
        chunk = backends[i % workers].logs(eid, offset=offset, limit=CHUNK)
        offset, i = chunk.next_offset, i + 1
        if chunk.eof:
            break
    for b in backends:
        b.close()
    return offset


HOWS = (
    "offset+limit",
    "cursor, 1 process",
    "cursor, 3 processes",
    "burst",
    "progress bar, 1 process",
    "progress bar, 3 processes",
)


def measure(size: int, how: str) -> tuple[int, int, int, float]:
    clock = FakeClock(time.time())
    with FakeApiServer(crd_dir=SCHEMAS) as api:
        api.store.clock = clock
        _, eid = setup(
            api, clock, size, 0.0 if how == "burst" else 0.01, bar=how.startswith("progress")
        )
        api.log_bytes_sent = api.log_bytes_scanned = 0
        t0 = time.perf_counter()
        if how == "offset+limit":
            got = old_way(api, clock, eid)
        elif how.endswith("3 processes"):
            got = cursor_way(api, clock, eid, 3)
        else:
            got = cursor_way(api, clock, eid, 1)
        secs = time.perf_counter() - t0
        assert got >= size - ENTRY, (got, size)
        return got, api.log_bytes_sent, api.log_bytes_scanned, secs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--how", nargs="+", default=[], help="only the rows naming these words")
    args = parser.parse_args()
    print("| how | " + " | ".join(f"{m} MiB log: sent, scanned, time" for m in args.mib) + " |")
    print("|---|" + "---|" * len(args.mib))
    for how in HOWS:
        if args.how and not any(word in how for word in args.how):
            continue
        cells = []
        for mib in args.mib:
            got, sent, scanned, secs = measure(mib * MIB, how)
            cells.append(
                f"{sent / MIB:,.1f} MiB ({sent / got:.2f}x), "
                f"{scanned / MIB:,.1f} MiB ({scanned / got:.2f}x), {secs:.1f} s"
            )
        print(f"| {how} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
