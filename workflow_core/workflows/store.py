"""Content-addressed versions of workflow definitions (``provision-tenant@3f9a0c1d2e4b5a69``), and
durable copies of every version an instance ever started on (docs/scheduler.md, "Versions").

The pinned definition travels in the orchestration input and is rebuilt here, verified against its
hash, without I/O, so a replay never reads the YAML deployed *now*. Its copy is created once, never
updated, in the ledger table's partition ``~definitions~<workflow>`` (``~`` is not allowed in instance
ids) under its short digest, so any later process reads it back, verified, after the YAML changed.

Which versions of a workflow exist and how many instances run on each (is an old version drained?)
comes from the ledger's listing rows, an index: every instance it says is in flight is read back from
its record, since "0 in flight" on an old version is what an operator retires it on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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

log = logging.getLogger(__name__)

SEPARATOR = "@"
DIGEST_CHARS = 16  # 64 bits of SHA-256: collisions between versions of one workflow are not a concern
_CACHE_LIMIT = 256

_cache: dict[str, WorkflowDefinition] = {}
_lock = threading.Lock()


def canonical_data(definition: WorkflowDefinition) -> dict[str, Any]:
    """The definition as plain JSON data, every default explicit (what is hashed and stored)."""
    return definition.model_dump(mode="json", by_alias=True)


def split_version(version: str) -> tuple[str, str]:
    workflow, sep, digest = version.rpartition(SEPARATOR)
    if not sep or not workflow or len(digest) != DIGEST_CHARS or not set(digest) <= set("0123456789abcdef"):
        raise WorkflowDefinitionError(
            f"{version!r} is not a workflow version "
            f"(expected <workflow>{SEPARATOR}<{DIGEST_CHARS} hex digits>)"
        )
    return workflow, digest


@dataclass(frozen=True)
class PinnedDefinition:
    version: str
    definition: WorkflowDefinition
    canonical: str
    sha256: str

    @property
    def workflow(self) -> str:
        return self.definition.name

    @property
    def label(self) -> str | None:
        return self.definition.version

    @property
    def data(self) -> dict[str, Any]:
        """What the orchestration input carries (``WorkflowStart.definition``)."""
        return json.loads(self.canonical)


def pin(definition: WorkflowDefinition) -> PinnedDefinition:
    """The version of ``definition``, remembered so a later lookup by version costs nothing."""
    text = json.dumps(canonical_data(definition), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    pinned = PinnedDefinition(f"{definition.name}{SEPARATOR}{sha[:DIGEST_CHARS]}", definition, text, sha)
    with _lock:
        if pinned.version not in _cache and len(_cache) >= _CACHE_LIMIT:
            _cache.pop(next(iter(_cache)))
        _cache[pinned.version] = definition
    return pinned


def version_of(definition: WorkflowDefinition) -> str:
    return pin(definition).version


def from_canonical(version: str, data: dict[str, Any] | str) -> WorkflowDefinition:
    """Rebuild ``version``'s definition; pure and cached, as the orchestrator calls it on every replay.
    Data that does not hash to the version (a corrupted input or row) raises, never runs."""
    if (cached := cached_definition(version)) is not None:
        return cached
    split_version(version)
    parsed = json.loads(data) if isinstance(data, str) else data
    try:
        definition = WorkflowDefinition.model_validate(parsed)
    except Exception as exc:
        raise WorkflowDefinitionError(f"stored definition of {version} does not validate: {exc}") from None
    # Hash what the data *means* (re-dumped), so a caller's dict order or spacing cannot matter; pinned,
    # it is remembered under the version it really has.
    if (actual := pin(definition).version) != version:
        raise WorkflowDefinitionError(
            f"definition carried for {version} hashes to {actual}: refusing "
            "to run an instance on a definition other than the one it was pinned to"
        )
    return definition


def cached_definition(version: str) -> WorkflowDefinition | None:
    with _lock:
        return _cache.get(version)


def clear_version_cache() -> None:
    """Forget rebuilt definitions (tests)."""
    with _lock:
        _cache.clear()


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

    @classmethod
    def of(cls, ledger: Any) -> DefinitionStore:
        """The store in ``ledger``'s table (``Services.definitions``; tools reach no table directly)."""
        return cls(ledger.table_client())

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
    # the YAML may have gone away or broken: the store still has every started version
    with contextlib.suppress(UnknownWorkflow, WorkflowDefinitionError):
        if (current := pin(get_workflow(workflow))).version == version:
            return current.definition
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
    stored = store.list(workflow)
    summaries = {v.version: VersionSummary(v.version, v.label, v.stored_at, stored=True) for v in stored}
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
