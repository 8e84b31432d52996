"""A job's log file is its own, also when Slurm gives its id again: Slurm's ids restart when
slurmctld's state is wiped while slurmdbd keeps its records, and wrap at MaxJobId
(data/reused_ids.json is the lab giving ids 142-145 to eight gpuq jobs). Log files are named
by the attempt, which the external id carries, not by the Slurm id (with `--open-mode=append`
a job would add its output to the file an older job with its id left). A fake login node
stands in for Slurm: it runs each submitted script's directives the way sbatch and slurmstepd
do (filename patterns, `--chdir`, open mode) and writes what the job prints there."""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import cast

from queue_service.backends.slurm import SlurmBackend, commands
from queue_service.backends.slurm.backend import SlurmSettings
from queue_service.backends.slurm.ssh import Result, SSHConnection

from .conftest import request

HOME = "/home/slurmuser"


class FakeSlurmLogin:
    """A login node whose Slurm gives every job the id `reused_id` (as after a wrap), runs it
    at once to completion and writes its output where its directives say."""

    def __init__(self, reused_id: str) -> None:
        self.reused_id = reused_id
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        self.workdir_of: dict[str, str] = {}
        self.where = "slurmuser@fake:22"

    # -- SFTP side ---------------------------------------------------------------------------
    def home(self) -> str:
        return HOME

    def make_dir(self, path: str) -> bool:
        if path in self.dirs:
            return False
        while path not in ("", "/"):
            self.dirs.add(path)
            path = posixpath.dirname(path)
        return True

    def chmod(self, path: str, mode: int) -> bool:
        return True

    def read_file(self, path: str, offset: int, limit: int) -> bytes | None:
        data = self.files.get(path)
        return None if data is None else data[offset : offset + limit]

    def close(self) -> None:
        pass

    # -- Slurm side --------------------------------------------------------------------------
    def _expand(self, pattern: str, job_id: str, name: str, chdir: str) -> str:
        values = {
            **dict.fromkeys("jJA", job_id),
            **{"a": "4294967294", "x": name, "u": "slurmuser", "N": "gpu1"},
            **{"n": "0", "t": "0", "s": "batch", "%": "%"},
        }
        path = re.sub(r"%(\d*)([A-Za-z%])", lambda m: values.get(m.group(2), m.group(0)), pattern)
        return path if path.startswith("/") else posixpath.join(chdir, path)

    def run(self, command: str, stdin: bytes | None = None) -> Result:
        word = command.split()[0]
        if word == "sbatch":
            return self._sbatch((stdin or b"").decode())
        ids = re.search(r"-j (\S+)", command)
        asked = ids.group(1).split(",") if ids else list(self.workdir_of)
        known = [i for i in asked if i in self.workdir_of]
        if word == "squeue":
            if commands.WORKDIR_FORMAT in command:
                return Result(0, "".join(f"{i}|{self.workdir_of[i]}\n" for i in known), "")
            return Result(
                0, "".join(f"{i}|COMPLETED|0|{self.workdir_of[i]}|None\n" for i in known), ""
            )
        if word == "sacct":
            return Result(
                0,
                "".join(
                    f"{i}|COMPLETED|0:0|2026-12-02T15:08:28|gpu1|{self.workdir_of[i]}|None\n"
                    for i in known
                ),
                "",
            )
        return Result(1, "", f"{word}: not in this fake")

    def _sbatch(self, text: str) -> Result:
        options: dict[str, str] = {}
        for line in text.split("\n")[1:]:
            if not line.startswith("#SBATCH"):
                break
            key, _, value = line.removeprefix("#SBATCH ").partition("=")
            options[key] = value
        job_id = self.reused_id
        chdir = options["--chdir"]
        name = options.get("--job-name", "sbatch")
        self.workdir_of[job_id] = chdir
        gpuq_id = next(
            shlex.split(line)[1].split("=", 1)[1]
            for line in text.split("\n")
            if line.startswith("export GPUQ_JOB_ID=")
        )
        printed = f"output of {gpuq_id}\n".encode()
        path = self._expand(options.get("--output", "slurm-%j.out"), job_id, name, chdir)
        if options.get("--open-mode") == "append":
            self.files[path] = self.files.get(path, b"") + printed
        else:
            self.files[path] = printed
        return Result(0, f"{job_id}\n", "")


def test_a_job_given_a_reused_slurm_id_shows_only_its_own_output() -> None:
    """Two gpuq jobs (of any teams: by default they all run as the cluster's one user) get the
    same Slurm id, the second after the first has ended. Reading the second job's log must
    give what the second job printed, not the first job's output before it."""
    login = FakeSlurmLogin(reused_id="142")
    settings = SlurmSettings(host="fake", user="slurmuser", known_hosts="pinned")
    backend = SlurmBackend("lab", settings, cast(SSHConnection, login))

    first = request(team="vision", name="secret-eval")
    backend.submit(first)
    second = request(team="nlp", name="other-team")
    second_id = backend.submit(second).external_id

    chunk = backend.logs(second_id)
    assert chunk.data == f"output of {second.job_id}\n".encode(), (
        f"the second job's log also holds the first job's output: {chunk.data!r}"
    )
