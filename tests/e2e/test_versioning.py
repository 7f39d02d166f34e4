"""Acceptance of versioned definitions: an instance runs to its end on the definition it started with.

The whole pattern on Azurite and the durable test host (``devtools.harness``): instances start on
v1, v2 is deployed while they are in flight (the YAML changes and definitions are reloaded), new
instances start on v2, and everything finishes; each instance followed exactly its own version's
steps, agents, deadlines and compensators (``tests/e2e/versioning_support.py`` says how v1 and v2
differ). The same holds across a crash and a resume by the watchdog, across continue-as-new, and
after the v1 YAML is deleted.
"""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest

from activities.worker.handlers import faults
from devtools.harness import PatternHarness
from operator_cli.cli import main as sas
from tests.e2e import versioning_support as vs
from workflow_core.workflows import get_workflow, pin


@pytest.fixture
def h(azurite):
    faults.clear()
    vs.CALLS.clear()
    with PatternHarness(azurite, extra_workflows={vs.WORKFLOW: json.dumps(vs.v1())}) as harness:
        yield harness
    faults.clear()


def _row_status(h: PatternHarness, iid: str, step: str) -> str | None:
    row = h.steps(iid).get(step)
    return row.status.value if row else None


def _in_flight(h: PatternHarness, held, *ids: str) -> None:
    """Run until the dns work of ``ids`` is out (held by its agent): storage done, the rest to come."""
    h.run_until(lambda: len(h.held(held)) == len(ids))
    for iid in ids:
        assert (_row_status(h, iid, "storage"), _row_status(h, iid, "mail")) == ("Succeeded", "Pending")


def test_old_instances_follow_v1_and_new_ones_v2(h):
    held = h.hold("dns", times=2)
    v1 = vs.started(h, "old-ok")
    assert vs.started(h, "old-fail", fail_at="mail") == v1
    assert v1 == pin(get_workflow(vs.WORKFLOW)).version and v1.startswith("versioned@")
    _in_flight(h, held, "old-ok", "old-fail")

    vs.deploy(vs.v2())
    v2 = vs.started(h, "new-ok")
    assert vs.started(h, "new-fail", fail_at="mail") == v2
    assert v2 != v1
    h.release(held)

    vs.settle_all(h, ["old-ok", "old-fail", "new-ok", "new-fail"])
    vs.assert_followed(h, "old-ok", v1, vs.V1, failed=False)
    vs.assert_followed(h, "old-fail", v1, vs.V1, failed=True)
    vs.assert_followed(h, "new-ok", v2, vs.V2, failed=False)
    vs.assert_followed(h, "new-fail", v2, vs.V2, failed=True)
    assert h.run_until_complete("old-ok").output["status"] == "succeeded"
    assert h.run_until_complete("old-fail").output["status"] == "compensated"


def test_deleting_the_v1_yaml_does_not_break_its_instances_in_flight(h):
    held = h.hold("dns", times=2)
    v1 = vs.started(h, "orphan-ok")
    vs.started(h, "orphan-fail", fail_at="mail")
    _in_flight(h, held, "orphan-ok", "orphan-fail")
    vs.deploy(None)  # the workflow is gone from the deployment
    h.release(held)

    vs.settle_all(h, ["orphan-ok", "orphan-fail"])
    vs.assert_followed(h, "orphan-ok", v1, vs.V1, failed=False)
    vs.assert_followed(h, "orphan-fail", v1, vs.V1, failed=True)
    # A new start needs the workflow deployed again, or a stored version asked for by name.
    code, body = vs.start(h, "fresh")
    assert code == 404 and body["code"] == "unknown-workflow"
    code, body = vs.start(h, "rollback", version=v1)
    assert code == 202 and body["version"] == v1
    vs.settle_all(h, ["rollback"])
    vs.assert_followed(h, "rollback", v1, vs.V1, failed=False)


def test_a_v1_instance_resumed_after_v2_was_deployed_finishes_on_v1(h):
    """The scheduler of a v1 instance dies; v2 is deployed; the watchdog resumes the instance from
    the ledger (supervisor/instances.py, workflow_core/resume.py) on v1, not on what is deployed."""
    held = h.hold("dns")
    v1 = vs.started(h, "crash-ok")
    _in_flight(h, held, "crash-ok")  # its dns is out, its scheduler waits
    vs.started(h, "crash-fail", fail_at="mail")
    h.host.terminate("crash-ok", "the scheduler's host died")
    vs.deploy(vs.v2())
    h.release(held)

    vs.settle_all(h, ["crash-ok", "crash-fail"])
    resumes = [d for r in h.tick_reports for d in r.instance_decisions if d[2] == "resume_instance"]
    assert [d[0] for d in resumes] == ["crash-ok"]
    assert h.ledger.get_instance("crash-ok").resume_count == 1
    vs.assert_followed(h, "crash-ok", v1, vs.V1, failed=False)
    vs.assert_followed(h, "crash-fail", v1, vs.V1, failed=True)
    # the resumed orchestration carries the v1 definition, not the deployed v2
    resumed_input = h.host.get_status("crash-ok").input_
    # (dns was answered after the crash: the ledger has it, the resumed scheduler starts after it)
    assert resumed_input["version"] == v1 and resumed_input["state"]["completed"] == ["storage", "dns"]
    assert [s["id"] for s in resumed_input["definition"]["steps"]] == ["storage", "dns", "audit", "mail"]


def test_a_v1_instance_that_continues_as_new_after_v2_was_deployed_stays_on_v1(azurite):
    """v1 checkpoints after every step (continue_as_new); each new generation is started after v2
    was deployed and still runs v1, down to its compensation."""
    faults.clear()
    vs.CALLS.clear()
    with PatternHarness(azurite, extra_workflows={vs.WORKFLOW: json.dumps(vs.v1(checkpoint_every=1))}) as h:
        held = h.hold("dns", times=2)
        v1 = vs.started(h, "chain-ok")
        vs.started(h, "chain-fail", fail_at="mail")
        _in_flight(h, held, "chain-ok", "chain-fail")
        assert h.host.get_status("chain-ok").input_["state"]["generation"] == 1  # continued as new once
        vs.deploy(vs.v2(checkpoint_every=1))
        v2 = vs.started(h, "chain-new")
        h.release(held)

        vs.settle_all(h, ["chain-ok", "chain-fail", "chain-new"])
        vs.assert_followed(h, "chain-ok", v1, vs.V1, failed=False)
        vs.assert_followed(h, "chain-fail", v1, vs.V1, failed=True)
        vs.assert_followed(h, "chain-new", v2, vs.V2, failed=False)
        final = h.host.get_status("chain-ok")
        assert final.input_["state"]["generation"] == 3  # it did continue as new, three times
        assert final.input_["version"] == v1


def test_status_api_cli_and_versions_listing_show_each_instances_version(h):
    v1 = vs.started(h, "seen-1")
    vs.settle_all(h, ["seen-1"])
    held = [h.hold("dns"), h.hold("portal")]
    vs.started(h, "seen-2")
    _in_flight(h, held[0], "seen-2")
    h.host.advance(timedelta(seconds=20))  # v2 is stored later than v1
    vs.deploy(vs.v2())
    v2 = vs.started(h, "seen-3")
    h.run_until(lambda: len(h.held(held[1])) == 1)  # seen-3 (v2) is in flight too

    status = _get(h, "http_get_workflow", "workflows/seen-1", instance_id="seen-1")
    assert status["version"] == v1
    assert _get(h, "http_get_workflow", "workflows/seen-3", instance_id="seen-3")["version"] == v2

    listing = _get(h, "http_list_workflow_versions", f"workflows/{vs.WORKFLOW}/versions", name=vs.WORKFLOW)
    by_version = {v["version"]: v for v in listing["versions"]}
    assert listing["current"] == v2
    assert [v["version"] for v in listing["versions"]] == [v1, v2]  # oldest stored first
    assert (by_version[v1]["label"], by_version[v1]["instances"], by_version[v1]["stored"]) == ("1", 2, True)
    assert by_version[v1]["current"] is False and by_version[v2]["current"] is True
    assert by_version[v2]["instances"] == 1 and by_version[v2]["inFlight"] == 1
    in_flight_v1 = by_version[v1]["inFlight"]
    assert in_flight_v1 == sum(
        h.ledger.get_instance(i).status.value == "Running" for i in ("seen-1", "seen-2")
    )

    code, out, err = _sas("versions", vs.WORKFLOW, "-o", "json")
    assert code == 0, err
    cli_versions = {v["version"]: v for v in json.loads(out)["versions"]}
    assert cli_versions[v1]["instances"] == 2 and cli_versions[v2]["instances"] == 1
    code, out, err = _sas("versions", vs.WORKFLOW)
    assert code == 0 and f"{v2} (current)" in out and v1 in out
    code, out, err = _sas("show", "seen-1")
    assert code == 0 and v1 in out
    unknown = _get(h, "http_list_workflow_versions", "workflows/nope/versions", status=404, name="nope")
    assert unknown["code"] == "unknown-workflow" and vs.WORKFLOW in unknown["knownWorkflows"]
    code, out, err = _sas("versions", "nope")
    assert code == 2 and "unknown workflow 'nope'" in err

    for entry in held:
        h.release(entry)
    vs.settle_all(h, ["seen-2", "seen-3"])
    drained = _get(h, "http_list_workflow_versions", f"workflows/{vs.WORKFLOW}/versions", name=vs.WORKFLOW)
    assert {v["version"]: v["inFlight"] for v in drained["versions"]} == {v1: 0, v2: 0}
    assert {v["version"]: v["byStatus"] for v in drained["versions"]} == {
        v1: {"Succeeded": 2},
        v2: {"Succeeded": 1},
    }


def test_a_start_may_ask_for_a_stored_version_and_an_unknown_one_is_a_clear_404(h):
    v1 = vs.started(h, "first")
    vs.deploy(vs.v2())
    digest = v1.split("@")[1]
    assert vs.started(h, "by-id", version=v1) == v1
    assert vs.started(h, "by-prefix", version=digest[:8]) == v1
    assert vs.started(h, "by-label", version="1") == v1
    code, body = vs.start(h, "nope", version="0123456789abcdef")
    assert code == 404 and body["code"] == "unknown-version"
    assert body["knownVersions"] == sorted([v1, pin(get_workflow(vs.WORKFLOW)).version])
    assert body["type"].endswith(":unknown-version") and "0123456789abcdef" in body["detail"]
    assert h.ledger.find_instance("nope") is None  # nothing was recorded or started
    vs.settle_all(h, ["first", "by-id", "by-prefix", "by-label"])
    for iid in ("by-id", "by-prefix", "by-label"):
        vs.assert_followed(h, iid, v1, vs.V1, failed=False)


def _get(h: PatternHarness, function: str, path: str, *, status: int = 200, **route: str) -> dict:
    import azure.functions as func

    request = func.HttpRequest("GET", f"{h.host.base_url}/api/{path}", body=b"", route_params=route)
    response = h.host.call(function, request, client=h.host.client)
    assert response.status_code == status, response.get_body()
    return json.loads(response.get_body())


def _sas(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = sas(list(argv), stdout=out, stderr=err, read=lambda _: "")
    return code, out.getvalue(), err.getvalue()
