"""Kubernetes log reads stay byte-exact (a specification, against the fake API
server, whose pod log answers follow the kubelet's ReadLogs: an entry older than sinceTime is
skipped whatever its place in the file, limitBytes counts the stamps)."""

from __future__ import annotations

from typing import Any

from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import Sim

from queue_service.backends.kubernetes import KubernetesBackend


def started(api: FakeApiServer, sim: Sim, clock: FakeClock) -> tuple[KubernetesBackend, str, Any]:
    b = make_backend(api, clock, workload="indexed")
    eid = b.submit(request(kind="agent", gpus_per_node=0, mig_profile="1g.10gb")).external_id
    return b, eid, sim.run(eid)[0]


def read_all(b: KubernetesBackend, eid: str, offset: int, limit: int) -> bytes:
    out = bytearray()
    while True:
        chunk = b.logs(eid, offset=offset, limit=limit)
        out += chunk.data
        if chunk.eof or not chunk.data:
            return bytes(out)
        offset = chunk.next_offset


def test_a_read_past_the_end_of_a_growing_log_does_not_shift_later_reads(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """A reader may ask at any offset, e.g. one it kept from before; past the end it gets
    nothing, and once the log has grown that far the same offset names the same bytes."""
    b, eid, pod = started(api, sim, clock)
    now = clock()
    log = bytearray()
    for i in range(5):
        line = f"line {i:04d}\n".encode()  # 10 bytes
        sim.log(pod, line, at=now - 100 + i)
        log += line
    assert b.logs(eid, offset=120, limit=10).data == b""  # past the end (50 bytes)
    for i in range(5, 40):
        line = f"line {i:04d}\n".encode()
        sim.log(pod, line, at=now - 100 + i)
        log += line
    assert b.logs(eid, offset=120, limit=10).data == bytes(log[120:130])
    assert b.logs(eid, offset=200, limit=30).data == bytes(log[200:230])


def test_a_line_written_after_a_later_stamped_line_is_not_lost_on_resume(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """containerd stamps a line when its stream's goroutine reads it, then takes the file's
    lock: a stderr line stamped x.999999 can land after a stdout line stamped (x+1).000001
    (and an NTP step back does the same for whole seconds). The kubelet filters sinceTime
    per entry, not per file position: a resume must not drop the earlier-stamped line."""
    b, eid, pod = started(api, sim, clock)
    s = float(int(clock()) - 100)
    sim.log(pod, b"stdout: step 1\n", at=s + 1.000001)  # written first, stamped later
    first = b.logs(eid, offset=0, limit=1 << 16)
    assert first.data == b"stdout: step 1\n"
    sim.log(pod, b"stderr: warning\n", at=s + 0.999999)  # stamped earlier, written second
    sim.log(pod, b"stdout: step 2\n", at=s + 2.5)
    sim.succeed(eid)
    rest = read_all(b, eid, first.next_offset, 1 << 16)
    assert rest == b"stderr: warning\nstdout: step 2\n"


def test_a_reader_following_the_log_through_a_volcano_restart_in_place_sees_the_new_run(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Volcano's RestartJob (PodFailed/PodEvicted) recreates the gang under the same pod
    names and the same gpuq attempt: the master's log starts over. A reader that keeps
    reading at next_offset (as `gpuq logs -f` does while the attempt stays the same) must
    get the restarted run's output, not skip its first bytes."""
    b = make_backend(api, clock, workload="volcano")
    eid = b.submit(request(nodes=1, retries_max=2)).external_id
    master = sim.run(eid)[0]
    now = clock()
    run1 = b"".join(f"run 1 step {i:03d}\n".encode() for i in range(20))
    sim.log(master, run1, at=now - 50)
    got = bytearray()
    offset = 0
    chunk = b.logs(eid, offset=offset, limit=1 << 16)
    got += chunk.data
    offset = chunk.next_offset
    assert bytes(got) == run1
    sim.evict(eid)  # Volcano: RestartJob, the gang is created again
    clock.now += 5
    master = next(p for p in sim.run(eid) if p["metadata"]["name"] == master["metadata"]["name"])
    run2 = b"".join(f"run 2 step {i:03d}\n".encode() for i in range(30))
    source = chunk.source
    for i in range(30):
        sim.log(master, run2[i * 15 : (i + 1) * 15], at=clock() + i * 0.01)  # a line
        chunk = b.logs(eid, offset=offset, limit=1 << 16)
        if chunk.source != source:  # another log: it starts over (the CLI does the same)
            source, offset = chunk.source, 0
            chunk = b.logs(eid, offset=0, limit=1 << 16)
        got += chunk.data
        offset = chunk.next_offset
    assert bytes(got) == run1 + run2, bytes(got[len(run1) :])


def test_following_a_progress_bar_that_never_ends_its_line_costs_each_byte_a_few_times(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """tqdm redraws its bar with \\r and no \\n: a training job's stderr is one line that
    grows for hours, which the runtime writes as 16 KiB partial CRI entries, stamped by the
    kubelet only where the line starts. Resumed from the line's stamp, each read would re-read
    the line from its start (quadratic: 72 x for these 2 MiB). Each read is bracketed by two
    answers from a recent second instead, which tell where that second's entries begin in
    the line (docs/kubernetes.md): the next read starts there."""
    b, eid, pod = started(api, sim, clock)
    log = bytearray()
    entry = b"".join(f"\r{i:5d}/99999 [##########] loss 0.1234".encode() for i in range(400))
    entry = entry[: 16 * 1024]
    offset = 0
    got = bytearray()
    for _ in range(128):  # 2 MiB, an entry every 10 s, read as it comes (`gpuq logs -f`)
        clock.now += 10
        sim.log(pod, entry, at=clock())
        log += entry
        chunk = b.logs(eid, offset=offset, limit=1 << 20)
        got += chunk.data
        offset = chunk.next_offset
    sim.succeed(eid)
    got += read_all(b, eid, offset, 1 << 20)
    assert bytes(got) == bytes(log)
    # Measured: 4.0 x (per read: the probe, the entries of the resume's margin and the new
    # one, the probe again), whatever the length of the line.
    assert api.log_bytes_sent <= 4.2 * len(log), api.log_bytes_sent / len(log)


def test_a_progress_bar_that_grows_between_the_brackets_is_read_exactly(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """When the line grows between the probe before a read and the one after it, the read
    may have seen more than the probe: no position is learned from it, and nothing is lost
    or read twice."""
    b, eid, pod = started(api, sim, clock)
    log = bytearray()
    offset = 0
    got = bytearray()
    for i in range(40):
        clock.now += 3
        piece = f"\r{i:05d} ".encode() * 300
        sim.log(pod, piece, at=clock())
        log.extend(piece)

        calls = []

        def grow(i: int = i, calls: list[int] = calls) -> None:
            calls.append(1)
            if len(calls) == 2:  # the read itself, after the first probe
                late = f"\r{i:05d}+".encode() * 7
                sim.log(pod, late, at=clock() + 0.5)
                log.extend(late)

        if i % 2:  # another entry lands during the read, between the two probes
            api.inject(Fault("race", method="GET", path_contains="/log", action=grow, times=3))
        chunk = b.logs(eid, offset=offset, limit=1 << 16)
        got += chunk.data
        offset = chunk.next_offset
    sim.succeed(eid)
    got += read_all(b, eid, offset, 1 << 16)
    assert bytes(got) == bytes(log)


def test_a_read_far_past_a_large_logs_end_holds_no_more_than_a_bounded_answer(
    api: FakeApiServer, sim: Sim, clock: FakeClock, monkeypatch: Any
) -> None:
    """Any reader may ask for any offset (the API takes up to 1 TiB). With no position known
    below it, the read walks the log from its start; in one answer of offset+limit bytes a
    multi-GB log would sit whole in the web worker's memory. It walks in bounded answers
    (a small bound here, so that a small log spans several)."""
    from queue_service.backends.kubernetes import backend as k8s

    monkeypatch.setattr(k8s, "LOG_MAX_ANSWER", 256 * 1024)
    b, eid, pod = started(api, sim, clock)
    start = clock() - 10_000
    line = b"x" * 99 + b"\n"
    log = bytearray()
    for i in range(3 * k8s.LOG_MAX_ANSWER // len(line)):  # three answers' worth
        sim.log(pod, line, at=start + i * 0.01)
        log += line

    assert b.logs(eid, offset=1 << 40, limit=1 << 20).data == b""
    # a resumed answer also holds the lines before its position (its seconds, the margin)
    lines_of_3_s = 300 * (len(line) + 31)
    assert api.log_answer_max <= k8s.LOG_MAX_ANSWER + lines_of_3_s, api.log_answer_max
    # and the bytes stay exact at offsets walked to that way
    assert b.logs(eid, offset=len(log) - 250, limit=100).data == bytes(log[-250:-150])
