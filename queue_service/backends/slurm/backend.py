"""The Slurm backend: dispatch, follow, cancel, logs and inventory over SSH: one connection per
cluster account (the cluster's own `user`, and one per user of the `accounts` setting)."""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queue_service.backends.base import (
    BackendError,
    DispatchRequest,
    JobStatus,
    LogChunk,
    NodeInfo,
    PartialPoll,
    RemoteState,
    SubmitResult,
)

from . import commands, parsers, script
from .ssh import Result, SSHConnection

log = logging.getLogger(__name__)

DEFAULT_WORKDIR = "~/.gpuq/jobs"
# A portable Unix user name: it is also the prefix of the external ids of its jobs, before ":".
_UNIX_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_TEAM_SLUG = re.compile(r"[-A-Za-z0-9_]{1,64}")
ACCOUNT_KEYS = ("user", "private_key", "private_key_file", "workdir", "account", "qos")


@dataclass(frozen=True)
class SlurmAccount:
    """A cluster account of the `accounts` setting: the Unix user a team's jobs run as, and
    its workdir. Its private key is not kept here (see `account_key_text`)."""

    team: str
    user: str
    workdir: str
    # Its own Slurm account and QOS (None: the cluster's `account` and `qos` settings).
    slurm_account: str | None = None
    qos: str | None = None


def _accounts(settings: Mapping[str, Any], user: str, workdir: str) -> dict[str, SlurmAccount]:
    """The `accounts` setting, validated: {team slug: {user, private_key | private_key_file,
    workdir?}}. Every error names its entry (`accounts.vision.user: ...`) and is permanent."""
    raw = settings.get("accounts")
    if raw is None or raw == {}:
        return {}

    def fail(where: str, message: str) -> BackendError:
        return BackendError(f"{where}: {message}", permanent=True)

    if not isinstance(raw, Mapping):
        raise fail("accounts", "must map team slugs to {user, private_key or private_key_file}")
    accounts: dict[str, SlurmAccount] = {}
    # Per user: what its entries give (key, workdir) and which team gave it first.
    seen: dict[str, tuple[tuple[Any, ...], str]] = {}
    for team, entry in raw.items():
        if not isinstance(team, str) or not _TEAM_SLUG.fullmatch(team):
            raise fail(f"accounts.{team!r}", "not a team slug")
        where = f"accounts.{team}"
        if not isinstance(entry, Mapping):
            raise fail(where, "must be a mapping with user and private_key or private_key_file")
        unknown = sorted(str(k) for k in entry if k not in ACCOUNT_KEYS)
        if unknown:
            raise fail(
                f"{where}.{unknown[0]}", f"unknown setting (known: {', '.join(ACCOUNT_KEYS)})"
            )
        name = entry.get("user")
        if not name:
            raise fail(f"{where}.user", "required")
        if not isinstance(name, str) or not _UNIX_USER.fullmatch(name):
            raise fail(f"{where}.user", f"{name!r} is not a Unix user name")
        if name == user:
            raise fail(
                f"{where}.user",
                f"{name} is the cluster's own user: leave the team out of accounts to use it",
            )
        for key in ("private_key", "private_key_file", "workdir"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise fail(f"{where}.{key}", "must be a string")
        if not entry.get("private_key") and not entry.get("private_key_file"):
            raise fail(where, "needs private_key or private_key_file")
        own = entry.get("workdir") or None
        if own is None and workdir.startswith("/"):
            raise fail(
                f"{where}.workdir",
                f"required: the cluster's workdir {workdir} is an absolute path, and accounts "
                "must not share a directory",
            )
        account_workdir = str(own or workdir).rstrip("/") or "/"
        if account_workdir.startswith("/") and account_workdir == workdir.rstrip("/"):
            raise fail(f"{where}.workdir", "is the cluster's own workdir: give the account its own")
        given = (entry.get("private_key"), entry.get("private_key_file"), account_workdir)
        if name in seen and seen[name][0] != given:
            raise fail(
                where,
                f"user {name} is also accounts.{seen[name][1]}'s, with another key or workdir",
            )
        for other, (other_given, other_team) in seen.items():
            if (
                other != name
                and account_workdir.startswith("/")
                and other_given[2] == (account_workdir)
            ):
                raise fail(f"{where}.workdir", f"is also accounts.{other_team}'s workdir")
        seen.setdefault(name, (given, team))
        slurm: dict[str, str | None] = {}
        for key in ("account", "qos"):
            value = entry.get(key)
            if value is not None:
                if not isinstance(value, str):
                    raise fail(f"{where}.{key}", "must be a string")
                try:
                    script.directive_value(key, value)
                except BackendError as exc:
                    raise fail(f"{where}.{key}", exc.message) from None
            slurm[key] = value
        accounts[team] = SlurmAccount(
            team=team,
            user=name,
            workdir=account_workdir,
            slurm_account=slurm["account"],
            qos=slurm["qos"],
        )
    return accounts


@dataclass(frozen=True)
class SlurmSettings:
    """ClusterConfig.settings of a Slurm cluster, validated (docs/slurm.md). The private key
    is not kept here: it goes straight into the connection's key object."""

    host: str
    user: str
    known_hosts: str = field(repr=False)
    port: int = 22
    workdir: str = DEFAULT_WORKDIR
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0
    containers: str = "pyxis"  # "pyxis", or "none": the cluster cannot run container images
    script: script.ScriptOptions = field(default_factory=script.ScriptOptions)
    # Team slug -> the account its jobs run as; teams not in it use `user` (docs/slurm.md).
    accounts: Mapping[str, SlurmAccount] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> SlurmSettings:
        missing = [k for k in ("host", "user", "known_hosts") if not settings.get(k)]
        if missing:
            raise BackendError(f"Slurm cluster settings lack {', '.join(missing)}", permanent=True)
        mounts = settings.get("container_mounts") or ()
        # Checked here, not at a job's render: a TypeError there is no BackendError.
        if not isinstance(mounts, str) and not (
            isinstance(mounts, list | tuple) and all(isinstance(m, str) for m in mounts)
        ):
            raise BackendError(
                "container_mounts must be a list of strings or one comma-separated string",
                permanent=True,
            )
        requeue = settings.get("requeue")
        requeue = False if requeue is None else requeue
        if not isinstance(requeue, bool):  # "false" would read as true
            raise BackendError(f"requeue must be true or false, not {requeue!r}", permanent=True)
        containers = str(settings.get("containers", "pyxis"))
        if containers not in ("pyxis", "none"):
            raise BackendError(
                f"containers must be pyxis or none, not {containers!r}", permanent=True
            )
        workdir = str(settings.get("workdir") or DEFAULT_WORKDIR)
        accounts = _accounts(settings, str(settings["user"]), workdir)
        try:
            return cls(
                host=str(settings["host"]),
                user=str(settings["user"]),
                known_hosts=str(settings["known_hosts"]),
                port=int(settings.get("port", 22)),
                workdir=workdir,
                connect_timeout_s=float(settings.get("connect_timeout_s", 10.0)),
                command_timeout_s=float(settings.get("command_timeout_s", 60.0)),
                containers=containers,
                script=script.ScriptOptions(
                    partition=settings.get("partition") or None,
                    account=settings.get("account") or None,
                    qos=settings.get("qos") or None,
                    requeue=requeue,
                    gres_map=dict(settings.get("gres_map") or {}),
                    container_mounts=(mounts,) if isinstance(mounts, str) else tuple(mounts),
                    checkpoint_signal_s=int(settings.get("checkpoint_signal_s", 120)),
                ),
                accounts=accounts,
            )
        except (TypeError, ValueError) as exc:
            raise BackendError(f"invalid Slurm cluster settings: {exc}", permanent=True) from None

    def __post_init__(self) -> None:
        # A timeout of 0 would time every command out and retry it for ever; nan and inf
        # cannot be given to a socket.
        for name in ("connect_timeout_s", "command_timeout_s"):
            value = getattr(self, name)
            if not 0 < value <= 3600:
                raise BackendError(
                    f"invalid Slurm cluster settings: {name} must be more than 0 and at most"
                    f" 3600 seconds, not {value!r}",
                    permanent=True,
                )
        if not 0 < self.port < 65536:
            raise BackendError(
                f"invalid Slurm cluster settings: port must be 1-65535, not {self.port}",
                permanent=True,
            )


def private_key_text(settings: Mapping[str, Any], where: str = "") -> str:
    """The key text of the cluster's settings, or of one `accounts` entry (`where` then names
    it in errors: "accounts.vision.")."""
    if settings.get("private_key"):
        return str(settings["private_key"])
    if settings.get("private_key_file"):
        try:
            return Path(str(settings["private_key_file"])).read_text()
        except OSError as exc:
            raise BackendError(
                f"{where}private_key_file: cannot read the private key file: {exc.strerror}"
                if where
                else f"cannot read the private key file: {exc.strerror}",
                permanent=True,
            ) from None
    raise BackendError(
        f"{where.rstrip('.')}: needs private_key or private_key_file"
        if where
        else "Slurm cluster settings lack private_key or private_key_file",
        permanent=True,
    )


@dataclass
class _Account:
    """A cluster account as the backend uses it: its connection and its resolved workdir."""

    user: str
    workdir_setting: str
    connection: SSHConnection
    workdir: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_ATTEMPT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[0-9]+")


def slurm_job_id(external_id: str) -> str:
    """The Slurm job id an external id names (what squeue -j and scancel take)."""
    return _without_attempt(external_id)[0].rpartition(":")[2]


def log_name(external_id: str) -> str:
    """What names the job's log files (script.log_path): its attempt; the Slurm id for jobs
    submitted before attempts named them."""
    return _without_attempt(external_id)[1] or slurm_job_id(external_id)


def _without_attempt(external_id: str) -> tuple[str, str]:
    """An external id without its `@<attempt>`, and the attempt ("" in ids from before
    attempts named log files)."""
    head, sep, attempt = external_id.rpartition("@")
    if sep and _ATTEMPT.fullmatch(attempt):
        return head, attempt
    return external_id, ""


@dataclass
class _Layer:
    """Jobs of one poll with distinct Slurm ids, and what squeue and sacct say of them."""

    attempts: dict[str, str] = field(default_factory=dict)  # {Slurm id: attempt, or ""}
    owners: dict[str, str] = field(default_factory=dict)  # {Slurm id: external id}
    found: dict[str, JobStatus] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # squeue no longer shows them
    waited: list[str] = field(default_factory=list)  # squeue reads them as ended unstarted
    # squeue shows their id in another directory: slurmctld no longer has them.
    displaced: set[str] = field(default_factory=set)

    def read(self, squeue: str, workdirs: Mapping[str, str]) -> None:
        read = parsers.parse_squeue(squeue, self.attempts)
        self.found = {i: read[i] for i in self.attempts if i in read}  # squeue has every layer's
        self.missing = [i for i in self.attempts if i not in self.found]
        self.waited = [i for i in self.found if self.found[i].started is False]
        self.displaced = {
            i
            for i, attempt in self.attempts.items()
            if attempt and i in workdirs and parsers.dir_name(workdirs[i]) != attempt
        }

    def account(self, sacct: str, workdirs: Mapping[str, str]) -> None:
        """`workdirs`: squeue's, which tells an id's records apart where no attempt does."""
        accounted = parsers.parse_sacct(
            sacct,
            {i: a or workdirs.get(i, "") for i, a in self.attempts.items()},
            displaced=self.displaced,
        )
        for i in self.missing:
            status = accounted.get(i)
            if (
                i in self.displaced
                and status is not None
                and status.state not in RemoteState.TERMINAL
            ):
                # Accounting still says it waits or runs (slurmctld's state was lost with it),
                # but the id is another job's now: no scancel may be sent by that id.
                said = status.native_state or status.state
                reason = (
                    f"Slurm no longer has this job (its id is another job's); it last said {said}"
                )
                status = dataclasses.replace(status, state=RemoteState.LOST, reason=reason)
            if status is not None:
                self.found[i] = status
        for i in self.waited:
            earlier = accounted.get(i)
            # None from an ended job: a run sacct cannot yet tell its or an older job's with
            # the same id (parse_sacct).
            if earlier is not None and (
                earlier.started
                or (earlier.started is None and earlier.state in RemoteState.TERMINAL)
            ):
                self.found[i] = dataclasses.replace(self.found[i], started=earlier.started)


class SlurmBackend:
    """Jobs of a team the `accounts` setting maps run as that account, over its own connection
    and in its own workdir; their external id is `<user>:<Slurm id>`. Other jobs run as the
    cluster's `user`, with the bare Slurm id (as before accounts existed)."""

    kind = "slurm"

    def __init__(
        self,
        name: str,
        settings: SlurmSettings,
        connection: SSHConnection,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        connect: Callable[[str], SSHConnection] | None = None,
    ) -> None:
        """`connection` is the cluster user's; `connect(user)` makes the connection of an
        account of `settings.accounts`, on the first call that needs it."""
        self.name = name
        self.settings = settings
        self.connection = connection
        self._clock = clock
        self._sleep = sleep
        self._connect = connect
        self._default = _Account(settings.user, settings.workdir, connection)
        self._accounts: dict[str, _Account] = {}
        self._accounts_lock = threading.Lock()
        # {node: {MIG profile: its GRES type there}}, from the last nodes().
        self._mig_types: dict[str, dict[str, str]] = {}
        # {node: {GPU model: its whole GPUs' GRES type there}}; an untyped model is absent.
        self._gpu_types: dict[str, dict[str, str]] = {}

    def __repr__(self) -> str:
        return f"SlurmBackend({self.name!r}, {self.connection.where})"

    def close(self) -> None:
        """Close the cluster user's connection and every account's; each reconnects on use."""
        with self._accounts_lock:
            accounts = list(self._accounts.values())
        for account in (self._default, *accounts):
            account.connection.close()

    def _run(self, command: str, stdin: bytes | None = None) -> Result:
        return self.connection.run(command, stdin=stdin)

    def _exec(self, account: _Account, command: str, stdin: bytes | None = None) -> Result:
        # The cluster user's commands go through _run (tests hook it).
        if account is self._default:
            return self._run(command, stdin=stdin)
        return account.connection.run(command, stdin=stdin)

    # -- accounts --------------------------------------------------------------------------

    def _account(self, user: str) -> _Account:
        """An account by its user; its connection is made on first use."""
        if user == self.settings.user:
            return self._default
        with self._accounts_lock:
            account = self._accounts.get(user)
            if account is None:
                entry = next((a for a in self.settings.accounts.values() if a.user == user), None)
                if entry is None:
                    raise BackendError(
                        f"the account {user} is not in this cluster's accounts setting",
                        permanent=True,
                    )
                if self._connect is None:
                    raise BackendError(
                        f"no connection can be made for the account {user}", permanent=True
                    )
                account = _Account(user, entry.workdir, self._connect(user))
                self._accounts[user] = account
            return account

    def _team_account(self, team: str) -> _Account:
        entry = self.settings.accounts.get(team)
        return self._default if entry is None else self._account(entry.user)

    def script_options(self, team: str) -> script.ScriptOptions:
        """The cluster's script settings, with the Slurm account and QOS of the team's
        account where it names its own."""
        opts = self.settings.script
        entry = self.settings.accounts.get(team)
        if entry is None:
            return opts
        return dataclasses.replace(
            opts,
            account=entry.slurm_account or opts.account,
            qos=entry.qos or opts.qos,
        )

    def account_connection(self, team: str) -> SSHConnection:
        """The connection the team's jobs go through."""
        return self._team_account(team).connection

    def _external_id(self, account: _Account, slurm_id: str, job: DispatchRequest) -> str:
        """`[<account user>:]<Slurm id>@<attempt>`: the attempt names its log files."""
        base = slurm_id if account is self._default else f"{account.user}:{slurm_id}"
        return f"{base}@{script.attempt_name(job)}"

    def _split(self, external_id: str) -> tuple[_Account, str]:
        """The account of an external id, and the Slurm job id. A bare id is the cluster
        user's (every id from before accounts existed is)."""
        user, sep, slurm_id = _without_attempt(external_id)[0].rpartition(":")
        if not sep:
            return self._default, slurm_id
        return self._account(user), slurm_id

    def workdir(self) -> str:
        """The cluster user's base directory on the login node (`~` resolved by SFTP)."""
        return self._workdir(self._default)

    def _workdir(self, account: _Account) -> str:
        """An account's base directory, `~` resolved by the SFTP server in the account's home,
        created with its logs directory and made private to the account (mode 700)."""
        with account.lock:
            if account.workdir is None:
                workdir = account.workdir_setting
                if not workdir.startswith("/"):
                    relative = workdir.removeprefix("~").lstrip("/")
                    home = account.connection.home().rstrip("/")
                    workdir = home + ("/" + relative if relative else "")
                workdir = script.directive_value("workdir", workdir.rstrip("/"))
                # Slurm does not create the directory of --output: it must exist before any job.
                account.connection.make_dir(script.logs_dir(workdir))
                # Scripts, checkpoints and logs hold the jobs' env and output: the account's own.
                if not account.connection.chmod(workdir, 0o700):
                    log.warning(
                        "%s: cannot make %s private (mode 700): not its owner",
                        account.user,
                        workdir,
                    )
                account.workdir = workdir
            return account.workdir

    # -- inventory -------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """GPUs and states (one `sinfo`), then each node's CPUs and memory (a second, small
        `sinfo`: the first's format is fixed by its captured output)."""
        partition = self.settings.script.partition
        results = []
        for command in (commands.sinfo(partition), parsers.sinfo_resources(partition)):
            result = self._run(command)
            if result.rc != 0:
                raise parsers.command_error(
                    "sinfo", result.stderr, result.rc, rejection_is_permanent=False
                )
            results.append(result.stdout)
        gres_map = self.settings.script.gres_map
        self._mig_types = parsers.mig_gres_types(results[0], gres_map)
        self._gpu_types = parsers.gpu_gres_types(results[0], gres_map)
        return parsers.parse_sinfo(results[0], gres_map, parsers.parse_sinfo_resources(results[1]))

    def _job_script_options(self, job: DispatchRequest) -> script.ScriptOptions:
        """The team's script options; for a MIG slice, with its profile mapped to the GRES
        type of that profile on the node it is placed on; for whole GPUs, with the model
        mapped to the placed nodes' type of it, or untyped where they have none (the
        inventory's, read again when this process has not read that node yet)."""
        opts = self.script_options(job.team)
        if not job.placement:
            return opts
        if not job.mig_profile:
            return self._gpu_script_options(job, opts)
        node = job.placement[0].node
        if job.mig_profile not in self._mig_types.get(node, {}):
            self.nodes()
        gres_type = self._mig_types.get(node, {}).get(job.mig_profile)
        if gres_type is None:
            return opts
        return dataclasses.replace(opts, gres_map={**opts.gres_map, job.mig_profile: gres_type})

    def _gpu_script_options(
        self, job: DispatchRequest, opts: script.ScriptOptions
    ) -> script.ScriptOptions:
        if job.gpus_per_node <= 0 or not job.gpu_model:
            return opts
        nodes = [a.node for a in job.placement]
        if any(node not in self._gpu_types for node in nodes):
            self.nodes()
        types = {self._gpu_types[n].get(job.gpu_model) for n in nodes if n in self._gpu_types}
        if not types:
            return opts
        gres_type = types.pop() if len(types) == 1 else None
        if gres_type is None:
            # `gpu:N` matches typed GPUs too: the one request every placed node can meet.
            return dataclasses.replace(opts, untyped_gpus=True)
        return dataclasses.replace(opts, gres_map={**opts.gres_map, job.gpu_model: gres_type})

    # -- submit ----------------------------------------------------------------------------

    def submit(self, job: DispatchRequest) -> SubmitResult:
        """Create the attempt's directory, then sbatch with the script on stdin, as the
        account of the job's team. The mkdir is the guard: a repeat finds the directory and
        looks the job up instead of resubmitting."""
        if job.image and self.settings.containers == "none":
            raise BackendError(
                "this Slurm cluster runs no containers (no Pyxis): submit without `image`, "
                "or to a cluster that has them",
                permanent=True,
            )
        account = self._team_account(job.team)
        workdir = self._workdir(account)
        job_dir = script.job_dir(workdir, job)
        text = script.render(job, self._job_script_options(job), workdir).encode()
        if not account.connection.make_dir(job_dir):
            # An earlier submit of this attempt got at least as far as creating its directory.
            return self._adopt_or_resubmit(account, job, job_dir, text)
        slurm_id = self._submitted(self._exec(account, commands.SUBMIT, stdin=text))
        return SubmitResult(self._external_id(account, slurm_id, job))

    @staticmethod
    def _submitted(result: Result) -> str:
        if result.rc != 0:
            raise parsers.command_error(
                "sbatch", result.stderr, result.rc, rejection_is_permanent=True
            )
        return parsers.parse_sbatch(result.stdout)

    def _adopt_or_resubmit(
        self, account: _Account, job: DispatchRequest, job_dir: str, text: bytes
    ) -> SubmitResult:
        """The job, if Slurm has it: the account's own, with the same unique name and this
        attempt's directory as WorkDir (squeue while Slurm remembers it, then accounting).
        Otherwise sbatch now."""
        name = script.job_name(job.job_id)
        for what, command in (
            ("squeue", commands.lookup_squeue(name, account.user)),
            ("sacct", commands.lookup_sacct(name, account.user)),
        ):
            result = self._exec(account, command)
            if result.rc != 0:
                raise parsers.command_error(
                    what, result.stderr, result.rc, rejection_is_permanent=False
                )
            found = parsers.parse_lookup(result.stdout).get(job_dir)
            if found is not None:
                return SubmitResult(self._external_id(account, found, job), adopted=True)
        slurm_id = self._submitted(self._exec(account, commands.SUBMIT, stdin=text))
        return SubmitResult(self._external_id(account, slurm_id, job))

    # -- follow ----------------------------------------------------------------------------

    def poll(self, external_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Per account: one squeue for all its ids; one sacct for those squeue no longer shows
        (finished more than MinJobAge ago). Each account asks about its own jobs only. An id
        whose account is no longer in the settings is LOST: gpuq cannot reach it.

        Accounts are apart: one whose poll fails (it cannot log in, say) leaves its jobs out
        and the others' are read; that is a PartialPoll, which names the accounts that failed
        and carries the statuses read (permanent only when every failure is)."""
        ids = list(dict.fromkeys(external_ids))
        statuses: dict[str, JobStatus] = {}
        groups: dict[str, tuple[_Account, list[tuple[str, str, str]]]] = {}
        for external_id in ids:
            try:
                account, slurm_id = self._split(external_id)
            except BackendError as exc:
                statuses[external_id] = JobStatus(external_id, RemoteState.LOST, reason=exc.message)
                continue
            attempt = _without_attempt(external_id)[1]
            groups.setdefault(account.user, (account, []))[1].append(
                (external_id, slurm_id, attempt)
            )
        failures: list[tuple[str, BackendError]] = []
        for account, jobs in groups.values():
            try:
                statuses.update(self._poll_account(account, jobs))
            except BackendError as exc:
                failures.append((account.user, exc))
        if failures:
            if len(failures) == len(groups) and not statuses:
                raise failures[0][1]  # nothing was read: the error as it is
            raise PartialPoll(
                "; ".join(
                    f"jobs of the account {user} not read: {exc.message}" for user, exc in failures
                ),
                {i: statuses[i] for i in ids if i in statuses},
                permanent=all(exc.permanent for _, exc in failures),
            )
        return {i: statuses[i] for i in ids}

    def _poll_account(
        self, account: _Account, jobs: list[tuple[str, str, str]]
    ) -> dict[str, JobStatus]:
        """`jobs`: (external id, Slurm id, attempt) triples. squeue failing means the
        controller is unreachable: transient, never a reason to call jobs lost. One sacct (all
        records of each job) for the ids squeue no longer shows, and for those whose end
        squeue reads as never started (cancelled while they waited): a job Slurm requeued and
        that was cancelled while it waited to run again ended the same way, and only
        accounting keeps its earlier run. slurmdbd failing leaves the latter unknown (the
        service charges them: a run missed is lost for good) rather than failing the poll.

        An id may be another job's by now (it wrapped at MaxJobId, or slurmctld's state was
        wiped): squeue's row and sacct's records count only when in the attempt's directory
        (parse_squeue, parse_sacct). Ids submitted before attempts named directories are
        told apart by the WorkDir squeue gives, asked only for jobs read as ended unstarted.
        Two jobs gpuq follows may share an id: each layer holds an id once."""
        layers: list[_Layer] = []
        for external_id, slurm_id, attempt in jobs:
            layer = next((layer for layer in layers if slurm_id not in layer.attempts), None)
            if layer is None:
                layer = _Layer()
                layers.append(layer)
            layer.attempts[slurm_id] = attempt
            layer.owners[slurm_id] = external_id
        ids = list(dict.fromkeys(slurm_id for _, slurm_id, _ in jobs))
        queued = ""
        for chunk in commands.id_chunks(ids):
            result = self._exec(account, commands.squeue(chunk))
            if result.rc != 0 and not parsers.only_unknown_ids(result.stderr):
                raise parsers.command_error(
                    "squeue", result.stderr, result.rc, rejection_is_permanent=False
                )
            queued += result.stdout + "\n" if result.rc == 0 else ""
        workdirs = parsers.squeue_workdirs(queued)
        for layer in layers:
            layer.read(queued, workdirs)
        asked = list(dict.fromkeys(i for layer in layers for i in (*layer.missing, *layer.waited)))
        if asked:
            results = [self._exec(account, commands.sacct(c)) for c in commands.id_chunks(asked)]
            result = next((r for r in results if r.rc != 0), results[0])
            if result.rc == 0:
                accounted = "\n".join(r.stdout for r in results)
                for layer in layers:
                    layer.account(accounted, workdirs)
            elif any(layer.missing for layer in layers):
                raise parsers.command_error(
                    "sacct", result.stderr, result.rc, rejection_is_permanent=False
                )
            else:
                log.warning(
                    "%s: sacct failed; whether jobs %s ran before a requeue is unknown: %s",
                    account.user,
                    ",".join(asked),
                    " ".join(result.stderr.split())[:500],
                )
                for layer in layers:
                    for i in layer.waited:
                        layer.found[i] = dataclasses.replace(layer.found[i], started=None)
        return {
            external_id: dataclasses.replace(
                layer.found.get(slurm_id)
                or JobStatus(slurm_id, RemoteState.LOST, reason="Slurm no longer knows this job"),
                external_id=external_id,
            )
            for layer in layers
            for slurm_id, external_id in layer.owners.items()
        }

    # -- cancel ----------------------------------------------------------------------------

    def cancel(self, external_id: str, grace_s: float = 30.0) -> bool:
        """A running job gets TERM first so it can save state; Slurm's own cancel (TERM, KILL
        after KillWait, state CANCELLED) follows if it still runs after the grace. A pending
        job is cancelled at once: scancel --signal would retry on it for ~95 s. False when
        the job had already ended before any signal (or before the TERM could reach it).
        The scancels run as the job's own account."""
        account, slurm_id = self._split(external_id)
        status = self.poll([external_id])[external_id]
        if status.state in RemoteState.TERMINAL:
            return False
        termed = grace_s > 0 and status.state == RemoteState.RUNNING
        if termed:
            if self._scancel(account, commands.terminate(slurm_id), external_id):
                return False  # it ended between the poll and the TERM
            deadline = self._clock() + grace_s
            while (remaining := deadline - self._clock()) > 0:
                self._sleep(min(1.0, remaining))
                if self.poll([external_id])[external_id].state in RemoteState.TERMINAL:
                    return True  # it ended after our TERM
        ended_first = self._scancel(account, commands.cancel(slurm_id), external_id)
        return termed or not ended_first

    def _scancel(self, account: _Account, command: str, external_id: str) -> bool:
        """Run a scancel; True when it failed because the job had ended meanwhile (Slurm
        answers "Invalid job id specified" for a job that just finished). Any other failure
        is a transient error."""
        result = self._exec(account, command)
        if result.rc == 0:
            return False
        if self.poll([external_id])[external_id].state in RemoteState.TERMINAL:
            return True
        raise parsers.command_error(
            "scancel", result.stderr, result.rc, rejection_is_permanent=False
        )

    # -- logs ------------------------------------------------------------------------------

    def logs(
        self, external_id: str, offset: int = 0, limit: int = 65536, stream: str = "stdout"
    ) -> LogChunk:
        """Bytes [offset, offset+limit) of the job's output file, read by SFTP as the job's
        account. At the end of what is written, eof says whether the job has ended (so
        nothing more will come)."""
        account, slurm_id = self._split(external_id)
        commands.job_ids([slurm_id])  # an id that is none is refused before any path is made
        path = script.log_path(self._workdir(account), log_name(external_id), stream)
        data = account.connection.read_file(path, offset, limit) or b""
        if len(data) == limit:
            return LogChunk(data, offset + len(data))
        if self.poll([external_id])[external_id].state not in RemoteState.TERMINAL:
            return LogChunk(data, offset + len(data))
        # The job ended after the first read: what it wrote meanwhile is the true tail.
        data += account.connection.read_file(path, offset + len(data), limit - len(data)) or b""
        return LogChunk(data, offset + len(data), eof=len(data) < limit)

    def log_size(self, external_id: str, stream: str = "stdout") -> int | None:
        """The output file's size, by one SFTP stat as the job's account."""
        account, slurm_id = self._split(external_id)
        commands.job_ids([slurm_id])
        path = script.log_path(self._workdir(account), log_name(external_id), stream)
        return account.connection.file_size(path)
