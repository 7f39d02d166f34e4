"""Durable copies of every definition version an instance ever started on, keyed by its hash.

The deployed YAML is only the *current* version; an instance may run on an older one for days. So
its definition is created once, never updated, in the ledger table's partition
``~definitions~<workflow>`` (``~`` is not allowed in instance ids) under its short digest, and any
later process reads it back from there, verified against its hash, even after the YAML changed.

Which versions of a workflow exist and how many instances run on each (is an old version drained?)
comes from the ledger's listing rows, an index: every instance it says is in flight is read back from
its record, since "0 in flight" on an old version is what an operator retires it on.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import TableClient

from workflow_core import clock
from workflow_core.ledger.entities import as_utc
from workflow_core.ledger.families import DEFINITIONS_PREFIX
from workflow_core.ledger.instance import TERMINAL_INSTANCE_STATUSES
from workflow_core.workflows.errors import UnknownVersion, UnknownWorkflow, WorkflowDefinitionError
from workflow_core.workflows.loader import get_workflow, load_workflows
from workflow_core.workflows.model import WorkflowDefinition
from workflow_core.workflows.versions import (
    SEPARATOR,
    PinnedDefinition,
    cached_definition,
    from_canonical,
    pin,
    split_version,
)

log = logging.getLogger(__name__)

CHUNK_CHARS = 30_000  # under Table Storage's 32K-character string property
MAX_CHUNKS = 30  # about 900 KB: under the 1 MiB entity limit


@dataclass(frozen=True)
class StoredVersion:
    workflow: str
    version: str
    label: str | None
    stored_at: datetime | None
    sha256: str


def partition_of(workflow: str) -> str:
    return f"{DEFINITIONS_PREFIX}{workflow}"


class DefinitionStore:
    def __init__(self, table: TableClient) -> None:
        self._table = table
        self._saved: set[str] = set()
        self._lock = threading.Lock()

    def save(self, pinned: PinnedDefinition) -> bool:
        """Store the definition unless it already is; True when this call wrote it."""
        with self._lock:
            if pinned.version in self._saved:
                return False
        text = pinned.canonical
        chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
        if len(chunks) > MAX_CHUNKS:
            raise WorkflowDefinitionError(
                f"definition {pinned.version} is {len(text):,} characters as JSON; "
                f"the store holds at most {MAX_CHUNKS * CHUNK_CHARS:,}"
            )
        entity: dict[str, Any] = {
            "PartitionKey": partition_of(pinned.workflow),
            "RowKey": split_version(pinned.version)[1],
            "Workflow": pinned.workflow,
            "Version": pinned.version,
            "Sha256": pinned.sha256,
            "StoredAt": clock.utcnow(),
            "Chunks": len(chunks),
            **({"Label": pinned.label} if pinned.label else {}),
            **{f"Definition{index}": chunk for index, chunk in enumerate(chunks)},
        }
        try:
            self._table.create_entity(entity)
            log.info("stored workflow definition %s", pinned.version)
            written = True
        except ResourceExistsError:  # content-addressed: what is there is the same definition
            written = False
        with self._lock:
            self._saved.add(pinned.version)
        return written

    def get(self, version: str) -> WorkflowDefinition | None:
        if (cached := cached_definition(version)) is not None:
            return cached
        workflow, digest = split_version(version)
        try:
            entity = self._table.get_entity(partition_of(workflow), digest)
        except ResourceNotFoundError:
            return None
        text = "".join(entity.get(f"Definition{i}") or "" for i in range(int(entity.get("Chunks") or 0)))
        return from_canonical(version, text)

    def list(self, workflow: str) -> list[StoredVersion]:
        """Every stored version of ``workflow``, oldest first (without the definitions)."""
        rows = self._table.query_entities(
            "PartitionKey eq @pk",
            parameters={"pk": partition_of(workflow)},
            select=["Workflow", "Version", "Label", "StoredAt", "Sha256"],
        )
        found = [
            StoredVersion(
                workflow=row.get("Workflow") or workflow,
                version=row["Version"],
                label=row.get("Label"),
                stored_at=as_utc(row.get("StoredAt")),
                sha256=row.get("Sha256") or "",
            )
            for row in rows
        ]
        far = datetime.max.replace(tzinfo=UTC)
        return sorted(found, key=lambda v: (v.stored_at or far, v.version))


def definition_for(workflow: str, version: str | None, store: DefinitionStore | None) -> WorkflowDefinition:
    """The definition an instance pinned to ``version`` runs on, from the process cache, the current
    YAML when it still hashes to that version, or the store (no version: the current YAML)."""
    if not version:
        return get_workflow(workflow)
    if (cached := cached_definition(version)) is not None:
        return cached
    try:
        current = pin(get_workflow(workflow))
        if current.version == version:
            return current.definition
    except (UnknownWorkflow, WorkflowDefinitionError):
        pass  # the YAML went away or broke: the store still has every started version
    if (found := store.get(version) if store is not None else None) is None:
        raise UnknownVersion(workflow, version)
    return found


def resolve_reference(
    workflow: str, reference: str, store: DefinitionStore, current: PinnedDefinition | None
) -> WorkflowDefinition:
    """The definition ``?version=`` asks for: a version id, a unique digest prefix (6+ characters), or a
    label naming exactly one stored version."""
    ref = reference.strip()
    candidates = {v.version: v.label for v in store.list(workflow)}
    if current is not None:
        candidates.setdefault(current.version, current.label)
    named, sep, digest = ref.rpartition(SEPARATOR)
    if sep and named != workflow:
        raise UnknownVersion(workflow, ref, sorted(candidates))
    matches = [v for v in candidates if len(digest) >= 6 and v.rpartition(SEPARATOR)[2].startswith(digest)]
    if not matches and not sep:
        matches = [v for v, label in candidates.items() if label == ref]
    if len(matches) != 1:  # none, or an ambiguous prefix or label
        raise UnknownVersion(workflow, ref, sorted(candidates))
    (version,) = matches
    if current is not None and version == current.version:
        return current.definition
    if (found := store.get(version)) is None:
        raise UnknownVersion(workflow, ref, sorted(candidates))
    return found


_TERMINAL = {s.value for s in TERMINAL_INSTANCE_STATUSES}


@dataclass
class VersionSummary:
    version: str
    label: str | None = None
    stored_at: datetime | None = None
    current: bool = False  # the version the deployed YAML has: what a start without ?version= takes
    stored: bool = False
    instances: int = 0
    in_flight: int = 0  # not Succeeded, Compensated or Cancelled (read from the records)
    by_status: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The API's form: camelCase names, the time as ISO text, the statuses sorted."""
        shown = {
            "stored_at": self.stored_at and self.stored_at.isoformat(),
            "by_status": dict(sorted(self.by_status.items())),
        }
        return {re.sub(r"_(.)", lambda m: m[1].upper(), k): v for k, v in {**asdict(self), **shown}.items()}


def workflow_versions(workflow: str, ledger: Any, store: DefinitionStore) -> list[VersionSummary]:
    """Every known version of ``workflow``, oldest stored first, the current one flagged."""
    summaries: dict[str, VersionSummary] = {}
    for stored in store.list(workflow):
        summaries[stored.version] = VersionSummary(
            stored.version, stored.label, stored.stored_at, stored=True
        )
    broken: WorkflowDefinitionError | None = None
    try:
        current = pin(get_workflow(workflow))
        entry = summaries.setdefault(current.version, VersionSummary(current.version, current.label))
        entry.current = True
    except UnknownWorkflow:
        current = None
    except WorkflowDefinitionError as exc:  # a broken file: no current version can be told
        current, broken = None, exc
    statuses: dict[str, Counter[str]] = {}
    for row in ledger.listing_rows(workflow=workflow):
        version, status = row["Version"], row.get("ListStatus") or "?"
        if status not in _TERMINAL:  # the index may be behind: the record says where it really is
            record = ledger.find_instance(row["InstanceId"])
            if record is None or record.workflow != workflow:
                continue
            version, status = record.version, record.status.value
        statuses.setdefault(version, Counter())[status] += 1
    for version, counts in statuses.items():
        entry = summaries.setdefault(version, VersionSummary(version))
        entry.by_status = dict(counts)
        entry.instances = sum(counts.values())
        entry.in_flight = sum(n for s, n in counts.items() if s not in _TERMINAL)
    if not summaries and current is None:
        if broken is not None:
            raise broken  # "known workflows: none" would hide which file is broken
        raise UnknownWorkflow(workflow, list(load_workflows()))
    return list(summaries.values())
