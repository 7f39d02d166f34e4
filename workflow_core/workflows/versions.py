"""Content-addressed versions of workflow definitions: ``provision-tenant@3f9a0c1d2e4b5a69``.

A version is a hash of the *canonical JSON* (every default filled in, keys sorted): two files that
mean the same thing have the same version, any change that could alter a run gives a new one. The
pinned definition travels in the orchestration input and is rebuilt here, verified against its hash,
without I/O, so a replay never reads the YAML deployed *now*.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from workflow_core.workflows.errors import WorkflowDefinitionError
from workflow_core.workflows.model import WorkflowDefinition

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
    canonical = json.dumps(
        canonical_data(definition), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    sha = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    pinned = PinnedDefinition(f"{definition.name}{SEPARATOR}{sha[:DIGEST_CHARS]}", definition, canonical, sha)
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
