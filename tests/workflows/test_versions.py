"""Definition versions: what changes a version and what does not, the hash check on every rebuild,
and the store on a real Azurite (written once, read back after the YAML is gone, large definitions,
references a rollback start may use)."""

from __future__ import annotations

import copy

import pytest

from orchestrators.state import WorkflowStart
from workflow_core.ledger import StepLedger
from workflow_core.workflows import (
    UnknownVersion,
    WorkflowDefinitionError,
    from_canonical,
    parse_workflow,
    pin,
)
from workflow_core.workflows import loader as loader_module
from workflow_core.workflows.store import (
    DefinitionStore,
    canonical_data,
    clear_version_cache,
    definition_for,
    partition_of,
    resolve_reference,
)

BASE = """
name: demo
version: "1.0"
input:
  required: [tenant_id]
  properties:
    tenant_id: {type: string}
steps:
  - id: first
    agent: storage.create
    deadline_seconds: 60
    input: {tenant_id: $input.tenant_id}
    compensation: {agent: storage.delete, deadline_seconds: 30}
  - id: second
    agent: dns.register
    deadline_seconds: 60
"""

# The same definition, written differently: comments, key order, defaults spelt out, flow style.
SAME = """
# a comment changes nothing
version: "1.0"
name: demo
steps:
  - agent: storage.create
    id: first
    name: first
    input: {tenant_id: $input.tenant_id}
    deadline_seconds: 60.0
    compensation: {deadline_seconds: 30, agent: storage.delete, retry: {max_attempts: 3}}
  - {id: second, agent: dns.register, deadline_seconds: 60, retry: {jitter: 0.1}}
input:
  properties: {tenant_id: {type: string}}
  required: [tenant_id]
history_checkpoint_every: 25
"""

CHANGES = {
    "a step added": (
        "  - id: second",
        "  - id: third\n    agent: dns.register\n    deadline_seconds: 5\n  - id: second",
    ),
    "a deadline changed": ("    deadline_seconds: 60\n    input", "    deadline_seconds: 61\n    input"),
    "an agent renamed": ("agent: dns.register", "agent: dns.register_v2"),
    "a compensator renamed": ("agent: storage.delete", "agent: storage.remove"),
    "the label changed": ('version: "1.0"', 'version: "1.1"'),
    "a retry policy changed": (
        "    deadline_seconds: 60\n    input",
        "    deadline_seconds: 60\n    retry: {max_attempts: 2}\n    input",
    ),
}


def test_the_same_meaning_has_the_same_version_and_any_change_a_new_one():
    base = pin(parse_workflow(BASE))
    assert base.version.startswith("demo@") and len(base.version) == len("demo@") + 16
    assert pin(parse_workflow(SAME)).version == base.version
    assert base.label == "1.0"
    seen = {base.version}
    for what, (old, new) in CHANGES.items():
        assert old in BASE, what
        changed = pin(parse_workflow(BASE.replace(old, new, 1))).version
        assert changed not in seen, what
        seen.add(changed)
    head, first_step = BASE.split("  - id: first")
    first_step, second_step = first_step.split("  - id: second")
    reordered = f"{head}  - id: second{second_step}  - id: first{first_step}"
    assert [s.id for s in parse_workflow(reordered).steps] == ["second", "first"]
    assert pin(parse_workflow(reordered)).version not in seen


def test_a_rebuilt_definition_is_checked_against_its_version():
    base = pin(parse_workflow(BASE))
    clear_version_cache()
    assert from_canonical(base.version, base.data) == base.definition
    assert from_canonical(base.version, base.canonical) == base.definition

    clear_version_cache()
    tampered = copy.deepcopy(base.data)
    tampered["steps"][1]["deadline_seconds"] = 600
    with pytest.raises(WorkflowDefinitionError, match="refusing to run an instance on a definition other"):
        from_canonical(base.version, tampered)
    with pytest.raises(WorkflowDefinitionError, match="is not a workflow version"):
        from_canonical("demo", base.data)
    with pytest.raises(WorkflowDefinitionError, match="refusing"):
        from_canonical(base.version.replace("demo@", "other@"), base.data)


def test_the_orchestrator_input_refuses_a_carried_definition_that_is_not_its_version():
    base = pin(parse_workflow(BASE))
    clear_version_cache()
    start = WorkflowStart(workflow="demo", version=base.version, definition=base.data)
    assert start.pinned() == base.definition
    clear_version_cache()
    tampered = copy.deepcopy(base.data)
    tampered["steps"][0]["agent"] = "storage.other"
    with pytest.raises(WorkflowDefinitionError):
        WorkflowStart(workflow="demo", version=base.version, definition=tampered).pinned()
    with pytest.raises(ValueError, match="version"):  # every start is pinned: no version, no start
        WorkflowStart.model_validate({"workflow": "demo", "definition": base.data})


@pytest.fixture
def store(azurite, unique_name):
    ledger = StepLedger.from_connection_string(
        azurite.connection_string, unique_name("steps"), unique_name("idx")
    )
    ledger.create_tables()
    yield DefinitionStore(ledger.table_client())
    ledger.close()


def test_the_store_writes_a_version_once_and_reads_it_back_verified(store):
    base = pin(parse_workflow(BASE))
    assert store.save(base) is True
    assert store.save(base) is False  # this process knows it is there
    other_process = DefinitionStore(store._table)
    assert other_process.save(base) is False  # the row exists: create refused, nothing rewritten
    clear_version_cache()
    assert store.get(base.version) == base.definition
    (listed,) = store.list("demo")
    assert (listed.version, listed.label, listed.sha256) == (base.version, "1.0", base.sha256)
    assert store.get("demo@0123456789abcdef") is None
    rows = list(store._table.query_entities("PartitionKey eq @pk", parameters={"pk": partition_of("demo")}))
    assert len(rows) == 1


def test_a_large_definition_is_stored_in_chunks(store):
    steps = "\n".join(
        f"  - id: s{i}\n    agent: storage.create\n    deadline_seconds: 60\n    description: {'x' * 900}"
        for i in range(120)
    )
    big = pin(parse_workflow(f"name: big\nsteps:\n{steps}\n"))
    assert len(big.canonical) > 100_000
    store.save(big)
    clear_version_cache()
    assert store.get(big.version) == big.definition


def test_a_pinned_version_is_found_after_its_yaml_is_gone(store, tmp_path, monkeypatch):
    (tmp_path / "demo.yaml").write_text(BASE)
    monkeypatch.setattr(loader_module, "DEFAULT_DIRECTORY", tmp_path)
    loader_module.clear_workflow_cache()
    base = pin(loader_module.get_workflow("demo"))
    store.save(base)
    (tmp_path / "demo.yaml").write_text(BASE.replace("deadline_seconds: 60", "deadline_seconds: 90"))
    loader_module.clear_workflow_cache()
    clear_version_cache()
    assert definition_for("demo", base.version, store) == base.definition  # not the new YAML
    assert definition_for("demo", None, store).steps[0].deadline_seconds == 90  # unpinned: current
    (tmp_path / "demo.yaml").unlink()
    loader_module.clear_workflow_cache()
    clear_version_cache()
    assert definition_for("demo", base.version, store) == base.definition
    with pytest.raises(UnknownVersion):
        definition_for("demo", "demo@0123456789abcdef", store)
    loader_module.clear_workflow_cache()


def test_references_a_rollback_start_may_use(store):
    one = pin(parse_workflow(BASE))
    two = pin(
        parse_workflow(BASE.replace("deadline_seconds: 60", "deadline_seconds: 61", 1))
    )  # label 1.0 too
    three = pin(parse_workflow(BASE.replace('version: "1.0"', 'version: "3"')))
    for pinned in (one, two, three):
        store.save(pinned)
    digest = one.version.split("@")[1]
    assert resolve_reference("demo", one.version, store, None) == one.definition
    assert resolve_reference("demo", digest, store, None) == one.definition
    assert resolve_reference("demo", digest[:6], store, None) == one.definition
    assert resolve_reference("demo", "3", store, None) == three.definition  # a unique label
    for bad in ("1.0", digest[:5], "other@" + digest, "demo@ffffffffffffffff", ""):  # ambiguous, short...
        with pytest.raises(UnknownVersion) as caught:
            resolve_reference("demo", bad, store, None)
        assert sorted(caught.value.known) == sorted([one.version, two.version, three.version])
    assert canonical_data(one.definition) == one.data
