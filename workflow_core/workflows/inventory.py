"""Which versions of a workflow exist and how many instances run on each: is an old version drained?

Instances come from the ledger's listing rows, an index: every instance it says is in flight is read
back from its record, since "0 in flight" on an old version is what an operator retires it on.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from workflow_core.ledger.instance import TERMINAL_INSTANCE_STATUSES
from workflow_core.workflows.errors import UnknownWorkflow, WorkflowDefinitionError
from workflow_core.workflows.loader import get_workflow, load_workflows
from workflow_core.workflows.store import DefinitionStore
from workflow_core.workflows.versions import pin

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
