"""What reading a job's log costs on Kubernetes, counted in the bytes the fake API server
sent. The pod log API has no byte offset: a read at `offset` either re-reads the log from
its start (offset+limit bytes: a full download in 1 MiB reads is quadratic), or resumes
from a position the backend learnt on an earlier read (`sinceTime` + `timestamps=true`)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer
from k8s_sim import Sim

from queue_service.backends.kubernetes import KubernetesBackend
from queue_service.backends.kubernetes.backend import LogCursor, StampedReader, split_stamped_log

MIB = 1 << 20


def started(api: FakeApiServer, sim: Sim, clock: FakeClock) -> tuple[KubernetesBackend, str, Any]:
    b = make_backend(api, clock, workload="indexed")
    eid = b.submit(request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb")).external_id
    return b, eid, sim.run(eid)[0]


def write_log(sim: Sim, pod: Any, size: int, *, start: float, per_line_s: float) -> bytes:
    """A log of `size` bytes in lines of 120 bytes (and a few longer ones, written as
    several CRI entries), one line every `per_line_s` seconds from `start`."""
    out = bytearray()
    i = 0
    while len(out) < size:
        at = start + i * per_line_s
        if i % 997 == 0:  # a 40 KiB line the runtime splits into partial entries
            for part in range(3):
                chunk = bytes([65 + part]) * 13_653 + (b"\n" if part == 2 else b"")
                sim.log(pod, chunk, at=at)
                out += chunk
        else:
            line = f"step {i:08d} loss {1 / (i + 1):.6f} ".encode().ljust(119, b".") + b"\n"
            sim.log(pod, line, at=at)
            out += line
        i += 1
    return bytes(out)


def download(b: KubernetesBackend, eid: str, limit: int) -> bytes:
    data = bytearray()
    offset = 0
    while True:
        chunk = b.logs(eid, offset=offset, limit=limit)
        assert chunk.next_offset == offset + len(chunk.data)
        data += chunk.data
        offset = chunk.next_offset
        if chunk.eof:
            return bytes(data)


def test_a_full_download_of_a_multi_mib_log_transfers_it_about_once(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b, eid, pod = started(api, sim, clock)
    log = write_log(sim, pod, 8 * MIB, start=clock() - 3600, per_line_s=0.01)
    sim.succeed(eid)

    assert download(b, eid, MIB) == log
    # Each byte once, plus the kubelet's timestamps (31 bytes a line): not the 36 MiB of
    # offset+limit reads. The job has ended: the pieces are read from one answer kept open,
    # so the kubelet too reads its file once (an answer resumed with sinceTime has it read
    # from its start again: 8.5 x the log for 16 MiB in 1 MiB pieces).
    assert api.log_bytes_sent < 1.4 * len(log)
    assert api.log_bytes_scanned < 1.01 * len(log)


def test_reads_stay_byte_exact_across_partial_lines_shared_timestamps_and_growth(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    b, eid, pod = started(api, sim, clock)
    now = clock()
    entries = [
        (now - 5, "ü ✓ unterminated ".encode()),  # a line still being written
        (now - 5, b"still the same line\n"),
        (now - 5, b"same timestamp, next line\n"),
        (now - 5, b"\n"),
        (now - 4.5, b"2025-01-01T00:00:00.000000000Z looks like a prefix\n"),
        (now - 4.5, b"\r\rprogress\rbar\n"),
    ]
    sent = bytearray()
    offset = 0
    got = bytearray()
    for at, data in entries:
        sim.log(pod, data, at=at)
        sent += data
        for _ in range(3):  # a reader that keeps up, in reads of 7 bytes
            chunk = b.logs(eid, offset=offset, limit=7)
            got += chunk.data
            offset = chunk.next_offset
    sim.succeed(eid)
    while True:
        chunk = b.logs(eid, offset=offset, limit=7)
        got += chunk.data
        offset = chunk.next_offset
        if chunk.eof:
            break
    assert bytes(got) == bytes(sent)
    # Any offset, from a process that has seen no earlier read, is the same bytes.
    fresh = make_backend(api, clock, workload="indexed")
    for start in range(0, len(sent), 5):
        assert fresh.logs(eid, offset=start, limit=11).data == bytes(sent[start : start + 11])


@pytest.mark.parametrize("readers", [1, 3])
def test_a_download_spread_over_processes_costs_about_the_log_once_per_process(
    api: FakeApiServer, sim: Sim, clock: FakeClock, readers: int
) -> None:
    """gunicorn runs several workers, each with its own backend: a read that lands on one
    resumes from the last position that worker learnt, so each read re-reads the reads
    it did not see."""
    _, eid, pod = started(api, sim, clock)
    log = write_log(sim, pod, 6 * MIB, start=clock() - 3600, per_line_s=0.01)
    sim.succeed(eid)
    workers = [make_backend(api, clock, workload="indexed") for _ in range(readers)]
    data = bytearray()
    offset, i = 0, 0
    while True:
        chunk = workers[i % readers].logs(eid, offset=offset, limit=MIB)
        data += chunk.data
        offset, i = chunk.next_offset, i + 1
        if chunk.eof:
            break
    assert bytes(data) == log
    # A full download costs about `readers` times the log: linear in the log's size.
    assert api.log_bytes_sent < (1.2 * readers + 0.2) * len(log)


def test_a_stamped_answer_reads_the_same_however_it_arrives_in_chunks() -> None:
    """The kept answers of finished logs are read as they arrive: a stamp, a line or a
    character may be split anywhere between two chunks."""
    stamp = b"2025-06-15T15:06:40.%09dZ "
    body = b"".join(
        [
            stamp % 1 + "ü ✓ unterminated ".encode() + b"still the same line\n",
            stamp % 1 + b"same timestamp, next line\n",
            stamp % 1 + b"\n",
            stamp % 2 + b"2025-01-01T00:00:00.000000000Z looks like a prefix\n",
            stamp % 3 + b"\r\rprogress" * 300 + b"\rbar",
        ]
    )
    lines = split_stamped_log(body, resumed=False, cut=False)
    whole = b"".join(line.data for line in lines)

    def read_all(size: int) -> tuple[bytes, list[LogCursor | None]]:
        chunks = iter([body[i : i + size] for i in range(0, len(body), size)])
        reader = StampedReader(chunks, None)
        got, cursors = bytearray(), []
        while data := reader.read(0, 7)[0]:
            got += data
            cursors.append(reader.cursor)
        return bytes(got), [*cursors, reader.cursor]

    reference = read_all(len(body))
    assert reference[0] == whole
    last = lines[-1]  # the log ends inside it: a line still being written when read
    assert reference[1][-1] == LogCursor(last.stamp or b"", 0, len(last.data), last.lead, open=True)
    for size in (1, 2, 3, 30, 31, 32, 1000):
        assert read_all(size) == reference, size
