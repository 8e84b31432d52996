"""Kubernetes log reads stay byte-exact (a specification, against the fake API
server, whose pod log answers follow the kubelet's ReadLogs: an entry older than sinceTime is
skipped whatever its place in the file, limitBytes counts the stamps)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import FakeClock, make_backend, request
from k8s_fakeapi import FakeApiServer, Fault
from k8s_sim import Sim
from test_k8s_logs import download

from queue_service.backends.kubernetes import KubernetesBackend
from queue_service.backends.kubernetes.backend import rank0_pod

MIB = 1 << 20


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
    """Volcano's RestartJob (PodEvicted) recreates the gang under the same pod
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
    sim.evict(eid, cause="preemption")  # PodEvicted -> RestartJob: the gang created again
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


def write_bar(sim: Sim, pod: Any, size: int, *, start: float) -> bytes:
    """A progress bar that never ends its line, `size` bytes of it, as the runtime writes
    it: 16 KiB partial entries (containerd's max_container_log_line_size), one every 10 s."""
    out = bytearray()
    step = 0
    while len(out) < size:
        entry = bytearray()
        while len(entry) < 16 * 1024:
            entry += f"\r{step:7d}/9999999 [####......] loss {1 / (step + 1):.6f}".encode()
            step += 1
        sim.log(pod, bytes(entry[: 16 * 1024]), at=start + len(out) // (16 * 1024) * 10)
        out += entry[: 16 * 1024]
    return bytes(out)


def test_downloading_a_finished_progress_bar_in_pieces_costs_its_length_once_at_any_length(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """A line that never ends, downloaded after the job ended in 1 MiB pieces (the CLI's and
    the UI's download). Resumed with sinceTime, each piece re-read the line from its start:
    2.7 x the log at 2 MiB, 3.7 x at 4 MiB, 9.8 x at 16 MiB, in the bytes the API server sent
    and in those the kubelet read from its file (it reads from the start for every answer).
    Counted here in both, at two lengths: the cost per byte must not grow with the log."""
    per_byte = []
    for i, size in enumerate((1 * MIB, 4 * MIB)):
        b = make_backend(api, clock, workload="indexed")
        job_id = f"3f2b8c1e-5d4a-4b7e-9c0f-1a2b3c4d5e6{i}"
        eid = b.submit(
            request(job_id=job_id, kind="agent", gpus_per_node=0, mig_profile="1g.10gb")
        ).external_id
        (pod,) = sim.run(eid)
        bar = write_bar(sim, pod, size, start=clock() - 10_000)
        sim.succeed(eid)
        sent, scanned = api.log_bytes_sent, api.log_bytes_scanned

        assert download(b, eid, MIB) == bar
        per_byte.append(
            ((api.log_bytes_sent - sent) / size, (api.log_bytes_scanned - scanned) / size)
        )
        b.close()

    (sent_1, scanned_1), (sent_4, scanned_4) = per_byte
    # Each byte once (one stamp, where the line starts), at either length.
    assert sent_4 <= 1.01 and scanned_4 <= 1.01, per_byte
    assert sent_4 <= sent_1 + 0.01 and scanned_4 <= scanned_1 + 0.01, per_byte


def test_a_download_whose_kept_answer_is_cut_goes_on_from_where_it_was(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """A finished log's answer is kept open between the pieces of a download; a proxy may
    close it meanwhile (an idle timeout). The next piece is read from a new answer, begun at
    the position the last piece learnt: nothing is lost or read twice."""
    b, eid, pod = started(api, sim, clock)
    bar = write_bar(sim, pod, 24 * MIB, start=clock() - 100_000)  # more than socket buffers
    sim.succeed(eid)
    got = bytearray()
    offset = 0
    for _ in range(3):
        chunk = b.logs(eid, offset=offset, limit=MIB)
        got += chunk.data
        offset = chunk.next_offset
    assert api.cut_log_answers() == 1  # it was being written, not read
    while True:
        chunk = b.logs(eid, offset=offset, limit=MIB)
        got += chunk.data
        offset = chunk.next_offset
        if chunk.eof:
            break
    assert bytes(got) == bar
    # Where the cut was found (past what the client's socket still held), a new answer
    # resumed inside the bar's line, from its start: the bar once, and once more at most.
    assert len(api.calls("GET", "/log")) == 2
    assert api.log_bytes_scanned <= 2 * len(bar)


def test_a_kept_answer_left_idle_is_closed_and_the_next_read_resumes_byte_exact(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    from queue_service.backends.kubernetes import backend as k8s

    b, eid, pod = started(api, sim, clock)
    lines = b""
    for i in range(20_000):
        line = f"line {i:05d}\n".encode()
        sim.log(pod, line, at=clock() - 500 + i * 0.01)
        lines += line
    sim.succeed(eid)
    first = b.logs(eid, offset=0, limit=1000)
    opened = len(api.calls("GET", "/log"))
    clock.now += k8s.LOG_STREAM_IDLE_S + 1
    second = b.logs(eid, offset=first.next_offset, limit=1000)  # closes it, opens another
    third = b.logs(eid, offset=second.next_offset, limit=1000)  # goes on with that one

    assert first.data + second.data + third.data == lines[:3000]
    assert len(api.calls("GET", "/log")) == opened + 1


def test_an_answer_kept_for_a_download_given_up_is_closed_once_idle(
    api: FakeApiServer, sim: Sim, clock: FakeClock, monkeypatch: Any
) -> None:
    """No read may come again to close it: the backend closes it itself, and with it the
    API server's answer (which would otherwise wait on the connection, and the kubelet's)."""
    from queue_service.backends.kubernetes import backend as k8s

    monkeypatch.setattr(k8s, "LOG_STREAM_IDLE_S", 0.5)
    b, eid, pod = started(api, sim, clock)
    write_bar(sim, pod, 24 * MIB, start=clock() - 100_000)  # more than socket buffers hold
    sim.succeed(eid)
    b.logs(eid, offset=0, limit=MIB)
    assert api.log_answers_open() == 1
    clock.now += 1

    deadline = time.monotonic() + 10
    while api.log_answers_open() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert api.log_answers_open() == 0


def test_the_log_of_an_attempt_whose_workload_was_deleted_is_said_to_be_gone(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """A stopped attempt's workload is deleted, its pods with it: a read of that attempt's log
    (after a requeue, by the id its run kept) says the log is gone, not that it was empty."""
    b = make_backend(api, clock, workload="indexed")
    eid = b.submit(request(nodes=1)).external_id
    (pod,) = sim.run(eid)
    sim.log(pod, b"saving checkpoint\n")
    first = b.logs(eid)
    assert (first.data, first.gone) == (b"saving checkpoint\n", False)

    assert b.cancel(eid, grace_s=30) is True
    sim.kubelet_confirms_stops()
    b.poll([eid])  # the stop's end seen: the workload is deleted

    gone = b.logs(eid, offset=first.next_offset)
    assert (gone.data, gone.eof, gone.gone) == (b"", True, True)


@pytest.mark.parametrize("workload", ["indexed", "volcano"])
def test_the_log_of_an_attempt_whose_workload_is_being_deleted_with_no_pods_left_is_gone(
    api: FakeApiServer, sim: Sim, clock: FakeClock, workload: str
) -> None:
    """A stop deletes the workload in the foreground: its pods go first, then it waits, held
    by gpuq's finalizer, for a poll to report the end. Between the two no pod of it will come
    again (a workload being deleted makes none), so a read then is of a log that is gone, as
    once the workload went: not "nothing yet", which a follower would ask again for ever."""
    b = make_backend(api, clock, workload=workload, image_default="busybox")
    eid = b.submit(request(nodes=2)).external_id
    pod = rank0_pod(sim.run(eid))
    assert pod is not None
    sim.log(pod, b"saving checkpoint\n")
    first = b.logs(eid)

    assert b.cancel(eid, grace_s=30) is True
    sim.kubelet_confirms_stops()
    _, held = sim.workload(eid)
    assert held["metadata"].get("deletionTimestamp")  # being deleted, not yet gone
    assert sim.pods(eid) == []

    gone = b.logs(eid, offset=first.next_offset)

    assert (first.data, gone.data, gone.next_offset, gone.eof, gone.gone) == (
        b"saving checkpoint\n",
        b"",
        first.next_offset,
        True,
        True,
    )


def test_the_log_of_a_workload_between_its_pods_is_nothing_yet(
    api: FakeApiServer, sim: Sim, clock: FakeClock
) -> None:
    """Volcano restarting a gang deletes its pods, not the workload: new ones come, so a read
    then is nothing yet, neither the end nor gone."""
    b = make_backend(api, clock, workload="volcano", image_default="busybox")
    eid = b.submit(request(nodes=2)).external_id
    sim.run(eid)
    sim._remove_pods(eid)

    chunk = b.logs(eid)

    assert (chunk.data, chunk.eof, chunk.gone) == (b"", False, False)
