"""MIG slices: profile tables, layout validation, the per-cycle allocator and the repartitioner.

Pure standard library. A GPU instance occupies `size` memory slices from `start` (NVML
placement units); two instances on one GPU may not overlap and their compute slices may not
exceed the GPU's. Layouts change only on an idle GPU (no instance in use).

A scheduling cycle: `index = MigIndex(snapshot.nodes)`; `relayouts = index.plan(requests)`
for the MIG jobs allowed to start, in scheduling order; then per job, `index.relayout_for(id)`
(wait for it: its instances exist only once inventory reports them) or
`index.take(..., include_relaid=False)`. Calling take() first and plan() with its failures
also works, but serves fewer: about 96% of an exhaustive optimum against 100% on the
streams of bench/mig_quality.py (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import re
from bisect import insort
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from scheduler.mig_profiles import MODELS, ModelData
from scheduler.types import ANY_MODEL, MigInstance, MigModelTable, MigRelayout, MigSlot, Node

_PROFILE_RE = re.compile(r"([0-9]+)g\.([0-9]+)gb(\+me)?")
# Drivers report memory sizes that differ slightly from the marketing size (7g.79gb vs
# 7g.80gb); within this relative distance two names of the same compute size are one profile.
_MEMORY_TOLERANCE = 0.05


@dataclass(frozen=True)
class ProfileName:
    compute: int
    memory_gb: int
    media_extensions: bool = False

    def __str__(self) -> str:
        return f"{self.compute}g.{self.memory_gb}gb" + ("+me" if self.media_extensions else "")


def parse_profile(name: str) -> ProfileName:
    """Parse `<g>g.<mem>gb[+me]` (case-insensitive, surrounding blanks ignored)."""
    match = _PROFILE_RE.fullmatch(name.strip().lower())
    if match is None:
        raise ValueError(
            f"invalid MIG profile {name!r}: expected <compute>g.<memory>gb[+me], e.g. 1g.10gb"
        )
    compute, memory = int(match.group(1)), int(match.group(2))
    if compute < 1 or memory < 1:
        raise ValueError(f"invalid MIG profile {name!r}: compute and memory must be positive")
    return ProfileName(compute, memory, match.group(3) is not None)


@dataclass(frozen=True)
class ProfileSpec:
    name: str
    compute_slices: int
    memory_slices: int
    max_instances: int
    starts: tuple[int, ...]
    size: int
    media_extensions: bool = False

    @property
    def parsed(self) -> ProfileName:
        return parse_profile(self.name)

    def __hash__(self) -> int:  # the generated one hashes every field, on every cache lookup
        return hash((self.name, self.compute_slices, self.memory_slices))


@dataclass(frozen=True)
class ModelTable:
    model: str
    compute_slices: int
    memory_slices: int
    profiles: tuple[ProfileSpec, ...]
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for spec in self.profiles:
            parse_profile(spec.name)
            if not 0 < spec.compute_slices <= self.compute_slices:
                raise ValueError(f"{self.model}: {spec.name} has {spec.compute_slices} compute")
            if not spec.starts or any(
                s < 0 or s + spec.size > self.memory_slices for s in spec.starts
            ):
                raise ValueError(f"{self.model}: {spec.name} has placements outside the GPU")

    def __hash__(self) -> int:  # the generated one hashes every profile, on every cache lookup
        return hash((self.model, self.compute_slices, self.memory_slices, len(self.profiles)))

    def profile(self, name: str) -> ProfileSpec | None:
        """The spec for a profile name: exact name first, else the unique spec with the same
        compute and media extensions whose memory is within a few percent (`7g.79gb` finds
        `7g.80gb`). None when the name is unparsable or matches nothing (or two specs)."""
        for spec in self.profiles:
            if spec.name == name:
                return spec
        try:
            wanted = parse_profile(name)
        except ValueError:
            return None
        close = [
            spec
            for spec in self.profiles
            if (p := spec.parsed).compute == wanted.compute
            and p.media_extensions == wanted.media_extensions
            and abs(p.memory_gb - wanted.memory_gb) <= _MEMORY_TOLERANCE * p.memory_gb
        ]
        return close[0] if len(close) == 1 else None


def table_from_data(model: str, data: ModelData) -> ModelTable:
    """A ModelTable from rows in the scheduler.mig_profiles format (also for per-cluster data)."""
    return ModelTable(
        model=model,
        compute_slices=data["compute_slices"],
        memory_slices=data["memory_slices"],
        profiles=tuple(
            ProfileSpec(name, compute, memory, max_n, starts, size, name.endswith("+me"))
            for name, compute, memory, max_n, starts, size in data["profiles"]
        ),
        aliases=data["aliases"],
    )


_BUILTIN: tuple[ModelTable, ...] = tuple(table_from_data(m, d) for m, d in MODELS.items())


def overrides_from(tables: Iterable[MigModelTable]) -> dict[str, ModelTable]:
    """The `overrides` mapping for a snapshot's site-supplied tables."""
    return {
        t.model: table_from_data(
            t.model,
            {
                "compute_slices": t.compute_slices,
                "memory_slices": t.memory_slices,
                "profiles": t.profiles,
                "aliases": t.aliases,
                "confidence": "site",
            },
        )
        for t in tables
    }


_FAMILY_RE = re.compile(r"[A-Z]+[0-9]+[A-Z]?")
_MEMORY_RE = re.compile(r"(?<![A-Z0-9])([0-9]+)\s*G(?:I?B)?(?![A-Z0-9])")


def _spelling(model: str) -> str:
    """Upper case, no vendor prefix, no GFD single-strategy suffix (`-MIG-1g.5gb`), no blanks."""
    text = model.upper().strip()
    text = re.sub(r"^NVIDIA[\s_-]*", "", text)
    text = re.sub(r"[\s_-]*MIG[\s_-].*$", "", text)
    return re.sub(r"[^A-Z0-9]", "", text)


def _family_and_memory(model: str) -> tuple[str | None, int | None]:
    text = re.sub(r"^NVIDIA[\s_-]*", "", model.upper().strip())
    family = _FAMILY_RE.match(text)
    memory = _MEMORY_RE.search(text)
    return (
        family.group(0) if family else None,
        int(memory.group(1)) if memory else None,
    )


@lru_cache(maxsize=256)
def _builtin(model: str) -> ModelTable | None:
    wanted = _spelling(model)
    for table in _BUILTIN:
        if wanted in {_spelling(n) for n in (table.model, *table.aliases)}:
            return table
    # Unlisted spellings ("A100 80GB PCIe", "H200-140GB"): same family, memory within a few %.
    family, memory = _family_and_memory(model)
    if family is None:
        return None
    candidates = []
    for table in _BUILTIN:
        names = (table.model, *table.aliases)
        if family not in {_family_and_memory(n)[0] for n in names}:
            continue
        table_memory = _family_and_memory(table.model)[1]
        if memory is None or (
            table_memory is not None
            and abs(table_memory - memory) <= _MEMORY_TOLERANCE * table_memory
        ):
            candidates.append(table)
    return candidates[0] if len(candidates) == 1 else None


def geometry(
    gpu_model: str, overrides: Mapping[str, ModelTable] | None = None
) -> ModelTable | None:
    """The profile table for a GPU model (aliases and spelling variants resolved), a cluster's
    override first. None for a model without MIG or one this module cannot identify."""
    if overrides:
        if gpu_model in overrides:
            return overrides[gpu_model]
        wanted = _spelling(gpu_model)
        for key, table in overrides.items():
            if wanted in {_spelling(n) for n in (key, table.model, *table.aliases)}:
                return table
    return _builtin(gpu_model)


# The seven-slice geometry (A100/H100/H200/B200) is the default divisor for a model without a
# table, so a slice is still charged to quota rather than counted as free.
_DEFAULT_COMPUTE_SLICES = 7


def gpu_fraction(
    gpu_model: str, profile: str, overrides: Mapping[str, ModelTable] | None = None
) -> float:
    """The share of a GPU a slice counts as for quota: compute slices / the GPU's (7; 4 on A30)."""
    table = geometry(gpu_model, overrides)
    if table is not None and (spec := table.profile(profile)) is not None:
        return spec.compute_slices / table.compute_slices
    compute = parse_profile(profile).compute
    total = table.compute_slices if table is not None else _DEFAULT_COMPUTE_SLICES
    return min(compute, total) / total


def validate_layout(
    gpu_model: str,
    instances: Sequence[MigInstance],
    overrides: Mapping[str, ModelTable] | None = None,
) -> list[str]:
    """Everything wrong with a GPU's instances; empty when the layout is valid."""
    table = geometry(gpu_model, overrides)
    if table is None:
        return [f"{gpu_model}: no MIG profile table for this GPU model"]
    problems: list[str] = []
    specs: list[ProfileSpec] = []
    for inst in instances:
        spec = table.profile(inst.profile)
        if spec is None:
            problems.append(f"{inst.profile}: not a MIG profile of {table.model}")
            continue
        specs.append(spec)
        if inst.size != spec.size:
            problems.append(f"{inst.profile}@{inst.start}: size {inst.size}, must be {spec.size}")
        if inst.start not in spec.starts:
            problems.append(
                f"{inst.profile}@{inst.start}: invalid start, valid starts are "
                + ",".join(map(str, spec.starts))
            )
    for i, a in enumerate(instances):
        for b in instances[i + 1 :]:
            shared = set(range(a.start, a.start + a.size)) & set(range(b.start, b.start + b.size))
            if shared:
                problems.append(
                    f"{a.profile}@{a.start} overlaps {b.profile}@{b.start} "
                    f"on memory slice(s) {','.join(map(str, sorted(shared)))}"
                )
    compute = sum(s.compute_slices for s in specs)
    if compute > table.compute_slices:
        problems.append(f"{compute} compute slices used, {table.model} has {table.compute_slices}")
    for spec, count in Counter(specs).items():
        if count > spec.max_instances:
            problems.append(f"{count} x {spec.name}, at most {spec.max_instances} per GPU")
    media = sum(1 for s in specs if s.media_extensions)
    if media > 1:
        problems.append(f"{media} +me instances, at most one per GPU")
    return problems


def _size_key(spec: ProfileSpec) -> tuple[int, int, str]:
    return (spec.compute_slices, spec.memory_slices, spec.name)


@lru_cache(maxsize=65536)
def _placements(
    table: ModelTable, specs: tuple[ProfileSpec, ...]
) -> tuple[tuple[ProfileSpec, int], ...] | None:
    """Explicit starts for a multiset of profiles (sorted largest first), or None when it
    cannot be realised. Largest first and highest start first: a 3g goes to start 4, which
    leaves four 1g placements instead of three, and slice 7 is only reachable from the top."""
    counts = Counter(specs)
    if (
        sum(s.compute_slices for s in specs) > table.compute_slices
        or sum(s.memory_slices for s in specs) > table.memory_slices
        or any(n > s.max_instances for s, n in counts.items())
        or sum(n for s, n in counts.items() if s.media_extensions) > 1
    ):
        return None
    chosen: list[tuple[ProfileSpec, int]] = []

    def search(i: int, used: int) -> bool:
        if i == len(specs):
            return True
        spec = specs[i]
        # Identical profiles take descending starts, so each set is tried once.
        ceiling = chosen[-1][1] if chosen and chosen[-1][0] == spec else table.memory_slices
        for start in sorted(spec.starts, reverse=True):
            mask = ((1 << spec.size) - 1) << start
            if start < ceiling and not used & mask:
                chosen.append((spec, start))
                if search(i + 1, used | mask):
                    return True
                chosen.pop()
        return False

    return tuple(chosen) if search(0, 0) else None


@lru_cache(maxsize=65536)
def _stranded(table: ModelTable, specs: tuple[ProfileSpec, ...]) -> int:
    """Compute slices this set leaves free that no further instance could ever use."""
    if any(_placements(table, _largest_first((*specs, s))) for s in table.profiles):
        return 0
    return table.compute_slices - sum(s.compute_slices for s in specs)


def _largest_first(specs: Iterable[ProfileSpec]) -> tuple[ProfileSpec, ...]:
    return tuple(sorted(specs, key=_size_key, reverse=True))


def place(table: ModelTable, profiles: Sequence[str]) -> tuple[MigInstance, ...] | None:
    """A valid layout holding exactly these profiles, largest first with explicit starts;
    None if the multiset cannot be realised on this GPU model (or names an unknown profile)."""
    specs = [table.profile(p) for p in profiles]
    if any(s is None for s in specs):
        return None
    placed = _placements(table, _largest_first(s for s in specs if s is not None))
    if placed is None:
        return None
    return tuple(MigInstance(spec.name, start, spec.size) for spec, start in placed)


class Shortage(NamedTuple):
    """Where the instances a slice request may use are when it found none (MigIndex.shortage),
    for its reason."""

    free: int  # free and no other job's (take() found none: 0)
    running: int  # held by running jobs
    taken: int  # taken this cycle by jobs ahead, or planned for other jobs
    # Instances a preemption frees for a job: (job, how many, still held by the victim).
    freed: tuple[tuple[str, int, bool], ...] = ()
    # GPUs being emptied (or emptied) for jobs that preempted: (node, GPU, jobs; () when
    # not named yet).
    held: tuple[tuple[str, int, tuple[str, ...]], ...] = ()
    relaid: tuple[tuple[str, int], ...] = ()  # idle GPUs re-laid out this cycle for others


@dataclass(frozen=True)
class MigRequest:
    """A pending job's need for one slice. Requests reach plan() in scheduling order;
    priority (higher first, e.g. PriorityClass.value) separates classes whose order matters
    more than the number served."""

    job_id: str
    profile: str
    gpu_model: str | None = None
    pool: str | None = None
    priority: int = 0
    kind: str = ""  # "agent", "training": only used to word the relayout message
    cluster: str | None = None  # when set, only GPUs of nodes in that cluster qualify


class Named(NamedTuple):
    """A slice job that preempted on these nodes in an earlier cycle
    (PendingJob.preempting_on), for MigIndex.reserve_on."""

    job_id: str
    profile: str
    nodes: tuple[str, ...]
    gpu_model: str | None = None
    pool: str | None = None
    cluster: str | None = None


# What a request selects instances by: (profile, GPU model, pool, cluster).
Signature = tuple[str, str | None, str | None, str | None]
# Interchangeable instances: (GPU model, (pool, cluster), the profile's spec or name).
InstanceKind = tuple[str, tuple[str | None, str | None], ProfileSpec | str]


@dataclass(eq=False)
class _Instance:
    profile: str
    start: int
    size: int
    spec: ProfileSpec | None
    job_id: str | None = None

    @property
    def keys(self) -> tuple[object, ...]:
        """What a request can name this instance by: its exact profile, or its spec."""
        return (self.profile,) if self.spec is None else (self.profile, self.spec)


class _Gpu:
    """One MIG GPU of the index. Counters follow every change so that choices cost O(1)."""

    def __init__(
        self,
        node: str,
        index: int,
        model: str,
        pool: str | None,
        table: ModelTable | None,
        cluster: str | None = None,
        fixed: bool = False,
    ) -> None:
        self.node, self.index, self.model, self.pool, self.table = node, index, model, pool, table
        self.cluster = cluster
        self.fixed = fixed  # Node.mig_fixed: its instances are used, its layout never changed
        self.place = (pool, cluster)  # what requests select GPUs by, besides the model
        self.order = (node, index)
        self.instances: list[_Instance] = []
        self.held = 0
        self.held_compute = 0
        self.layout: Counter[ProfileSpec] = Counter()
        self.signature: tuple[str, ...] = ()

    def set_instances(self, instances: list[_Instance]) -> None:
        self.instances = instances
        held = [i for i in instances if i.job_id is not None]
        self.held = len(held)
        self.held_compute = sum(i.spec.compute_slices for i in held if i.spec)
        self.layout = Counter(i.spec for i in instances if i.spec is not None)
        self.signature = tuple(sorted(i.profile for i in instances))

    @property
    def idle(self) -> bool:
        return self.held == 0

    def free_compute(self) -> int:
        """Compute slices of free instances plus slices no instance holds."""
        return (self.table.compute_slices if self.table else 0) - self.held_compute

    def accepts(self, gpu_model: str | None, pool: str | None, cluster: str | None = None) -> bool:
        return (
            _model_matches(gpu_model, self.model)
            and pool in (None, self.pool)
            and cluster in (None, self.cluster)
        )

    def holds(self, specs: Iterable[ProfileSpec]) -> bool:
        """True when the current instances already include this multiset."""
        return not Counter(specs) - self.layout


@lru_cache(maxsize=4096)
def _model_matches(wanted: str | None, model: str) -> bool:
    return wanted in (None, ANY_MODEL, model) or _spelling(wanted or "") == _spelling(model)


def _names(gpu: _Gpu, inst: _Instance, profile: str) -> bool:
    """True when a request for `profile` may use this instance of this GPU."""
    if inst.profile == profile:
        return True
    spec = _spec(gpu.table, profile)
    return spec is not None and inst.spec == spec


@lru_cache(maxsize=4096)
def _spec(table: ModelTable | None, profile: str) -> ProfileSpec | None:
    return table.profile(profile) if table else None


class MigIndex:
    """The MIG instances of a cluster, built once per scheduling cycle and changed by take,
    release and plan. Nodes that are not "up" and GPUs marked unusable are left out."""

    def __init__(
        self, nodes: Sequence[Node], overrides: Mapping[str, ModelTable] | None = None
    ) -> None:
        self._gpus: list[_Gpu] = []
        self._by_key: dict[tuple[str, int], _Gpu] = {}
        self._tables: dict[ModelTable | None, None] = {}
        # A GPU and instance of each kind kind_at() has named, for serves().
        self._kinds: dict[InstanceKind, tuple[_Gpu, _Instance]] = {}
        # Profile name or spec -> GPUs with a free instance of it (dicts as ordered sets).
        self._free_gpus: dict[object, dict[_Gpu, None]] = {}
        self._planned_for: dict[str, tuple[str, int]] = {}
        self._relaid: dict[tuple[str, int], MigRelayout] = {}
        # Free instances plan() meant for a job: (node, GPU, start) -> job id.
        self._claims: dict[tuple[str, int, int], str] = {}
        # Instances take() handed out: who holds what this cycle (shortage).
        self._taken: list[tuple[_Gpu, _Instance]] = []
        # GPUs being emptied for a relayout, by (node, GPU): the jobs they are held for, with
        # their profiles (None: all their holders are leaving, for a job not named yet).
        # take() and plan() give their free instances to no other job: otherwise they never
        # go idle, or go to a job that did not preempt for them.
        self._reserved: dict[tuple[str, int], dict[str, str] | None] = {}
        # Single instances a preemption frees (its victim leaving, or gone) for the job that
        # preempted, by (node, GPU, start): take(), plan() and other preemptors leave them
        # alone, else that job preempts again for the slice it already paid for.
        self._freed_for: dict[tuple[str, int, int], str] = {}
        self._leaving: frozenset[str] = frozenset()  # running jobs in their grace period
        # In name order: decisions must not depend on the order of the snapshot's nodes.
        for node in sorted(nodes, key=lambda n: n.name):
            if node.state != "up" or not (node.mig or node.mig_gpus):
                continue
            table = geometry(node.gpu_model, overrides)
            self._tables[table] = None
            reported = {g.index: g for g in node.mig_gpus}
            for index in sorted(set(range(node.gpus)) | reported.keys()):
                state = reported.get(index)
                if state is not None and not state.usable:
                    continue
                gpu = _Gpu(
                    node.name, index, node.gpu_model, node.pool, table, node.cluster, node.mig_fixed
                )
                self._set_instances(
                    gpu,
                    [
                        _Instance(i.profile, i.start, i.size, _spec(table, i.profile), i.job_id)
                        for i in (state.mig_instances if state else ())
                    ],
                )
                self._gpus.append(gpu)
                self._by_key[gpu.order] = gpu

    def mark_leaving(self, leaving: Collection[str]) -> None:
        """Reserve the GPUs all of whose holders are leaving (preempted): they are being
        emptied for a job that preempted them, which claims them again (reserve) when its
        turn comes. Until they are idle no other job takes their free instances."""
        self._leaving = frozenset(leaving)
        if not leaving:
            return
        for gpu in self._gpus:
            holders = [i.job_id for i in gpu.instances if i.job_id is not None]
            if holders and all(h in leaving for h in holders):
                self._reserved.setdefault(gpu.order, None)

    def reserve(self, node: str, gpu: int, job_id: str, profile: str = "") -> None:
        """Hold a GPU whose holders are leaving for job_id (and the jobs it is already held
        for, when it has room for them all): no other job takes from it."""
        if (node, gpu) in self._by_key:
            held = self._reserved.get((node, gpu)) or {}
            self._reserved[(node, gpu)] = {**held, job_id: profile}

    def reserve_on(self, named: Sequence[Named]) -> None:
        """Hold for each job what the last cycle's preemption freed for it on its nodes
        (PendingJob.preempting_on): an instance it may use on a GPU others keep using, free
        or held by a job that is leaving (it preempted that holder: hold_freed); else an idle
        GPU already laid out with a free instance of its profile (re-laid out for it), else
        a GPU still being emptied, else an idle one (its victims have left), else one held
        for other jobs with room for it too. Each step for every job before the next: the
        node's name does not say which preemption was whose, and a job taking the GPU
        emptied or re-laid out for another there would leave that job nothing, and it would
        preempt again."""
        reserved = self._reserved
        left = []
        for job in named:
            gpus = [
                g
                for g in self._gpus
                if g.node in job.nodes
                and g.accepts(job.gpu_model, job.pool, job.cluster)
                and _spec(g.table, job.profile) is not None
            ]
            if not self._claim_freed(job.job_id, job.profile, gpus):
                left.append((job, gpus))
        fits: tuple[Callable[[_Gpu, Named], bool], ...] = (
            lambda g, j: (
                g.idle
                and not g.fixed
                and g.order not in reserved
                and any(_names(g, i, j.profile) for i in g.instances)
            ),
            lambda g, j: g.order in reserved and reserved[g.order] is None,
            lambda g, j: g.idle and not g.fixed and g.order not in reserved,
            lambda g, j: self._room_with(g, j.job_id, j.profile),
        )
        for rule in fits:
            rest = []
            for job, gpus in left:
                gpu = next((g for g in gpus if rule(g, job)), None)
                if gpu is None:
                    rest.append((job, gpus))
                else:
                    self.reserve(*gpu.order, job.job_id, job.profile)
            left = rest

    def _claim_freed(self, job_id: str, profile: str, gpus: Sequence[_Gpu]) -> bool:
        """reserve_on's first step: an instance of the profile on a GPU others keep using,
        free (it can start now) before one whose holder is leaving."""
        reserved, freed = self._reserved, self._freed_for
        for leaving in (False, True):
            for gpu in gpus:
                # An idle GPU that can be re-laid out is plan()'s (reserve_on's later steps).
                if gpu.order in reserved or (gpu.idle and not gpu.fixed):
                    continue
                for inst in gpu.instances:
                    key = (gpu.node, gpu.index, inst.start)
                    if (
                        key not in freed
                        and (inst.job_id in self._leaving if leaving else inst.job_id is None)
                        and _names(gpu, inst, profile)
                    ):
                        freed[key] = job_id
                        return True
        return False

    def hold_freed(self, node: str, gpu: int, victim: str, job_id: str) -> None:
        """Hold for job_id the instance `victim` (preempted for it) leaves on this GPU."""
        found = self._by_key.get((node, gpu))
        for inst in found.instances if found else ():
            if inst.job_id == victim:
                self._freed_for[(node, gpu, inst.start)] = job_id

    def room_for(
        self,
        profile: str,
        gpu_model: str | None,
        pool: str | None,
        cluster: str | None,
        job_id: str,
        *,
        relayout: bool = True,
    ) -> tuple[str, int, int | None] | None:
        """Where job_id could have an instance of `profile` without stopping a job, once
        its quota lets it start: one already its own (freed, held or planned for it), a
        free one take() could give it, or (with `relayout`) an idle GPU to lay out for it.
        (node, GPU, the instance's start; None for the GPU as a whole.) Changes nothing."""
        for (node, index, start), holder in self._freed_for.items():
            gpu = self._by_key.get((node, index))
            if holder == job_id and gpu is not None and gpu.accepts(gpu_model, pool, cluster):
                return node, index, start
        for order, held in self._reserved.items():
            if held and job_id in held and self._by_key[order].accepts(gpu_model, pool, cluster):
                return order[0], order[1], None
        planned = self._planned_for.get(job_id)
        if planned in self._relaid and self._by_key[planned].accepts(gpu_model, pool, cluster):
            return planned[0], planned[1], None  # (an instance planned for it is free: below)
        best = self._best_free(profile, gpu_model, pool, None, cluster, job_id, False)
        if best is not None:
            return best[0].node, best[0].index, best[1].start
        if relayout:
            planned_gpus = set(self._planned_for.values())
            for gpu in self._gpus:
                if (
                    gpu.idle
                    and not gpu.fixed
                    and gpu.order not in self._relaid
                    and gpu.order not in planned_gpus
                    and gpu.order not in self._reserved
                    and gpu.accepts(gpu_model, pool, cluster)
                    and _spec(gpu.table, profile) is not None
                ):
                    return gpu.node, gpu.index, None
        return None

    def hold_room(
        self, node: str, gpu: int, start: int | None, job_id: str, profile: str = ""
    ) -> None:
        """Hold what room_for found for job_id: that instance, or the GPU as a whole."""
        if start is None:
            self.reserve(node, gpu, job_id, profile)
        else:
            self._freed_for[(node, gpu, start)] = job_id

    def freed_for_other(self, gpu: _Gpu, inst: _Instance, job_id: str | None) -> bool:
        """Is this instance being freed (or free) for another job than job_id?"""
        holder = self._freed_for.get((gpu.node, gpu.index, inst.start))
        return holder is not None and holder != job_id

    def _freed_here(self, gpu: _Gpu, job_id: str | None) -> bool:
        """Does this GPU hold an instance freed for another job than job_id?"""
        return bool(self._freed_for) and any(
            self.freed_for_other(gpu, inst, job_id) for inst in gpu.instances
        )

    def _room_with(self, gpu: _Gpu, job_id: str | None, profile: str) -> bool:
        """Is this GPU held for other jobs only, with room for their slices and this one?"""
        held = self._reserved.get(gpu.order)
        if not held or job_id is None or gpu.table is None:
            return False
        specs = [_spec(gpu.table, p) for p in (*held.values(), profile)]
        if any(s is None for s in specs):
            return False
        return _placements(gpu.table, _largest_first(s for s in specs if s)) is not None

    def held_for(self, node: str, gpu: int, job_id: str) -> bool:
        """Is this GPU being emptied (or re-laid out) for job_id?"""
        return job_id in (self._reserved.get((node, gpu)) or ())

    def _shared_until_idle(self, gpu: _Gpu) -> bool:
        """A GPU emptied for several jobs is laid out for them all once its victims have
        left: until then none takes an instance that may not fit beside the others'."""
        held = self._reserved.get(gpu.order)
        return (
            held is not None
            and len(held) > 1
            and any(i.job_id is not None and i.job_id not in held for i in gpu.instances)
        )

    def reserved_for_other(self, gpu: _Gpu, job_id: str | None) -> bool:
        """Is this GPU being emptied for jobs other than job_id (or for a job not yet known)?"""
        if gpu.order not in self._reserved:
            return False
        held = self._reserved[gpu.order]
        return job_id is None or held is None or job_id not in held

    def _set_instances(self, gpu: _Gpu, instances: list[_Instance]) -> None:
        for inst in gpu.instances:
            for key in inst.keys:
                self._free_gpus.get(key, {}).pop(gpu, None)
        gpu.set_instances(instances)
        for inst in instances:
            if inst.job_id is None:
                for key in inst.keys:
                    self._free_gpus.setdefault(key, {})[gpu] = None

    def _hold(self, gpu: _Gpu, inst: _Instance, job_id: str | None) -> None:
        inst.job_id = job_id
        self._set_instances(gpu, gpu.instances)

    def layout(self, node: str, gpu: int) -> tuple[MigInstance, ...]:
        """The GPU's instances as the index now sees them (empty for an unknown GPU)."""
        found = self._by_key.get((node, gpu))
        if found is None:
            return ()
        return tuple(MigInstance(i.profile, i.start, i.size, i.job_id) for i in found.instances)

    def _keys(self, profile: str) -> list[object]:
        """Index keys a request for `profile` may match: the name, and its spec per model."""
        return [profile, *(spec for t in self._tables if (spec := _spec(t, profile)) is not None)]

    def _free(
        self,
        profile: str,
        gpu_model: str | None,
        pool: str | None,
        within: Iterable[_Gpu] | None = None,
        cluster: str | None = None,
    ) -> Iterator[tuple[_Gpu, _Instance]]:
        """Free instances a request for `profile` may use, GPU by GPU (of `within` if given)."""
        if within is None:
            gpus: dict[_Gpu, None] = {}
            for key in self._keys(profile):
                gpus.update(self._free_gpus.get(key, {}))
            within = gpus
        for gpu in within:
            if gpu.accepts(gpu_model, pool, cluster):
                for inst in gpu.instances:
                    if inst.job_id is None and _names(gpu, inst, profile):
                        yield gpu, inst

    def free_count(
        self, profile: str, gpu_model: str | None, pool: str | None, cluster: str | None = None
    ) -> int:
        return sum(
            1
            for gpu, _ in self._free(profile, gpu_model, pool, cluster=cluster)
            if gpu.order not in self._reserved
        )

    def shortage(
        self,
        profile: str,
        models: Sequence[str | None],
        pool: str | None,
        cluster: str | None,
        job_id: str,
    ) -> Shortage:
        """Where the instances are that a request for `profile` on one of `models` may use,
        once take() found none for job_id: held by running jobs, taken by jobs ahead, freed
        for a preemptor, on a GPU held for one or re-laid out for other jobs."""
        taken_now = {(gpu.node, gpu.index, inst.start) for gpu, inst in self._taken}
        free = running = taken = 0
        freed: dict[tuple[str, bool], int] = {}
        held: list[tuple[str, int, tuple[str, ...]]] = []
        relaid: list[tuple[str, int]] = []
        for gpu in self._gpus:
            if not any(gpu.accepts(m, pool, cluster) for m in models):
                continue
            usable = [i for i in gpu.instances if _names(gpu, i, profile)]
            if gpu.order in self._relaid or self.reserved_for_other(gpu, job_id):
                # The GPU as a whole: its instances are a new layout's, or the preemptors'.
                if usable or _spec(gpu.table, profile) is not None:
                    if gpu.order in self._relaid:
                        relaid.append(gpu.order)
                    else:
                        jobs = tuple(sorted(self._reserved[gpu.order] or ()))
                        held.append((*gpu.order, jobs))
                continue
            for inst in usable:
                key = (gpu.node, gpu.index, inst.start)
                holder = self._freed_for.get(key)
                if key in taken_now:
                    taken += 1
                elif holder is not None and holder != job_id:
                    at = (holder, inst.job_id is not None)
                    freed[at] = freed.get(at, 0) + 1
                elif inst.job_id is not None:
                    running += 1
                elif self._claims.get(key, job_id) != job_id:
                    taken += 1
                else:
                    free += 1
        return Shortage(
            free,
            running,
            taken,
            tuple((job, n, leaving) for (job, leaving), n in sorted(freed.items())),
            tuple(held),
            tuple(relaid),
        )

    def take(
        self,
        profile: str,
        gpu_model: str | None,
        pool: str | None,
        job_id: str,
        *,
        include_relaid: bool = True,
        cluster: str | None = None,
    ) -> tuple[str, MigSlot] | None:
        """Hold a free existing instance of `profile` for job_id; None if there is none.

        The GPU the last plan() meant for this job comes first, and instances it meant for
        other jobs last. Otherwise best fit: a GPU already in use before an idle one (an idle
        GPU can still be re-laid out for whatever comes next), then the GPU with the fewest
        free compute slices left, so larger free regions stay whole elsewhere.
        include_relaid=False skips GPUs that plan() re-laid out, whose new instances do not
        exist until the backend applies the layout."""
        planned = self._by_key.get(self._planned_for.get(job_id, ("", -1)))
        best = None
        for within in ([planned] if planned else []), None:
            best = self._best_free(
                profile, gpu_model, pool, within, cluster, job_id, include_relaid
            )
            if best is not None:
                break
        if best is None:
            return None
        gpu, inst = best
        self._hold(gpu, inst, job_id)
        self._taken.append((gpu, inst))
        return gpu.node, MigSlot(gpu.index, inst.profile, inst.start, inst.size)

    def _best_free(
        self,
        profile: str,
        gpu_model: str | None,
        pool: str | None,
        within: Iterable[_Gpu] | None,
        cluster: str | None,
        job_id: str,
        include_relaid: bool,
    ) -> tuple[_Gpu, _Instance] | None:
        """The free instance take() gives job_id: the one a preemption freed for it first,
        one plan() meant for another job last, a GPU in use before an idle one, then the
        fullest (room_for asks the same)."""
        claims = self._claims
        freed = self._freed_for
        return min(
            (
                (gpu, inst)
                for gpu, inst in self._free(profile, gpu_model, pool, within, cluster)
                if (include_relaid or gpu.order not in self._relaid)
                and not self.reserved_for_other(gpu, job_id)
                and not self._shared_until_idle(gpu)
                and not self.freed_for_other(gpu, inst, job_id)
            ),
            key=lambda c: (
                freed.get((c[0].node, c[0].index, c[1].start)) != job_id,
                claims.get((c[0].node, c[0].index, c[1].start), job_id) != job_id,
                c[0].idle,
                c[0].free_compute(),
                c[0].order,
                -c[1].start,
            ),
            default=None,
        )

    def kind_at(self, node: str, slot: MigSlot) -> InstanceKind | None:
        """The kind of the instance a job holds: what a request may use it by (its GPU's model,
        pool and cluster, and its profile). None when the index left its GPU out."""
        gpu = self._by_key.get((node, slot.gpu))
        if gpu is None:
            return None
        for inst in gpu.instances:
            if inst.start == slot.start and inst.size == slot.size:
                kind = (gpu.model, gpu.place, inst.spec or inst.profile)
                self._kinds.setdefault(kind, (gpu, inst))
                return kind
        return None

    def serves(
        self,
        kind: InstanceKind,
        profile: str,
        gpu_model: str | None,
        pool: str | None,
        cluster: str | None = None,
    ) -> bool:
        """May a request for `profile` use an instance of this kind (one kind_at returned)?"""
        gpu, inst = self._kinds[kind]
        return gpu.accepts(gpu_model, pool, cluster) and _names(gpu, inst, profile)

    def victim_sets(
        self,
        profile: str,
        gpu_model: str | None,
        pool: str | None,
        cluster: str | None,
        eligible: Callable[[str], bool],
        *,
        relayout: bool = True,
        job_id: str | None = None,
        shared: Callable[[str], bool] | None = None,
    ) -> list[tuple[str, tuple[str, ...], tuple[str, int], bool]]:
        """Ways to make room for a slice by stopping jobs: (GPU model, the jobs, the GPU,
        whether they are all its holders) when each holds an instance the request may use,
        or (with `relayout`: the GPU may be re-laid out) when together they hold every
        instance of a GPU whose table offers the profile (idle, it can be re-laid out). Only
        jobs for which `eligible(job_id)` is true, and GPUs not being emptied for another job
        than `job_id` unless it has room for them all: there `shared(job_id)` says who may
        be a victim (one already claimed by those jobs, say); no instance being freed for
        another job (hold_freed), nor a whole GPU holding one; GPUs in (node, index) order,
        jobs by id."""
        found: list[tuple[str, tuple[str, ...], tuple[str, int], bool]] = []
        for gpu in self._gpus:
            if gpu.idle or not gpu.accepts(gpu_model, pool, cluster):
                continue
            held = self._reserved.get(gpu.order)
            if held and job_id not in held and not self._room_with(gpu, job_id, profile):
                continue
            whole_eligible = shared if held and shared is not None else eligible
            holders = [i for i in gpu.instances if i.job_id is not None]
            usable = [i for i in holders if _names(gpu, i, profile)]
            for inst in usable:
                assert inst.job_id is not None
                # One being freed for another job is that job's (hold_freed).
                if eligible(inst.job_id) and not self.freed_for_other(gpu, inst, job_id):
                    found.append((gpu.model, (inst.job_id,), gpu.order, len(holders) == 1))
            if (
                relayout
                and not gpu.fixed
                and not self._freed_here(gpu, job_id)
                and holders != usable[:1]  # else the one holder's instance serves: found above
                and _spec(gpu.table, profile) is not None
                and all(whole_eligible(i.job_id or "") for i in holders)
            ):
                ids = tuple(sorted({i.job_id or "" for i in holders}))
                found.append((gpu.model, ids, gpu.order, True))
        return found

    def relayout_possible(
        self, profile: str, gpu_model: str | None, pool: str | None, cluster: str | None = None
    ) -> bool:
        """Is there an idle GPU, neither re-laid out nor meant for a job by the last plan()
        nor being emptied, that such a request may use and whose table offers the profile?"""
        planned = set(self._planned_for.values())
        return any(
            gpu.idle
            and not gpu.fixed
            and gpu.order not in self._relaid
            and gpu.order not in planned
            and gpu.order not in self._reserved
            and gpu.accepts(gpu_model, pool, cluster)
            and _spec(gpu.table, profile) is not None
            for gpu in self._gpus
        )

    def release(self, node: str, slot: MigSlot) -> None:
        """Free the instance a job held. A GPU the index left out (node not up, GPU unusable)
        is ignored; an instance that does not exist on an indexed GPU is a caller error."""
        gpu = self._by_key.get((node, slot.gpu))
        if gpu is None:
            return
        for inst in gpu.instances:
            if inst.start == slot.start and inst.size == slot.size:
                self._hold(gpu, inst, None)
                return
        raise ValueError(f"no MIG instance {slot.profile}@{slot.start} on {node} GPU {slot.gpu}")

    def planned_for(self, job_id: str) -> tuple[str, int] | None:
        """(node, GPU) where the last plan() means this job to run, re-laid out or not."""
        return self._planned_for.get(job_id)

    def relayout_for(self, job_id: str) -> MigRelayout | None:
        """The relayout this job waits for, if the last plan() put it on a re-laid-out GPU."""
        return self._relaid.get(self._planned_for.get(job_id, ("", -1)))

    def plan(
        self, requests: Sequence[MigRequest], *, in_order: bool = False, strict: bool = False
    ) -> list[MigRelayout]:
        """New layouts for idle GPUs that serve the most requests, higher priority classes
        first, and apply them to the index. Free instances on busy GPUs are used first (they
        cost nothing); an idle GPU keeps its layout when that already serves its share, and
        a free instance it has goes to a request left out rather than to later ones (in the
        order given) when that serves as many of each class. An idle GPU emptied for jobs
        (reserve) is theirs first, and others' only beside them.

        Called with every startable MIG request before any take(), it serves more than when
        called with take()'s leftovers: a take() can make an idle GPU busy that a later
        request needed re-laid out (see bench/mig_quality.py).

        `in_order`: requests are served in the order given (the baselines' submit order),
        not smallest first, so a later small request never takes the GPU the first one
        needed; `strict` (FIFO): none after the first that cannot be served, which the
        later ones may not pass."""
        order: Sequence[int] = range(len(requests))
        if not in_order:
            order = sorted(
                order,
                key=lambda i: (-requests[i].priority, _request_size(requests[i].profile), i),
            )
        # An idle GPU emptied for jobs goes to them first (seeded), and is planned for other
        # requests only alongside them.
        asked = {r.job_id for r in requests}
        held_for: dict[str, _Gpu] = {}
        idle = []
        for g in self._gpus:
            if not g.idle or g.fixed or g.table is None:
                continue
            held = self._reserved.get(g.order)
            if g.order in self._reserved and not (held and asked & held.keys()):
                continue
            idle.append(g)
            held_for.update(dict.fromkeys(held or (), g))
        seeds = [
            (held_for[requests[i].job_id], requests[i])
            for i in order
            if requests[i].job_id in held_for
        ]
        # A free instance a preemption freed for a job is that job's (hold_freed).
        freed: dict[str, tuple[_Gpu, _Instance]] = {}
        for (node, index, start), job_id in self._freed_for.items():
            gpu = self._by_key[(node, index)]
            for inst in gpu.instances:
                if inst.start == start and inst.job_id is None and job_id in asked:
                    freed[job_id] = (gpu, inst)
        spare_requests = [r for r in requests if r.job_id not in freed] if freed else requests
        capacity = sum(g.table.compute_slices for g in idle if g.table)

        def pack(
            seeds: Sequence[tuple[_Gpu, MigRequest]],
        ) -> tuple[_Packing, dict[str, tuple[_Gpu, _Instance]]]:
            # A GPU being emptied for a job gives its free instances to no other request. A
            # GPU whose layout is fixed only ever serves by the instances it has, idle or not.
            spare = _Spare(
                self,
                [
                    g
                    for g in self._gpus
                    if (g.fixed or not g.idle) and g.order not in self._reserved
                ],
                spare_requests,
                self._freed_for,
            )

            def packed(prefer_kept: bool = True) -> tuple[_Packing, set[str]]:
                p = _Packing(idle, prefer_kept=prefer_kept)
                return p, {r.job_id for gpu, r in seeds if p.seed(gpu, r)}

            packing, seeded = packed()
            claims: dict[str, tuple[_Gpu, _Instance]] = {}
            hopeless: set[tuple[int, str, str | None, str | None, str | None]] = set()
            for i in order:
                request = requests[i]
                if request.job_id in seeded:
                    continue
                if request.job_id in freed:
                    claims[request.job_id] = freed[request.job_id]
                    continue
                claimed = spare.claim(request)
                if claimed is not None:
                    claims[request.job_id] = claimed
                    continue
                signature = (
                    request.priority,
                    request.profile,
                    request.gpu_model,
                    request.pool,
                    request.cluster,
                )
                if signature in hopeless:
                    if strict:
                        break
                    continue
                if packing.add(request):
                    continue
                # Repacking everything largest first finds room that the small-first order of
                # selection missed; not worth trying when the compute alone cannot fit.
                members = [*packing.members(), request]
                repacked = None
                if sum(_request_size(r.profile)[0] for r in members) <= capacity:
                    repacked, _ = packed(prefer_kept=False)
                    rest = [r for r in members if r.job_id not in seeded]
                    if not all(repacked.add(r) for r in _largest_requests_first(rest)):
                        repacked = None
                if repacked is None:
                    if strict:
                        break
                    hopeless.add(signature)  # an identical request would not fit either
                else:
                    packing = repacked
            return packing, claims

        packing, claims = pack(seeds)
        if not in_order:
            # Packed smallest first, a later smaller request may get an idle GPU re-laid out
            # under a request left out that a free instance it has could serve now: that one
            # keeps it when the requests planned there all come after it (in the order given).
            where = {r.job_id: g for g, wanted in packing.bins.items() for r, _ in wanted}
            after: dict[_Gpu, int] = {}
            for position, request in enumerate(requests):
                on = where.get(request.job_id)
                if on is not None:
                    after.setdefault(on, position)
            kept: dict[_Gpu, list[ProfileSpec]] = {}
            extra = []
            # A shape no GPU took stays refused for later requests (stricter, GPUs fuller).
            refused: set[tuple[str, str | None, str | None, str | None]] = set()
            for position, request in enumerate(requests):
                if request.job_id in where or request.job_id in claims:
                    continue
                shape = (request.profile, request.gpu_model, request.pool, request.cluster)
                if shape in refused:
                    continue
                refused.add(shape)
                for g in idle:
                    spec = _spec(g.table, request.profile)
                    if (
                        spec is not None
                        and g.accepts(request.gpu_model, request.pool, request.cluster)
                        and g.order not in self._reserved
                        and after.get(g, position + 1) > position
                        and g.holds([*kept.get(g, []), spec])
                    ):
                        kept.setdefault(g, []).append(spec)
                        extra.append((g, request))
                        refused.discard(shape)
                        break
            if extra:
                # Only when that serves as many requests of each class, higher classes first.
                def served(
                    packing: _Packing, claims: Mapping[str, object]
                ) -> list[tuple[int, int]]:
                    ids = {r.job_id for r in packing.members()} | claims.keys()
                    count = Counter(r.priority for r in requests if r.job_id in ids)
                    return sorted(count.items(), reverse=True)

                retry = pack([*seeds, *extra])
                if served(*retry) >= served(packing, claims):
                    packing, claims = retry
        for job_id, (gpu, inst) in claims.items():
            self._planned_for[job_id] = gpu.order
            self._claims[(gpu.node, gpu.index, inst.start)] = job_id
        demand = Counter(r.profile for r in requests)
        relayouts = []
        for gpu, wanted in sorted(_keep_layouts(packing.bins).items(), key=lambda b: b[0].order):
            if not gpu.holds(spec for _, spec in wanted):
                relayout = self._relayout(gpu, wanted, demand)
                self._relaid[gpu.order] = relayout
                relayouts.append(relayout)
            for request, _ in wanted:
                self._planned_for[request.job_id] = gpu.order
        return relayouts + self._proposals(requests, order, demand)

    def _proposals(
        self, requests: Sequence[MigRequest], order: Sequence[int], demand: Counter[str]
    ) -> list[MigRelayout]:
        """Layouts to propose for idle fixed GPUs (no instance claimed) that would serve the
        requests plan() left unserved: advisory, for an admin to apply; the index is left
        as it is and no job is planned onto them."""
        claimed = {(node, gpu) for node, gpu, _ in self._claims}
        fixed = [
            g
            for g in self._gpus
            if g.fixed
            and g.idle
            and g.table is not None
            and g.order not in claimed
            and g.order not in self._reserved
        ]
        if not fixed:
            return []
        packing = _Packing(fixed)
        for i in order:
            if requests[i].job_id not in self._planned_for:
                packing.add(requests[i])
        bins = sorted(_keep_layouts(packing.bins).items(), key=lambda b: b[0].order)
        return [
            self._relayout(gpu, wanted, demand, advisory=True)
            for gpu, wanted in bins
            if not gpu.holds(spec for _, spec in wanted)
        ]

    def _relayout(
        self,
        gpu: _Gpu,
        wanted: Sequence[tuple[MigRequest, ProfileSpec]],
        demand: Counter[str],
        *,
        advisory: bool = False,
    ) -> MigRelayout:
        assert gpu.table is not None
        table = gpu.table
        placed = _placements(table, _fill(table, [s for _, s in wanted], demand))
        assert placed is not None  # _fill only adds profiles that keep the layout realisable
        layout = tuple(MigInstance(spec.name, start, spec.size) for spec, start in placed)
        if not advisory:
            self._set_instances(gpu, [_Instance(s.name, start, s.size, s) for s, start in placed])
        kinds = {request.kind for request, _ in wanted}
        kind = f"{kinds.pop()} " if len(kinds) == 1 and "" not in kinds else ""
        count = len(wanted)
        jobs = f"{count} pending {kind}job{'s' if count != 1 else ''}"
        profiles = "+".join(i.profile for i in layout)
        return MigRelayout(
            node=gpu.node,
            gpu=gpu.index,
            instances=layout,
            message=(
                f"GPU {gpu.index} on node {gpu.node} laid out as {profiles} would serve {jobs}"
                if advisory
                else f"GPU {gpu.index} on node {gpu.node} re-laid out as {profiles} for {jobs}"
            ),
            advisory=advisory,
        )


def _request_size(profile: str) -> tuple[int, int]:
    try:
        parsed = parse_profile(profile)
    except ValueError:
        return (1 << 30, 1 << 30)
    return (parsed.compute, parsed.memory_gb)


def _largest_requests_first(requests: Sequence[MigRequest]) -> list[MigRequest]:
    return sorted(requests, key=lambda r: _request_size(r.profile), reverse=True)


class _Packing:
    """Requests planned onto idle GPUs. GPUs that are interchangeable for the next choice
    (same model, pool, current layout and planned set) form one group, so a choice costs one
    evaluation per group instead of one per GPU."""

    def __init__(self, idle: Sequence[_Gpu], *, prefer_kept: bool = True) -> None:
        self._prefer_kept = prefer_kept
        self.bins: dict[_Gpu, list[tuple[MigRequest, ProfileSpec]]] = {}
        self._groups: dict[tuple[object, ...], list[_Gpu]] = {}
        for gpu in sorted(idle, key=lambda g: g.order):
            self._file(gpu, ())

    def _file(self, gpu: _Gpu, planned: tuple[ProfileSpec, ...]) -> None:
        key = (gpu.model, gpu.place, gpu.signature, planned)
        insort(self._groups.setdefault(key, []), gpu, key=lambda g: g.order)

    def members(self) -> list[MigRequest]:
        return [request for wanted in self.bins.values() for request, _ in wanted]

    def seed(self, gpu: _Gpu, request: MigRequest) -> bool:
        """Plan a request on this GPU (one emptied for it); False if it has no room."""
        spec = _spec(gpu.table, request.profile)
        wanted = self.bins.get(gpu, [])
        key = (gpu.model, gpu.place, gpu.signature, _largest_first(s for _, s in wanted))
        gpus = self._groups.get(key, [])
        if spec is None or gpu.table is None or gpu not in gpus:
            return False
        if _placements(gpu.table, _largest_first((*key[3], spec))) is None:
            return False
        gpus.remove(gpu)
        if not gpus:
            del self._groups[key]
        self.bins[gpu] = [*wanted, (request, spec)]
        self._file(gpu, _largest_first(s for _, s in self.bins[gpu]))
        return True

    def add(self, request: MigRequest) -> bool:
        """Plan one more request; False if no idle GPU has room for it.

        Best fit among GPUs already planned, so small requests share GPUs and whole ones
        stay free for large requests; a new GPU only when none has room, preferring one whose
        layout already holds the profile, then a blank one, before destroying a layout. Above
        all, avoid stranding compute slices that no profile could use any more (3g + 3g)."""
        best: tuple[tuple[bool, bool, int, bool, bool, tuple[str, int]], tuple[object, ...]] | None
        best = None
        for key, gpus in self._groups.items():
            gpu = gpus[0]
            spec = _spec(gpu.table, request.profile)
            if (
                spec is None
                or gpu.table is None
                or not gpu.accepts(request.gpu_model, request.pool, request.cluster)
            ):
                continue
            planned = key[3]
            assert isinstance(planned, tuple)
            specs = _largest_first((*planned, spec))
            if _placements(gpu.table, specs) is None:
                continue
            # A kept layout strands nothing that is not stranded already. The repack packs on
            # fit alone (layouts are matched again afterwards, by _keep_layouts).
            kept = self._prefer_kept and gpu.holds(specs)
            rank = (
                not kept and _stranded(gpu.table, specs) > 0,
                not planned,
                gpu.table.compute_slices - sum(s.compute_slices for s in specs),
                not kept,
                bool(gpu.instances),
                gpu.order,
            )
            if best is None or rank < best[0]:
                best = (rank, key)
        if best is None:
            return False
        gpus = self._groups[best[1]]
        gpu = gpus.pop(0)
        if not gpus:
            del self._groups[best[1]]
        spec = _spec(gpu.table, request.profile)
        assert spec is not None
        wanted = self.bins.setdefault(gpu, [])
        wanted.append((request, spec))
        self._file(gpu, _largest_first(s for _, s in wanted))
        return True


def _keep_layouts(
    bins: Mapping[_Gpu, list[tuple[MigRequest, ProfileSpec]]],
) -> dict[_Gpu, list[tuple[MigRequest, ProfileSpec]]]:
    """Move planned sets between interchangeable GPUs (same model and pool) so that as many
    as possible land on a GPU whose current layout already holds them: no relayout there.
    Only GPUs that are planned on take part; other idle layouts stay untouched."""
    result: dict[_Gpu, list[tuple[MigRequest, ProfileSpec]]] = {}
    movable: dict[
        tuple[str, tuple[str | None, str | None]], list[list[tuple[MigRequest, ProfileSpec]]]
    ] = {}
    # (model, pool) -> current layout -> GPUs, so a choice looks at layouts, not GPUs.
    targets: dict[tuple[str, tuple[str | None, str | None]], dict[tuple[str, ...], list[_Gpu]]] = {}
    for gpu, wanted in sorted(bins.items(), key=lambda b: b[0].order):
        if gpu.holds(s for _, s in wanted):
            result[gpu] = wanted
        else:
            movable.setdefault((gpu.model, gpu.place), []).append(wanted)
            layouts = targets.setdefault((gpu.model, gpu.place), {})
            layouts.setdefault(gpu.signature, []).append(gpu)
    for group, sets in movable.items():
        layouts = targets[group]
        for wanted in sorted(sets, key=len, reverse=True):
            specs = [s for _, s in wanted]
            signature = min(
                (sig for sig, gpus in layouts.items() if gpus),
                key=lambda sig: (not layouts[sig][0].holds(specs), layouts[sig][0].order),
            )
            result[layouts[signature].pop(0)] = wanted
    return result


class _Spare:
    """Free instances on GPUs already in use: served first, since using them changes no
    layout. Requests claim them virtually while plan() decides. Instances of one kind (GPU
    model, pool and cluster, profile) are interchangeable; a request takes one of the kind
    it may use with the most left over for the requests still to come, so one that may go
    anywhere leaves a pool-bound one the instance it needs. Ties go in (node, GPU, start)
    order, whatever the order of the snapshot."""

    def __init__(
        self,
        index: MigIndex,
        busy: Sequence[_Gpu],
        requests: Sequence[MigRequest],
        freed: Mapping[tuple[str, int, int], str],
    ):
        # Per kind, its free instances, last first (claims pop from the end); not those a
        # preemption freed for a job (MigIndex.hold_freed).
        self._free: dict[InstanceKind, list[tuple[_Gpu, _Instance]]] = {}
        for gpu in sorted(busy, key=lambda g: g.order):
            for inst in sorted(gpu.instances, key=lambda i: i.start):
                if inst.job_id is None and (gpu.node, gpu.index, inst.start) not in freed:
                    kind = (gpu.model, gpu.place, inst.spec or inst.profile)
                    self._free.setdefault(kind, []).append((gpu, inst))
        for entries in self._free.values():
            entries.reverse()
        # Requests not yet served per signature, and per kind how many of them may use it.
        self._waiting = Counter(_signature(r) for r in requests)
        self._usable: dict[Signature, list[InstanceKind]] = {}
        self._demand: Counter[InstanceKind] = Counter()
        for signature, count in self._waiting.items():
            for usable in self._kinds_for(signature):
                self._demand[usable] += count

    def _kinds_for(self, signature: Signature) -> list[InstanceKind]:
        found = self._usable.get(signature)
        if found is None:
            profile, gpu_model, pool, cluster = signature
            found = self._usable[signature] = [
                kind
                for kind, entries in self._free.items()
                if entries[0][0].accepts(gpu_model, pool, cluster)
                and _names(entries[0][0], entries[0][1], profile)
            ]
        return found

    def claim(self, request: MigRequest) -> tuple[_Gpu, _Instance] | None:
        signature = _signature(request)
        kinds = self._kinds_for(signature)
        self._waiting[signature] -= 1
        for kind in kinds:
            self._demand[kind] -= 1
        best: tuple[tuple[int, tuple[str, int], int], InstanceKind] | None = None
        for kind in kinds:
            entries = self._free[kind]
            if entries:
                gpu, inst = entries[-1]
                rank = (self._demand[kind] - len(entries), gpu.order, inst.start)
                if best is None or rank < best[0]:
                    best = (rank, kind)
        if best is None:
            return None
        return self._free[best[1]].pop()


def _signature(request: MigRequest) -> Signature:
    return (request.profile, request.gpu_model, request.pool, request.cluster)


def _fill(
    table: ModelTable, specs: Sequence[ProfileSpec], demand: Counter[str]
) -> tuple[ProfileSpec, ...]:
    """Complete a planned multiset into a maximal layout: the space would otherwise stay
    unusable until the GPU is idle again. Profiles in demand first, then the smallest."""
    wanted: Counter[ProfileSpec] = Counter()
    for profile, count in demand.items():
        if (spec := _spec(table, profile)) is not None:
            wanted[spec] += count
    in_demand = sorted(wanted, key=lambda s: (-wanted[s], _size_key(s)))
    rest = sorted((s for s in table.profiles if not s.media_extensions), key=_size_key)
    candidates = [*in_demand, *(s for s in rest if s not in wanted)]
    current = _largest_first(specs)
    grown = True
    while grown:
        grown = False
        for spec in candidates:
            bigger = _largest_first((*current, spec))
            if _placements(table, bigger) is not None:
                current, grown = bigger, True
                break
    return current
