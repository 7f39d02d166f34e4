"""The host.json to package for a Durable Functions backend: one source of truth for which backend runs.

The Functions host tells the Flex Consumption scale controller which Durable backend to scale on by
reading ``durableTask.storageProvider`` from the host.json *file*, not from app settings that
override it (every Durable Task Scheduler sample writes ``azureManaged`` in host.json itself). So the
backend is chosen when the app is packaged: the committed host.json is the Azure Storage one, and
``infra/deploy.sh`` (from the environment's ``durableBackend`` parameter) and azd's package hook (from
``DURABLE_BACKEND``) write the Durable Task Scheduler variant into what they deploy. App settings
carry only the connection, named by ``connectionStringName``.

    python3 infra/host_json.py <AzureStorage|DurableTaskScheduler> <host.json in> <host.json out>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DTS_CONNECTION = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING"
PROVIDERS: dict[str, dict[str, Any]] = {
    # as committed (a test holds them equal): ten-second polling at most, as Flex Consumption needs
    "AzureStorage": {"type": "AzureStorage", "partitionCount": 4, "maxQueuePollingInterval": "00:00:10"},
    "DurableTaskScheduler": {"type": "azureManaged", "connectionStringName": DTS_CONNECTION},
}


def for_backend(host: dict[str, Any], backend: str) -> dict[str, Any]:
    """``host`` with the storage provider of ``backend`` (ValueError for an unknown backend)."""
    if backend not in PROVIDERS:
        raise ValueError(f"unknown Durable backend {backend!r}; known: {', '.join(PROVIDERS)}")
    result = json.loads(json.dumps(host))
    result["extensions"]["durableTask"]["storageProvider"] = dict(PROVIDERS[backend])
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    backend, source, target = argv
    try:
        host = for_backend(json.loads(Path(source).read_text(encoding="utf-8")), backend)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(target).write_text(json.dumps(host, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
