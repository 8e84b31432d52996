"""A command's program (argument 0) is run as the spec names it, whatever its name: the spec
takes any non-empty argument 0, and the local and Kubernetes backends exec it as given.

The batch script's launch line must not let the launchers in front of it read the program's
name as something else: `env` (the user's env) reads every word with `=` as a variable (a
program path such as `sweeps/lr=0.1/run.sh`, Hydra's way of naming runs, would be set as a
variable and the next argument run instead), bash's `exec` reads a word starting with `-` as
its option (`exec -a NAME prog` runs `prog`), and so does `srun` (an image job's launcher).

On the lab, with programs in a directory every user can read; the backend is the test's own
(the shared `backend` fixture's `scancel -u` would stop other users of the lab's jobs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_service.backends.base import RemoteState
from queue_service.backends.slurm import SlurmBackend, script
from queue_service.backends.slurm.script import ScriptOptions

from .conftest import lab_backend, request, wait_for

pytestmark = pytest.mark.slurm

PRINTER = '#!/bin/sh\necho "ran $0 $* X=$X"\n'


@pytest.fixture(scope="module")
def lab(slurm_lab: None) -> Iterator[SlurmBackend]:
    backend = lab_backend()
    yield backend
    backend.close()


@pytest.fixture
def programs() -> Iterator[Path]:
    """A directory the lab's users can read, with `lr=0.1/run.sh` and `-x` in it."""
    where = Path(f"/tmp/gpuq-programs-{uuid.uuid4().hex[:8]}")
    (where / "lr=0.1").mkdir(parents=True)
    for program in (where / "lr=0.1" / "run.sh", where / "-x"):
        program.write_text(PRINTER)
        program.chmod(0o755)
    where.chmod(0o755)
    (where / "lr=0.1").chmod(0o755)
    yield where
    shutil.rmtree(where)


def run_on_lab(lab: SlurmBackend, **overrides: object) -> tuple[str, str]:
    external_id = lab.submit(request(**overrides)).external_id
    status = wait_for(lab, external_id)
    out = lab.logs(external_id).data.decode(errors="replace")
    err = lab.logs(external_id, stream="stderr").data.decode(errors="replace")
    return status.state, out + err


def test_a_program_path_with_an_equals_sign_runs_with_the_users_env(
    lab: SlurmBackend, programs: Path
) -> None:
    program = str(programs / "lr=0.1" / "run.sh")
    state, said = run_on_lab(lab, command=(program, "epoch", "1"), env={"X": "1"})
    assert (state, said) == (RemoteState.SUCCEEDED, f"ran {program} epoch 1 X=1\n")


def test_a_program_path_with_an_equals_sign_alone_is_run_not_read_as_a_variable(
    lab: SlurmBackend, programs: Path
) -> None:
    # `env X=1 a=b` would print the environment and succeed without running anything.
    program = str(programs / "lr=0.1" / "run.sh")
    state, said = run_on_lab(lab, command=(program,), env={"X": "1"})
    assert (state, said) == (RemoteState.SUCCEEDED, f"ran {program}  X=1\n")


def test_a_program_whose_name_starts_with_a_dash_is_not_an_option_of_exec(
    lab: SlurmBackend,
) -> None:
    """`exec -a x touch <marker>` would run touch: the program asked for is `-a`, which does
    not exist, so the job fails as command not found and nothing else runs."""
    marker = Path(f"/tmp/gpuq-pwned-{uuid.uuid4().hex[:8]}")
    state, said = run_on_lab(lab, command=("-a", "x", "touch", str(marker)))
    assert not marker.exists()
    assert state == RemoteState.FAILED
    assert "-a" in said and "not found" in said.lower()


def test_a_program_whose_name_starts_with_a_dash_runs_as_given_with_the_users_env(
    lab: SlurmBackend, programs: Path
) -> None:
    state, said = run_on_lab(
        lab, command=("-x", "a"), env={"X": "2", "PATH": f"{programs}:/usr/bin:/bin"}
    )
    assert (state, said) == (RemoteState.SUCCEEDED, "ran " + str(programs / "-x") + " a X=2\n")


@pytest.mark.parametrize("env", [{}, {"X": "3"}])
def test_an_image_jobs_program_starting_with_a_dash_is_not_an_option_of_srun(
    slurm_lab: None, programs: Path, env: dict[str, str]
) -> None:
    """The lab has no Pyxis: a stand-in `srun` drops the `--container-*` options and hands the
    rest to the real srun, inside a real allocation, whose option parser is what is tested.
    Were `-x` read as an option, srun would refuse it (or take it, for `--export=…` and such)."""
    stand_in = programs / "bin"
    stand_in.mkdir(mode=0o755)
    (stand_in / "srun").write_text(
        "#!/bin/bash\n"
        "args=()\n"
        'for a in "$@"; do [[ $a == --container-* ]] || args+=("$a"); done\n'
        'exec /usr/bin/srun "${args[@]}"\n'
    )
    (stand_in / "srun").chmod(0o755)
    # The program by a relative name, as a user of the image would give it.
    job = request(image="ubuntu:22.04", command=("-x", "a"), env=env)
    launch = script.render(job, ScriptOptions(), "/tmp/w").rstrip("\n").split("\n")
    line = "\n".join(launch[-2:]) if env else launch[-1]
    path = f"{stand_in}:{programs}:/usr/bin:/bin"
    done = subprocess.run(
        ["/usr/sbin/runuser", "-u", "slurmuser", "--", "env", f"PATH={path}", "salloc", "-Q", "-N1",
         "-w", "gpu1", "-t", "1", "bash", "-c", line],
        capture_output=True, text=True, timeout=60, cwd="/tmp",
        env={**os.environ, "PATH": path},
    )  # fmt: skip
    want = f"X={env['X']}" if env else "X="
    assert done.stdout == f"ran {programs / '-x'} a {want}\n", done.stderr
