"""The durable client: the SDK's own ``DurableOrchestrationClient`` with only its HTTP transport
(three instance attributes) replaced by an in-process emulation of the extension's management routes
(docs/durable-test-host.md, "The durable client")."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from azure.durable_functions import DurableOrchestrationClient

from .state import TERMINAL_STATUSES, OrchestrationAlreadyExistsError

RPC_PATH = "/durabletask/"
WEBHOOK_PATH = "/runtime/webhooks/durabletask"
BAD_ARGUMENTS = "One or more of the arguments submitted is incorrect"  # the extension's 400 answer


def client_binding(*, origin: str, task_hub: str, query: str, rpc_base_url: str) -> dict:
    """The durable client binding data the extension hands to a ``durable_client_input`` function,
    for an extension reachable at ``origin`` (webhook URLs carry ``query``)."""
    base = f"{origin}{WEBHOOK_PATH}"
    instance = f"{base}/instances/INSTANCEID"
    return {
        "taskHubName": task_hub,
        "creationUrls": {
            "createNewInstancePostUri": f"{base}/orchestrators/{{functionName}}[/{{instanceId}}]?{query}",
            "createAndWaitOnNewInstancePostUri": (
                f"{base}/orchestrators/{{functionName}}[/{{instanceId}}]?timeout={{timeoutInSeconds}}"
                f"&pollingInterval={{intervalInSeconds}}&{query}"
            ),
        },
        "managementUrls": {
            "id": "INSTANCEID",
            "statusQueryGetUri": f"{instance}?{query}",
            "sendEventPostUri": f"{instance}/raiseEvent/{{eventName}}?{query}",
            "terminatePostUri": f"{instance}/terminate?reason={{text}}&{query}",
            "rewindPostUri": f"{instance}/rewind?reason={{text}}&{query}",
            "purgeHistoryDeleteUri": f"{instance}?{query}",
            "restartPostUri": f"{instance}/restart?{query}",
            "suspendPostUri": f"{instance}/suspend?reason={{text}}&{query}",
            "resumePostUri": f"{instance}/resume?reason={{text}}&{query}",
        },
        "rpcBaseUrl": rpc_base_url,
        "requiredQueryStringParameters": query,
    }


def binding_context(host: Any) -> dict:
    """The client binding data of the in-process host (its HTTP API is answered without sockets)."""
    return client_binding(
        origin=host.base_url,
        task_hub="TestHubName",
        query="taskHub=TestHubName&connection=Storage",
        rpc_base_url=f"http://127.0.0.1:17071{RPC_PATH}",
    )


class DurableTestClient(DurableOrchestrationClient):
    """``DurableOrchestrationClient`` bound to a :class:`DurableTestHost` (``host.client``, typed Any:
    host.py imports this module); its transport answers the extension's management HTTP API in
    process: ``[status_code, json_body]``."""

    def __init__(self, host: Any) -> None:
        super().__init__(json.dumps(binding_context(host)))
        self._host = host
        # The SDK's transport functions (models/utils/http_utils.py): a POST's body follows its URL;
        # trace and invocation ids are ignored.
        for method in ("POST", "GET", "DELETE"):
            setattr(self, f"_{method.lower()}_async_request", self._transport(method))

    def _transport(self, method: str) -> Any:
        async def request(url: str, data: Any = None, *_: Any, **__: Any) -> list[Any]:
            return self._handle(method, url, data if method == "POST" else None)

        return request

    def _handle(self, method: str, url: str, body: Any) -> list[Any]:
        host = self._host
        parsed = urlparse(url)
        if RPC_PATH not in parsed.path:
            return [404, ""]
        segments = [unquote(s) for s in parsed.path.split(RPC_PATH, 1)[1].split("/")] + [None, None]
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}

        with host._lock:
            if segments[0] == "orchestrators" and method == "POST" and segments[1] is not None:
                try:
                    instance_id = host._start(segments[1], segments[2] or None, body)
                except OrchestrationAlreadyExistsError as exc:
                    return [409, {"Message": str(exc)}]
                except ValueError as exc:
                    argument = {"ExceptionMessage": str(exc), "ExceptionType": "System.ArgumentException"}
                    return [400, {"Message": BAD_ARGUMENTS, **argument}]
                urls = binding_context(host)["managementUrls"]
                return [202, {key: value.replace("INSTANCEID", instance_id) for key, value in urls.items()}]

            if segments[0] != "instances":
                return [404, ""]
            instance_id, operation, event_name = segments[1] or None, segments[2], segments[3]
            if instance_id is None:
                if method != "GET":
                    return [404, ""]
                statuses = {s for s in query.get("runtimeStatus", "").split(",") if s}
                found = [i for i in host._instances.values() if not statuses or i.status.value in statuses]
                return [200, [host._status_payload(inst, precise=False) for inst in found]]

            inst = host._instances.get(instance_id)
            if operation is None and method == "DELETE":
                return self._purge(instance_id, inst)
            raising = operation == "raiseEvent" and event_name is not None
            if (operation, method) not in ((None, "GET"), ("terminate", "POST")) and not (
                raising and method == "POST"
            ):
                # purge, rewind, suspend, resume, restart: docs/durable-test-host.md, "What it does not do"
                return [501, f"{method} {operation or ''} is not supported by the durable test host"]
            if inst is None:
                return [404, ""]
            if method == "GET":
                code = 200 if inst.status in TERMINAL_STATUSES else 202
                return [code, host._status_payload(inst, precise=False)]
            if inst.status in TERMINAL_STATUSES:
                return [410, ""]
            if raising:
                host.raise_event(instance_id, event_name, json.loads(body) if isinstance(body, str) else body)
            else:
                host.terminate(instance_id, query.get("reason", ""))
            return [202, ""]

    def _purge(self, instance_id: str, inst: Any) -> list[Any]:
        """``DELETE instances/{id}`` as the extension's HTTP API answers it: 404 for an unknown instance,
        else its history and state deleted and ``200 {"instancesDeleted": 1}``. The test host refuses
        (501) a live one, whose timers and inbox it would have to unwind."""
        if inst is None:
            return [404, ""]
        if inst.status not in TERMINAL_STATUSES:
            return [501, "purging a live instance is not supported by the durable test host"]
        del self._host._instances[instance_id]
        self._host._dirty.pop(instance_id, None)
        return [200, {"instancesDeleted": 1}]
