"""Workflows: jobs that wait for parent jobs. The rules, decided once, for both stores.

A job may name parents (``NewJob.depends_on``): stored jobs by id, or earlier jobs of the same
batch by position. It is stored ``queued`` with a counter of unmet parents
(``jobs.parents_pending``) and is not claimable while that counter is above 0; the statement
that completes a parent decrements it for all the parent's children at once. A parent that
fails or is cancelled cancels its dependents (transitively, the error naming the parent), or
counts as settled for a child submitted with ``on_parent_failure="run"``.

Why a cycle is impossible: a job can only name parents that exist before it, stored ones or
earlier ones of its batch, and edges are never added to a stored job afterwards. So every edge
points from an older job to a newer one, and a path can never come back. An index that names
the job itself or a later one is refused (InvalidInput) before anything is written.

This module is pure: :func:`wire` takes the batch and its stored parents (as the store read and
locked them) and says, for each job, its state, its counter and its edges. The stores persist it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from service.errors import InvalidInput, JobNotFound
from service.jobs import JSON, JobState, NewJob

MAX_PARENTS = 10_000
"""Parents one job may name. A child's enqueue locks every stored parent it names (to order
itself with their completions) and ``ctx.parent_results()`` hands all their results to one
handler: 10,000 covers the fan-in of a 10,000-job fan-out (the issue's benchmark shape, 9,999 → 1)
and keeps one enqueue's row locks and one handler's parent results bounded. A wider fan-in is
better built in layers (group of groups)."""

ON_PARENT_FAILURE = ("cancel", "run")

HELD_UNTIL = "9999-12-31 00:00:00"
"""A held job's ``run_after`` (UTC). The claim never sees a held job: ``ix_jobs_claimable``,
the one index it reads, leaves out ``parents_pending > 0`` (migration 0011 has the measurement
that chose it). The far run_after keeps the readers of due times that do not use that index
(the autoscaler's count) from taking a held job for a due one; its own due time waits in
``due_after_parents``. A finite instant, not PostgreSQL's 'infinity', which no Python datetime
can hold (a status poll would fail to read it)."""

Parent = uuid.UUID | int


@dataclass(frozen=True)
class StoredParent:
    """A parent as the enqueue's transaction read it, its row locked until that commits."""

    id: uuid.UUID
    tenant: str
    state: JobState
    cancelled_by: uuid.UUID | None
    workflow_id: uuid.UUID | None = None  # None: it was an independent job until now


@dataclass(frozen=True)
class Wiring:
    """What the store writes for one job of the batch."""

    state: JobState  # QUEUED, or CANCELLED when a parent has already failed (on_parent_failure 'cancel')
    parents: tuple[uuid.UUID, ...]  # its parents' ids, each once, in the order named
    pending: int  # parents not yet settled
    error: str | None = None  # why it was cancelled at birth
    cancelled_by: uuid.UUID | None = None  # the job whose replay re-arms it
    has_children: bool = False  # a later job of the batch names it: its completion looks for children


def stored_parent_ids(jobs: Sequence[NewJob]) -> list[uuid.UUID]:
    """The stored parents a batch names (by id), each once, sorted: the order the store locks them in."""
    return sorted({parent for job in jobs for parent in job.depends_on if isinstance(parent, uuid.UUID)})


def has_parents(jobs: Sequence[NewJob]) -> bool:
    return any(job.depends_on for job in jobs)


def check_dependencies(jobs: Sequence[NewJob]) -> None:
    """What needs no database: positions name earlier jobs of the batch, the number of parents,
    on_parent_failure. InvalidInput, nothing written."""
    for position, job in enumerate(jobs):
        if job.on_parent_failure not in ON_PARENT_FAILURE:
            raise InvalidInput("on_parent_failure must be 'cancel' or 'run'")
        if not isinstance(job.depends_on, tuple | list):
            raise InvalidInput("depends_on must be a list of job ids or batch positions")
        if len(job.depends_on) > MAX_PARENTS:
            raise InvalidInput(f"a job may depend on at most {MAX_PARENTS} parents")
        for parent in job.depends_on:
            if isinstance(parent, bool) or not isinstance(parent, uuid.UUID | int):
                raise InvalidInput("depends_on must be a list of job ids or batch positions")
            if isinstance(parent, int) and not 0 <= parent < position:
                raise InvalidInput(
                    f"job {position} of the batch depends on position {parent}: a job may only depend on "
                    "stored jobs or earlier jobs of its batch, so a cycle cannot be made"
                )


def wire(jobs: Sequence[NewJob], ids: Sequence[uuid.UUID], stored: Mapping[uuid.UUID, StoredParent]) -> list[Wiring]:
    """Each job's state, counter and edges. A stored parent missing from ``stored``, or another
    tenant's, raises JobNotFound with the same words as any job that is not there."""
    check_dependencies(jobs)
    wirings: list[Wiring] = []
    for job, job_id in zip(jobs, ids, strict=True):
        parents: list[uuid.UUID] = []
        pending = 0
        doomed: tuple[uuid.UUID, str, uuid.UUID] | None = None  # (parent, how it ended, root)
        for ref in dict.fromkeys(job.depends_on):  # each parent once, in the order named
            if isinstance(ref, int):
                parent_id = ids[ref]
                if parent_id in parents:
                    continue
                earlier = wirings[ref]
                if jobs[ref].tenant != job.tenant:
                    raise JobNotFound(parent_id)
                ended = "was cancelled" if earlier.state is JobState.CANCELLED else None
                root = earlier.cancelled_by or parent_id
            else:
                found = stored.get(ref)
                if found is None or found.tenant != job.tenant or ref == job_id:
                    raise JobNotFound(ref)
                parent_id = ref
                if parent_id in parents:
                    continue
                ended = {JobState.FAILED: "failed", JobState.CANCELLED: "was cancelled"}.get(found.state)
                if found.state is JobState.SUCCEEDED:
                    parents.append(parent_id)
                    continue
                root = found.cancelled_by or parent_id
            parents.append(parent_id)
            if ended is None:
                pending += 1
            elif job.on_parent_failure == "cancel" and doomed is None:
                doomed = (parent_id, ended, root)
        if doomed is not None:
            parent_id, ended, root = doomed
            wirings.append(
                Wiring(JobState.CANCELLED, tuple(parents), pending, parent_failed_error(parent_id, ended), root)
            )
        else:
            wirings.append(Wiring(JobState.QUEUED, tuple(parents), pending))
    named = {ref for job in jobs for ref in job.depends_on if isinstance(ref, int)}
    return [replace(wiring, has_children=True) if i in named else wiring for i, wiring in enumerate(wirings)]


@dataclass(frozen=True)
class WorkflowIds:
    """What an enqueue with dependencies writes of workflows: each new job's workflow (batch order,
    None for a job that is neither a parent nor a child), and the stored jobs that had none and
    join one now (the parents and the enqueuing job, their rows locked by the same transaction)."""

    jobs: list[uuid.UUID | None]
    joined: dict[uuid.UUID, uuid.UUID]


def workflow_ids(
    jobs: Sequence[NewJob],
    ids: Sequence[uuid.UUID],
    stored: Mapping[uuid.UUID, StoredParent],
    spawner: uuid.UUID | None = None,
) -> WorkflowIds:
    """Which workflow each job of a batch belongs to (``jobs.workflow_id``), the rule of both stores.

    The jobs linked by the batch's edges, by stored parents and by the job whose handler enqueued
    them (``spawner``: its follow-ups are part of its workflow, with or without dependencies) form
    one workflow. Its id is an existing workflow's when a stored job of it has one; else the id of
    its first job, a root: a stored parent (the smallest id, each such one was an independent job
    until now) or the batch's first job of it (which no earlier job of the batch precedes). A stored
    job without one joins it (``joined``): the first time a job is named as a parent, it becomes
    its workflow's root. A job linked to nothing keeps None: independent jobs cost nothing.

    Why the smallest id when a batch links jobs of several existing workflows (a fan-in over
    workflows submitted apart): ids are time-ordered, so it is the workflow that started first,
    and the answer does not depend on the order the parents were named, nor on the store. The
    other workflows are not merged into it (that would rewrite every job of theirs): their
    progress does not count the new jobs. Call with ``stored`` from :func:`wire`'s checks (every
    parent named is there, and the spawner when given)."""
    # Union-find over the batch's positions, then the stored jobs it names (numbered after them).
    olds: dict[uuid.UUID, int] = {}
    up: list[int] = list(range(len(jobs)))

    def find(node: int) -> int:
        while up[node] != node:
            up[node] = up[up[node]]  # path halving: each find shortens the chain
            node = up[node]
        return node

    def node_of(ref: uuid.UUID | int) -> int:
        if isinstance(ref, int):
            return ref
        if ref not in olds:
            olds[ref] = len(up)
            up.append(len(up))
        return olds[ref]

    for position, job in enumerate(jobs):
        for ref in job.depends_on:
            up[find(position)] = find(node_of(ref))
        if spawner is not None:
            up[find(position)] = find(node_of(spawner))
    linked = [False] * len(up)  # whether the component holds more than one job
    first: dict[int, int] = {}  # component -> its first batch position
    for position in range(len(jobs)):
        component = find(position)
        if component in first:
            linked[component] = True
        else:
            first[component] = position
    existing: dict[int, uuid.UUID] = {}  # component -> the smallest workflow id of its stored jobs
    lone: dict[int, uuid.UUID] = {}  # component -> the smallest id of its stored jobs without one
    for old, node in olds.items():
        component = find(node)
        linked[component] = True
        workflow = stored[old].workflow_id
        if workflow is not None:
            existing[component] = min(existing.get(component, workflow), workflow)
        else:
            lone[component] = min(lone.get(component, old), old)

    def workflow_of(component: int) -> uuid.UUID | None:
        if not linked[component]:
            return None  # a batch job linked to nothing
        return existing.get(component) or lone.get(component) or ids[first[component]]

    joined = {
        old: workflow
        for old, node in olds.items()
        if stored[old].workflow_id is None and (workflow := workflow_of(find(node))) is not None
    }
    return WorkflowIds([workflow_of(find(position)) for position in range(len(jobs))], joined)


def children_refused(exc: JobNotFound) -> InvalidInput:
    """A handler's children (ctx.enqueue) that name a job that is not there (or another tenant's):
    the result is refused with them, as a result the database refuses (the job fails, saying so)."""
    return InvalidInput(f"a job enqueued by the handler names a parent that does not exist: {exc}")


def parent_failed_error(parent: uuid.UUID, ended: str) -> str:
    """The error of a job cancelled because a parent ended badly (the stores' SQL words it the same)."""
    return f"cancelled: parent job {parent} {ended}"


@dataclass(frozen=True)
class ParentResult:
    """One parent of a job, as its handler reads it (``ctx.parent_results()``)."""

    id: uuid.UUID
    state: JobState
    result: JSON  # the parent's result, None unless it succeeded


@dataclass(frozen=True)
class Relative:
    """A parent or a child of a job, with its state (the dependencies page, the console)."""

    id: uuid.UUID
    kind: str
    state: JobState


@dataclass(frozen=True)
class Dependencies:
    """A page of a job's parents and of its children, each in id order; ``*_after`` is where
    the next page starts (None: no more)."""

    parents: list[Relative]
    children: list[Relative]
    parents_after: uuid.UUID | None
    children_after: uuid.UUID | None
    workflow_id: uuid.UUID | None = None  # the job's workflow (None: an independent job)


@dataclass(frozen=True)
class WorkflowProgress:
    """A workflow's jobs counted by state (``jobs.workflow_id``): "n of m done" from any of its jobs."""

    workflow_id: uuid.UUID
    queued: int  # waiting included
    waiting: int  # queued, and waiting for parents
    running: int
    succeeded: int
    failed: int
    cancelled: int

    @property
    def total(self) -> int:
        return self.queued + self.running + self.succeeded + self.failed + self.cancelled

    @property
    def done(self) -> int:
        """The jobs that ended, however they ended: the workflow is over when done == total."""
        return self.succeeded + self.failed + self.cancelled


def workflow_progress(workflow_id: uuid.UUID, row: Mapping[str, Any] | None) -> WorkflowProgress:
    """The counts of WORKFLOW_PROGRESS's row, for both stores."""
    counts = {name: int((row or {}).get(name) or 0) for name in COUNTED}
    return WorkflowProgress(workflow_id, **counts)


COUNTED = ("queued", "waiting", "running", "succeeded", "failed", "cancelled")


MAX_DEPENDENCIES_PAGE = 1_000
"""Parents (and children) one dependencies page lists at most."""


def check_page(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_DEPENDENCIES_PAGE:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_DEPENDENCIES_PAGE}")


@dataclass(frozen=True)
class RearmCandidate:
    """A job a replay may re-arm, with its parents' states as the replay's transaction read them."""

    id: uuid.UUID
    state: JobState  # CANCELLED (its parent's failure cancelled it) or QUEUED (replayed itself)
    on_parent_failure: str
    parents: tuple[tuple[uuid.UUID, JobState], ...]
    # For each parent that is not a candidate and ended failed or cancelled: the job whose replay
    # re-arms it (its cancelled_by; itself when it failed, or was cancelled, on its own).
    parent_roots: Mapping[uuid.UUID, uuid.UUID] = field(default_factory=dict)


def rearm(candidates: Sequence[RearmCandidate]) -> dict[uuid.UUID, int]:
    """Which of the candidates wait for their parents again, and for how many: the rule of
    both stores. A parent re-armed in the same replay waits too; one still queued or running
    counts; a cancelled candidate with another parent that failed on its own (and
    on_parent_failure 'cancel') stays cancelled, and so do the candidates below it. A
    replayed job (queued already) is the operator's word: a failed parent no longer holds it."""
    staying: set[uuid.UUID] = set()
    while True:  # a candidate that stays cancelled is a cancelled parent to those below it: again
        chosen = {c.id for c in candidates} - staying
        pending: dict[uuid.UUID, int] = {}
        for candidate in candidates:
            if candidate.id in staying:
                continue
            count = 0
            for parent, state in candidate.parents:
                if parent in chosen:
                    count += 1
                    continue
                if parent in staying:
                    state = JobState.CANCELLED
                if state in (JobState.QUEUED, JobState.RUNNING):
                    count += 1
                elif (
                    state in (JobState.FAILED, JobState.CANCELLED)
                    and candidate.on_parent_failure == "cancel"
                    and candidate.state is JobState.CANCELLED
                ):
                    staying.add(candidate.id)
                    break
            else:
                pending[candidate.id] = count
        if set(pending) == {c.id for c in candidates} - staying and not (chosen & staying):
            return pending


@dataclass(frozen=True)
class StillCancelled:
    """A candidate a replay leaves cancelled, now waiting on another job's replay."""

    id: uuid.UUID
    error: str  # names the parent that holds it now
    cancelled_by: uuid.UUID  # the job whose replay re-arms it now


def still_cancelled(candidates: Sequence[RearmCandidate], chosen: Mapping[uuid.UUID, int]) -> list[StillCancelled]:
    """The candidates ``rearm`` left cancelled (not in ``chosen``), each with the parent that holds
    it now and the job whose replay re-arms it: a parent that ended badly outside the replay (its
    root), else a parent left cancelled with it (that one's). Both stores write it, so that a child
    of two failed parents is re-armed by the replay of the last of them, whichever was first to
    cancel it (its cancelled_by named only that one before: replaying the other re-armed nothing)."""
    by_id = {c.id: c for c in candidates}
    staying = [c for c in candidates if c.id not in chosen and c.state is JobState.CANCELLED]
    held: dict[uuid.UUID, StillCancelled] = {}
    for candidate in staying:
        for parent, state in candidate.parents:
            if parent not in by_id and state in (JobState.FAILED, JobState.CANCELLED):
                ended = "failed" if state is JobState.FAILED else "was cancelled"
                root = candidate.parent_roots.get(parent, parent)
                held[candidate.id] = StillCancelled(candidate.id, parent_failed_error(parent, ended), root)
                break
    below: dict[uuid.UUID, list[uuid.UUID]] = {}
    for candidate in staying:
        for parent, _ in candidate.parents:
            below.setdefault(parent, []).append(candidate.id)
    reached = list(held)  # then down from each: a job left cancelled because its parent was
    while reached:
        parent = reached.pop()
        for child in below.get(parent, ()):
            if child not in held:
                held[child] = StillCancelled(
                    child, parent_failed_error(parent, "was cancelled"), held[parent].cancelled_by
                )
                reached.append(child)
    return [held[c.id] for c in staying if c.id in held]


def relatives(rows: Sequence[Mapping[str, Any]]) -> list[Relative]:
    """Rows (id, kind, state) as Relatives, for both stores."""
    return [Relative(uuid.UUID(str(r["id"])), r["kind"], JobState(r["state"])) for r in rows]


def dependencies_page(
    parents: Sequence[Mapping[str, Any]],
    children: Sequence[Mapping[str, Any]],
    limit: int,
    workflow_id: object = None,
) -> Dependencies:
    """A dependencies page from rows (id, kind, state) read one past ``limit``, for both stores;
    ``workflow_id`` as the job's row holds it (a UUID, its text, or None)."""
    return Dependencies(
        workflow_id=None if workflow_id is None else uuid.UUID(str(workflow_id)),
        parents=relatives(parents[:limit]),
        children=relatives(children[:limit]),
        parents_after=uuid.UUID(str(parents[limit - 1]["id"])) if len(parents) > limit else None,
        children_after=uuid.UUID(str(children[limit - 1]["id"])) if len(children) > limit else None,
    )


def parents_of(values: object) -> tuple[Parent, ...]:
    """``depends_on`` as a producer may give it: job ids (UUID or text), statuses (anything with
    an ``id``), or batch positions (int). InvalidInput for anything else."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset | tuple):
        raise InvalidInput("depends_on must be a list of job ids or batch positions")
    parents: list[Parent] = []
    for value in values:
        if isinstance(value, bool):
            raise InvalidInput("depends_on must be a list of job ids or batch positions")
        if isinstance(value, uuid.UUID | int):
            parents.append(value)
        elif isinstance(value, str):
            try:
                parents.append(uuid.UUID(value))
            except ValueError:
                raise InvalidInput(f"not a job id (expected a UUID): {value!r}") from None
        elif isinstance(getattr(value, "id", None), uuid.UUID):
            parents.append(value.id)
        else:
            raise InvalidInput("depends_on must be a list of job ids or batch positions")
    return tuple(parents)


# -- the common shapes, as one batch each (Queue.enqueue_workflow) ------------------------------


@dataclass(frozen=True)
class Workflow:
    """A graph of new jobs in batch order, its edges as batch positions: ``heads`` are the jobs
    with no parent inside it, ``tails`` those no job inside it waits for. Build it with
    :func:`chain` and :func:`group` (and :meth:`then`); submit it with one ``enqueue_many``."""

    jobs: tuple[NewJob, ...]
    heads: tuple[int, ...]
    tails: tuple[int, ...]

    def then(self, *steps: NewJob | Workflow) -> Workflow:
        """This, then each of ``steps`` in turn: ``group([...]).then(x)`` is a chord (x waits for all)."""
        return chain(self, *steps)


Step = NewJob | Workflow


def _single(job: NewJob) -> Workflow:
    if any(isinstance(parent, int) for parent in job.depends_on):
        raise InvalidInput("a job of a chain or group names stored parents by id; positions are the workflow's own")
    return Workflow((job,), (0,), (0,))


def _workflow(step: Step) -> Workflow:
    if isinstance(step, Workflow):
        return step
    if isinstance(step, NewJob):
        return _single(step)
    raise InvalidInput("a workflow's steps are NewJob or Workflow values")


def _shifted(flow: Workflow, offset: int, extra: tuple[int, ...]) -> list[NewJob]:
    """``flow``'s jobs placed after ``offset`` others: its positions moved on, its heads also
    waiting for ``extra`` (positions in the combined batch)."""
    jobs = []
    for index, job in enumerate(flow.jobs):
        moved = tuple(p + offset if isinstance(p, int) else p for p in job.depends_on)
        if index in flow.heads:
            moved = moved + extra
        jobs.append(replace(job, depends_on=moved))
    return jobs


def chain(*steps: Step) -> Workflow:
    """Each step starts after the previous one succeeded: ``chain(a, b, c)``."""
    if not steps:
        raise InvalidInput("a chain needs at least one step")
    flow = _workflow(steps[0])
    for step in steps[1:]:
        nxt = _workflow(step)
        offset = len(flow.jobs)
        jobs = list(flow.jobs) + _shifted(nxt, offset, flow.tails)
        flow = Workflow(tuple(jobs), flow.heads, tuple(t + offset for t in nxt.tails))
    return flow


def group(steps: Sequence[Step]) -> Workflow:
    """Steps that run side by side (a fan-out); ``.then(x)`` makes x wait for all of them."""
    if not steps:
        raise InvalidInput("a group needs at least one step")
    jobs: list[NewJob] = []
    heads: list[int] = []
    tails: list[int] = []
    for step in steps:
        flow = _workflow(step)
        offset = len(jobs)
        jobs.extend(_shifted(flow, offset, ()))
        heads.extend(h + offset for h in flow.heads)
        tails.extend(t + offset for t in flow.tails)
    return Workflow(tuple(jobs), tuple(heads), tuple(tails))
