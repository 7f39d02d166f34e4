"""``sas replay-check --live`` against rows in the Azure Storage provider's own format, in Azurite.

The rows are written by ``tests/task_hub_rows.py``, which follows the provider's source; the
corpus makes the round trip history -> rows -> history, and the running instances the check reads
are the corpus's histories cut where the instances still ran, and instances the durable test host
left running (a large input in the blob container, a generation after a continue-as-new).
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest

from devtools.live_history import (
    EVENT_TYPES,
    JSON_MEMBERS,
    TaskHub,
    TaskHubReader,
    escape_partition_key,
    unescape_partition_key,
)
from devtools.replay_check import load_recordings
from devtools.replay_corpus import CHAIN
from operator_cli.cli import main as sas
from operator_cli.workflow_commands import EXIT_NONDETERMINISTIC
from tests.helpers.request_counter import RequestCounter
from tests.orchestrators.test_replay_mutations import (
    copy_of_the_app,
    note_in_dispatch_input,
    replay_check_in,
    reverse_parallel_groups,
    swap_parallel_members,
    timers_a_second_later,
    waits_without_the_attempt,
)
from tests.task_hub_rows import MEMBERS, TaskHubWriter, provider_defaults, running
from workflow_core.settings import StorageConnection
from workflow_core.storage_clients import blob_container_client, table_client

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "tests" / "replay_corpus").glob("*.json"))


def _generations(path: Path) -> dict[str, list[list[dict]]]:
    by_instance: dict[str, list[list[dict]]] = {}
    for recording in load_recordings(path):
        by_instance.setdefault(recording.instance_id, []).append(recording.history)
    return by_instance


@pytest.fixture
def hub(azurite, unique_name):
    writer = TaskHubWriter(azurite.connection_string, TaskHub(unique_name("Hub")))
    yield writer
    writer.close()


def reader_for(azurite, hub: TaskHub) -> TaskHubReader:
    storage = StorageConnection(connection_string=azurite.connection_string)
    return TaskHubReader(
        hub, lambda name: table_client(storage, name), lambda name: blob_container_client(storage, name)
    )


def test_the_writer_stores_every_member_the_reader_parses_as_json():
    assert {m for members in MEMBERS.values() for m, t in members.items() if t == "json"} == JSON_MEMBERS
    assert set(MEMBERS) <= set(EVENT_TYPES)
    # the names the rows hold, at the numbers the Python SDK reads (it lacks only ExecutionRewound, 21)
    from azure.durable_functions.models.history.HistoryEventType import HistoryEventType

    assert [EVENT_TYPES[int(h)] for h in HistoryEventType] == [
        "".join(p.title() for p in h.name.split("_")) for h in HistoryEventType
    ]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_history_to_rows_to_history_round_trips_every_corpus_file(azurite, hub, path):
    """Every generation written as the provider writes it (a continue-as-new rewrites the rows from
    0 under a new ExecutionId) reads back as the recorded events: every recorded field unchanged,
    the rest the provider's defaults for members the recorder does not set."""
    reader = reader_for(azurite, hub.hub)
    try:
        for instance_id, generations in _generations(path).items():
            for number in range(1, len(generations) + 1):
                hub.write_instance(instance_id, generations[:number])
                read = reader.history(instance_id)
                recorded = generations[number - 1]
                assert len(read) == len(recorded), (instance_id, number)
                for got, want in zip(read, recorded, strict=True):
                    assert got == {**provider_defaults(want), **want}, (instance_id, number, want)
    finally:
        reader.close()


def test_rows_are_in_the_providers_format(azurite, hub):
    """What the rows hold, property by property (docs/platform.md cites each from the provider)."""
    generations = _generations(ROOT / "tests" / "replay_corpus" / "continue-as-new.json")["corpus-chain"]
    first, *_ = hub.write_instance("corpus/chain?1", generations[:1])
    second = hub.write_instance("corpus/chain?1", generations[:2])[-1]
    pk = escape_partition_key("corpus/chain?1")
    assert pk == "corpus^0chain^31" and unescape_partition_key(pk) == "corpus/chain?1"
    rows = list(hub.history.query_entities("PartitionKey eq @pk", parameters={"pk": pk}))
    sentinel = next(r for r in rows if r["RowKey"] == "sentinel")
    assert sentinel["ExecutionId"] == second and sentinel["IsCheckpointComplete"] is True
    events = [r for r in rows if r["RowKey"] != "sentinel"]
    assert [r["RowKey"] for r in events] == [f"{i:016X}" for i in range(len(events))]
    current = [r for r in events if r["ExecutionId"] == second]
    assert len(current) == len(generations[1])
    assert all(r["ExecutionId"] == first for r in events[len(current) :])  # an old generation's tail
    started = current[1]
    assert started["EventType"] == "ExecutionStarted" and started["GenerateNewTrace"] is False
    assert json.loads(started["OrchestrationInstance"])["InstanceId"] == "corpus-chain"
    assert started["Tags"] == "null" and isinstance(started["Generation"], int)
    assert hasattr(started["_Timestamp"], "tables_service_value")  # Edm.DateTime
    timer = next(r for r in current if r["EventType"] == "TimerCreated")
    assert hasattr(timer["FireAt"], "tables_service_value") and isinstance(timer["IsPlayed"], bool)
    assert {r["EventType"] for r in events} <= set(EVENT_TYPES)
    instance = hub.instances.get_entity(pk, "")
    assert instance["ExecutionId"] == second and instance["Name"] == "workflow_orchestrator"
    assert instance["Generation"] == generations[1][1]["Generation"]
    assert instance["RuntimeStatus"] == "ContinuedAsNew"  # generation 2 of 3 ended by continuing


def _live(azurite, hub: TaskHub, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = sas(
        [
            "--connection-string",
            azurite.connection_string,
            "replay-check",
            "--live",
            "--task-hub",
            hub.name,
            *args,
        ],
        stdout=out,
        stderr=err,
    )
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def running_hub(azurite):
    """Every corpus instance as it stood one episode before it finished (its current generation),
    and one finished instance the check must leave alone."""
    writer = TaskHubWriter(azurite.connection_string, TaskHub("LiveCorpus"))
    ids = []
    for path in FILES:
        for instance_id, generations in _generations(path).items():
            writer.write_instance(instance_id, [*generations[:-1], running(generations[-1])])
            ids.append(instance_id)
    writer.write_instance("finished-one", _generations(FILES[0]).popitem()[1])
    writer.write_pending("not-picked-up", "workflow_orchestrator", '{"workflow": "provision-tenant"}')
    yield writer.hub, ids
    writer.close()


def test_the_in_flight_corpus_replays_and_finished_instances_are_not_read(azurite, running_hub, monkeypatch):
    from operator_cli import workflow_commands

    monkeypatch.setattr(workflow_commands, "PROGRESS_EVERY_SECONDS", 0.0)  # a line after every instance
    hub, ids = running_hub
    code, out, err = _live(azurite, hub, "-o", "json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"] is True and sorted(r["instance"] for r in report["recordings"]) == sorted(ids)
    assert all(r["episodes"] >= 1 for r in report["recordings"]) and report["not_started"] == 1
    assert "reading the in-flight instances of task hub 'LiveCorpus'" in err
    assert f"replay-check: {len(ids)} instance(s) replayed, 0 diverge" in err
    code, out, _ = _live(azurite, hub)
    assert (
        code == 0 and f"{len(ids)} of {len(ids)} instance(s) replay on the current code; 1 not started" in out
    )


def test_filters_workflow_and_limit(azurite, running_hub):
    hub, _ = running_hub
    code, out, _ = _live(azurite, hub, "--workflow", "onboard-tenant", "-o", "json")
    assert code == 0
    instances = {r["instance"] for r in json.loads(out)["recordings"]}
    assert instances and all(i.startswith("corpus-parallel") for i in instances)
    code, out, _ = _live(azurite, hub, "--limit", "2", "-o", "json")
    assert code == 0 and len(json.loads(out)["recordings"]) == 2
    code, out, _ = _live(azurite, hub, "--created-since", "2999-01-01", "-o", "json")
    assert code == 0 and json.loads(out)["recordings"] == []
    code, out, _ = _live(azurite, hub, "--created-since", "2000-01-01T00:00:00Z", "-o", "json")
    assert code == 0 and len(json.loads(out)["recordings"]) == len(running_hub[1])


def test_the_apps_connection_settings_reach_the_task_hub():
    """A connection string, the account name, or the service URIs with an identity (``__credential``
    as the host reads it; this reader needs no queue URI)."""
    from operator_cli.workflow_commands import hub_storage

    assert hub_storage({"AzureWebJobsStorage": "UseDevelopmentStorage=true"}).connection_string
    named = hub_storage({"AzureWebJobsStorage__accountName": "stsas1"})
    assert named.table_service_uri == "https://stsas1.table.core.windows.net"
    assert named.blob_service_uri == "https://stsas1.blob.core.windows.net"
    by_uri = hub_storage(
        {
            "AzureWebJobsStorage__tableServiceUri": "https://st2.table.core.windows.net",
            "AzureWebJobsStorage__blobServiceUri": "https://st2.blob.core.windows.net",
            "AzureWebJobsStorage__credential": "managedidentity",
            "AzureWebJobsStorage__clientId": "00000000-0000-0000-0000-000000000001",
        }
    )
    assert (by_uri.table_service_uri, by_uri.blob_service_uri, by_uri.client_id) == (
        "https://st2.table.core.windows.net",
        "https://st2.blob.core.windows.net",
        "00000000-0000-0000-0000-000000000001",
    )


def test_a_read_error_exits_2(azurite, running_hub, unique_name):
    code, _, err = _live(azurite, TaskHub(unique_name("NoSuchHub")))
    assert code == 2 and "check TASK_HUB_NAME" in err, err
    code, out, err = _live(azurite, TaskHub(unique_name("NewHub")), "--new-hub-ok")  # a first deployment
    assert code == 0 and "has no tables yet: nothing in flight" in err, err
    out, err = io.StringIO(), io.StringIO()
    unreachable = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:9/devstoreaccount1"
    code = sas(["--connection-string", unreachable, "replay-check", "--live"], stdout=out, stderr=err)
    assert code == 2 and "could not read task hub" in err.getvalue(), err.getvalue()


def test_without_a_task_hub_named_the_documented_default_is_read(azurite, monkeypatch):
    monkeypatch.delenv("TASK_HUB_NAME", raising=False)
    out, err = io.StringIO(), io.StringIO()
    args = ["--connection-string", azurite.connection_string, "replay-check", "--live", "--new-hub-ok"]
    code = sas(args, stdout=out, stderr=err)
    assert code == 0 and "task hub 'SchedulerAgentSupervisor'" in err.getvalue(), err.getvalue()


def test_an_activity_inserted_before_dispatch_is_refused_naming_instance_and_episode(
    azurite, running_hub, monkeypatch
):
    from orchestrators import shortcuts

    original = shortcuts.run_step

    def run_step_with_quota(context, run, status):
        yield context.call_activity("reserve_quota", {"step_id": run.step_id})
        return (yield from original(context, run, status))

    monkeypatch.setattr(shortcuts, "run_step", run_step_with_quota)
    code, out, _ = _live(azurite, running_hub[0])
    assert code == EXIT_NONDETERMINISTIC, out
    assert "first divergence: corpus-" in out and "episode 1: action #0 differs" in out, out
    assert "reserve_quota" in out


# ---- the mutation suite (test_replay_mutations.py) against live rows ------------------------------


@pytest.mark.parametrize(
    ("mutation", "instance", "where"),
    [
        (reverse_parallel_groups, "corpus-parallel", "sub-orchestration 'step_orchestrator'"),
        (note_in_dispatch_input, "corpus-", "(.note: "),
        (timers_a_second_later, "corpus-", "recorded: timer"),
        (waits_without_the_attempt, "corpus-late-result", "where the recorded run took none"),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else None,
)
def test_each_breaking_change_is_refused_on_live_rows(
    azurite, running_hub, monkeypatch, mutation, instance, where
):
    """Exit 4, naming the first divergent instance and the episode, as for the recorded files."""
    mutation(monkeypatch)
    code, out, _ = _live(azurite, running_hub[0])
    assert code == EXIT_NONDETERMINISTIC, out
    first = next(line for line in out.splitlines() if line.startswith("first divergence: corpus-"))
    assert ": episode " in first and "action" in first, first
    assert any("NON-DETERMINISTIC  live: " in line and f" {instance}" in line for line in out.splitlines()), (
        out
    )
    assert where in out, out


def test_safe_changes_pass_on_live_rows(azurite, running_hub, monkeypatch, tmp_path):
    """A custom status worded otherwise (in memory), and the parallel members swapped in the YAML of
    a copy of the code, checked by ``python -m operator_cli replay-check --live`` from that copy:
    pinned instances replay on their own definition."""
    from orchestrators import workflow

    original = workflow.Status.__call__
    monkeypatch.setattr(
        workflow.Status,
        "__call__",
        lambda self, phase, attempt=None, until=None: original(self, phase.upper(), attempt, until),
    )
    assert _live(azurite, running_hub[0])[0] == 0
    copy = copy_of_the_app(tmp_path)
    swap_parallel_members(copy)
    hub = running_hub[0].name
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)  # the copy's settings
    done = replay_check_in(copy, "--live", "--task-hub", hub, "--workflow", "onboard-tenant")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok  live: step_orchestrator corpus-parallel" in done.stdout, done.stdout


# ---- instances the durable test host left running -------------------------------------------------

BIG_CHAIN = {  # corpus-chain's three steps, each carrying a note too large for a table property
    **CHAIN,
    "name": "big-chain",
    "input": {
        "required": ["tenant_id", "notes"],
        "properties": {"tenant_id": {"type": "string"}, "notes": {"type": "string"}},
    },
    "steps": [
        {**s, "input": {"tenant_id": "$input.tenant_id", "notes": "$input.notes"}} for s in CHAIN["steps"]
    ],
}


def test_instances_left_running_by_the_local_host(azurite, unique_name, monkeypatch):
    """A provision-tenant waiting on its DNS step, and a big-chain in its third generation (two
    continue-as-new before it) whose input and dispatch are over the table limit, so in the
    large-message container: written as the provider writes them, they replay on this code; an
    activity inserted before each dispatch is refused naming the instance and the episode."""
    from devtools.durable_host import FlowingClock
    from devtools.harness import PatternHarness

    with PatternHarness(azurite, clock=FlowingClock(), extra_workflows={"big-chain": BIG_CHAIN}) as h:
        dns, third = h.hold("register_dns"), h.hold("s3")
        tenant = {"tenant_id": "live-t1", "admin_email": "admin@live.example"}
        waiting = h.start_workflow("provision-tenant", tenant, instance_id="live-tenant")
        big = h.start_workflow(
            "big-chain", {"tenant_id": "live-t2", "notes": "n" * 40_000}, instance_id="live-big"
        )
        h.run_until(lambda: len(h.held(dns)) == 1 and len(h.held(third)) == 1)
        histories = {iid: h.host.histories(iid) for iid in (waiting, big)}
    assert len(histories[big]) == 3 and len(histories[waiting]) == 1
    writer = TaskHubWriter(azurite.connection_string, TaskHub(unique_name("Left")))
    try:
        for iid, generations in histories.items():
            writer.write_instance(iid, generations)
        assert any(
            "/history-" in n and "-ExecutionStarted-" in n and n.endswith("-Input.json.gz")
            for n in writer.blobs_written
        )
        with RequestCounter() as counter:
            code, out, err = _live(azurite, writer.hub, "-o", "json")
        assert code == 0, out + err
        # The cost docs/scheduler.md gives: one query for the list, one per instance's history, one
        # download per payload in a blob (this generation's input and its dispatch's input).
        made = Counter((r.service, r.op, r.resource) for r in counter.requests)
        hub = writer.hub
        assert made == {
            ("table", "query", hub.instances_table): 1,
            ("table", "query", hub.history_table): 2,
            ("blob", "download", hub.large_messages): 2,
        }, made
        report = {r["instance"]: r for r in json.loads(out)["recordings"]}
        assert set(report) == {"live-tenant", "live-big"}
        assert report["live-big"]["recording"].endswith("(generation 3)")
        assert all(r["ok"] and r["actions"] > 0 for r in report.values())

        from orchestrators import shortcuts

        original = shortcuts.run_step

        def run_step_with_quota(context, run, status):
            yield context.call_activity("reserve_quota", {"step_id": run.step_id})
            return (yield from original(context, run, status))

        monkeypatch.setattr(shortcuts, "run_step", run_step_with_quota)
        code, out, _ = _live(azurite, writer.hub)
        assert code == EXIT_NONDETERMINISTIC, out
        assert "first divergence: live-" in out and "episode 1: action #0 differs" in out, out
        assert "NON-DETERMINISTIC  live: workflow_orchestrator live-big (generation 3)" in out, out
    finally:
        writer.close()
