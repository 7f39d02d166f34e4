#!/usr/bin/env sh
# Before publishing: replay every in-flight instance of the task hub on the code about to be published,
# and refuse when one would break (`sas replay-check --live`, docs/scheduler.md "Live instances").
#
#   infra/replay-check.sh <environment> <storage-account> <task-hub> <durable-backend>
#
# Run by infra/deploy.sh before it publishes and by azd's predeploy service hook (azure.yaml).
# On when SAS_REPLAY_CHECK=true, off when false; unset: on for the production environment (prod).
# Reads the task hub's tables and blobs with the deployer's identity (az login / azd auth login):
# it needs Storage Table Data Reader and Storage Blob Data Reader on the account. The CLI runs from
# this checkout's .venv (./scripts/bootstrap), or SAS_PYTHON.
set -eu

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
environment="${1:-}" account="${2:-}" hub="${3:-}" backend="${4:-AzureStorage}"
say() { printf '==> replay check: %s\n' "$*" >&2; }

case "${SAS_REPLAY_CHECK:-}" in
  true) ;;
  false) say "off (SAS_REPLAY_CHECK=false)"; exit 0 ;;
  "") [ "$environment" = prod ] || { say "off for $environment (SAS_REPLAY_CHECK=true runs it)"; exit 0; } ;;
  *) say "SAS_REPLAY_CHECK must be true or false, not '$SAS_REPLAY_CHECK'"; exit 2 ;;
esac
if [ "$backend" != AzureStorage ]; then
  say "skipped: it reads the Azure Storage backend's history rows, not $backend's (docs/scheduler.md)"
  exit 0
fi
[ -n "$account" ] || { say "no storage account: provision the environment first"; exit 2; }
python="${SAS_PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$python" ] || command -v "$python" >/dev/null 2>&1 ||
  { say "needs the project's Python with its packages ($python): run ./scripts/bootstrap, or set SAS_PYTHON"; exit 2; }

say "replaying the in-flight instances of task hub $hub (account $account) on this code"
status=0
(cd "$ROOT" && AzureWebJobsStorage="" AzureWebJobsStorage__accountName="$account" TASK_HUB_NAME="$hub" \
  "$python" -m operator_cli replay-check --live --new-hub-ok) || status=$?
case "$status" in
  0) say "every in-flight instance replays" ;;
  4) say "refusing to publish: the instance above no longer replays on this code (drain it, or keep the old"
     say "code path until it finishes: docs/scheduler.md); SAS_REPLAY_CHECK=false publishes anyway"
     exit 4 ;;
  *) say "refusing to publish: the task hub could not be read (exit $status, above); SAS_REPLAY_CHECK=false"
     say "publishes without the check"
     exit "$status" ;;
esac
