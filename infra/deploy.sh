#!/usr/bin/env bash
# Provision one environment of the Scheduler Agent Supervisor and publish the code to it.
#
#   infra/deploy.sh <env> <resource-group> <location> [--what-if] [--skip-publish] [--[no-]replay-check]
#   infra/deploy.sh --package-only [zip-path] [--durable-backend AzureStorage|DurableTaskScheduler]
#   infra/deploy.sh --host-json AzureStorage|DurableTaskScheduler   (azd's prepackage hook)
#   infra/deploy.sh --restore-host-json                             (azd's postpackage hook)
#
#   <env>            picks infra/main.<env>.bicepparam (dev, prod, ...)
#   <resource-group> created (or reused) in <location>; every resource lands there
#   --what-if        show what the deployment would change; create nothing but the resource group
#   --skip-publish   provision only, do not publish the code
#   --replay-check   before publishing, replay the task hub's in-flight instances on this code and
#                    refuse on a divergence (infra/replay-check.sh; SAS_REPLAY_CHECK=true|false);
#                    on by default when the parameter file's environmentName is 'prod'
#   --package-only   only build the deployment zip (the app's source, no dependencies),
#                    default path: ./app-package.zip; needs no Azure login
#   --host-json      save ./host.json to .azure/host.json.committed (restoring a copy a failed
#                    package left first), then write ./host.json for that Durable backend
#   --restore-host-json  put the saved .azure/host.json.committed back (no-op without one)
#
# The packaged host.json names the Durable backend (infra/host_json.py): the environment's
# durableBackend parameter (its .bicepparam) when deploying, --durable-backend with --package-only.
#
# Publishing is always a remote build: the source zip goes to `az functionapp deployment source
# config-zip --build-remote true`, and the platform installs requirements.txt (for a Python app on Flex
# Consumption the Azure CLI builds remotely whatever you ask: enable_zip_deploy_flex in azure-cli).
# Each logicApp agent pool's Logic App then gets examples/logic-app-agent (`az logicapp deployment source
# config-zip`; docs/agents.md, "A Logic App as an agent").
# Needs the Azure CLI (az login; az account set -s <subscription>). The deployer needs Contributor + User
# Access Administrator (or Role Based Access Control Administrator) on the resource group: the template
# creates role assignments.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# A fresh folder under $WORK (removed on exit).
workdir() { mktemp -d "$WORK/XXXXXX"; }

usage() {
  sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Copy the app (not tests, infra, virtualenvs, caches, local settings, nor what .funcignore lists) into a
# staging folder.
stage_app() {
  local stage="$1" backend="$2"
  "$PYTHON" - "$ROOT" "$stage" <<'PY'
import fnmatch
import os
import shutil
import sys

root, stage = sys.argv[1], sys.argv[2]
EXCLUDE = [
    ".git", ".github", ".ci", ".azure", ".vscode", ".idea", ".venv", ".venv-*", "venv", "node_modules",
    "tests", "infra", "docs", "bench", "scripts", ".python_packages", "__pycache__", "*.pyc",
    ".pytest_cache", ".ruff_cache", ".hypothesis", ".mypy_cache", "local.settings.json",
    "__blobstorage__", "__queuestorage__", "__azurite_db_*", "package.json", "package-lock.json",
    "azure.yaml", "*.zip", ".gitignore", ".funcignore", ".DS_Store",
]

# What azd leaves out of its package (.funcignore) is left out of this one too.
funcignore = os.path.join(root, ".funcignore")
if os.path.isfile(funcignore):
    with open(funcignore, encoding="utf-8") as lines:
        EXCLUDE += [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def ignore(_directory, names):
    return [n for n in names if any(fnmatch.fnmatch(n, pattern) for pattern in EXCLUDE)]


shutil.copytree(root, stage, ignore=ignore, dirs_exist_ok=True)
PY
  [[ -f "$stage/function_app.py" && -f "$stage/host.json" && -f "$stage/requirements.txt" ]] ||
    die "the app needs function_app.py, host.json and requirements.txt at the repository root"
  "$PYTHON" "$ROOT/infra/host_json.py" "$backend" "$stage/host.json" "$stage/host.json" ||
    die "cannot write host.json for the Durable backend $backend"
}

# The environment's Durable backend: its .bicepparam's durableBackend, else main.bicep's default.
durable_backend_of() {
  local value
  value="$(sed -n "s/^param durableBackend = '\([A-Za-z]*\)'.*/\1/p" "$1")"
  echo "${value:-AzureStorage}"
}

# Zip the app's source (no dependencies: the remote build installs requirements.txt on the platform).
# Zip the folder $1 into $2, its paths relative to it.
zip_folder() {
  "$PYTHON" - "$1" "$2" <<'PY'
import os
import sys
import zipfile

app, zip_path = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
    for folder, dirs, files in os.walk(app):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(folder, name)
            archive.write(path, os.path.relpath(path, app))
PY
}

build_zip() {
  local zip_path="$1" backend="$2" stage
  stage="$(workdir)"
  stage_app "$stage/app" "$backend"
  zip_folder "$stage/app" "$zip_path"
  log "built $zip_path ($(du -h "$zip_path" | cut -f1); Durable backend $backend)"
}

publish() {
  local group="$1" app_name="$2" backend="$3" zip_dir
  zip_dir="$(workdir)"
  build_zip "$zip_dir/app.zip" "$backend"
  log "publishing to $app_name (remote build: the platform installs requirements.txt)"
  az functionapp deployment source config-zip \
    --resource-group "$group" --name "$app_name" --src "$zip_dir/app.zip" --build-remote true --output none
}

# The Logic App of each logicApp pool (output agentPoolLogicApps) gets the example's workflow project.
publish_logic_apps() {
  local group="$1" deployment="$2" name zip_dir
  for name in $(az deployment group show --resource-group "$group" --name "$deployment" \
    --query 'properties.outputs.agentPoolLogicApps.value[].logicAppName' --output tsv); do
    zip_dir="$(workdir)"
    zip_folder "$ROOT/examples/logic-app-agent" "$zip_dir/logic-app.zip"
    log "publishing examples/logic-app-agent to the Logic App $name"
    az logicapp deployment source config-zip \
      --resource-group "$group" --name "$name" --src "$zip_dir/logic-app.zip" --output none
  done
}

main() {
  local what_if=false skip_publish=false package_only=false backend="" host_json="" restore=false
  local positional=()
  while (($#)); do
    case "$1" in
      --what-if) what_if=true ;;
      --skip-publish) skip_publish=true ;;
      --replay-check) export SAS_REPLAY_CHECK=true ;;
      --no-replay-check) export SAS_REPLAY_CHECK=false ;;
      --package-only) package_only=true ;;
      --durable-backend) shift; backend="${1:-}" ;;
      --host-json) shift; host_json="${1:-}"; [[ -n "$host_json" ]] || usage ;;
      --restore-host-json) restore=true ;;
      -h | --help) usage 0 ;;
      -*) printf 'unknown option: %s\n' "$1" >&2; usage ;;
      *) positional+=("$1") ;;
    esac
    shift
  done

  local saved="$ROOT/.azure/host.json.committed"
  if $restore || [[ -n "$host_json" ]]; then
    # A copy left by a package that failed before postpackage ran is the committed file: put it back.
    if [[ -f "$saved" ]]; then
      mv -f "$saved" "$ROOT/host.json"
      log "host.json: restored the committed file"
    fi
    $restore && return
    mkdir -p "$ROOT/.azure"
    cp "$ROOT/host.json" "$saved"
    "$PYTHON" "$ROOT/infra/host_json.py" "$host_json" "$ROOT/host.json" "$ROOT/host.json" || {
      mv -f "$saved" "$ROOT/host.json"
      die "cannot write host.json for the Durable backend $host_json"
    }
    log "host.json: Durable backend $host_json (committed file saved to .azure/host.json.committed)"
    return
  fi
  if $package_only; then
    local zip_path="${positional[0]:-$ROOT/app-package.zip}"
    build_zip "$(cd "$(dirname "$zip_path")" && pwd)/$(basename "$zip_path")" "${backend:-AzureStorage}"
    return
  fi

  ((${#positional[@]} == 3)) || usage
  local env="${positional[0]}" group="${positional[1]}" location="${positional[2]}"
  local params="infra/main.${env}.bicepparam"
  cd "$ROOT"
  [[ -f "$params" ]] || die "no parameter file $params (have: $(cd infra && ls main.*.bicepparam | tr '\n' ' '))"
  command -v az >/dev/null 2>&1 || die "the Azure CLI (az) is required"
  az account show --query name --output tsv >/dev/null || die "not logged in: run 'az login'"
  # Role assignments name the principal's type; ARM refuses one that does not match the principal
  # (UnmatchedPrincipalType). A CI login is a service principal, a person's a user.
  local principal_type
  case "$(az account show --query user.type --output tsv)" in
    servicePrincipal) principal_type=ServicePrincipal ;;
    *) principal_type=User ;;
  esac

  log "resource group $group in $location"
  az group create --name "$group" --location "$location" \
    --tags workload=scheduler-agent-supervisor "environment=$env" --output none

  if $what_if; then
    # No --template-file: the .bicepparam's `using` line names infra/main.bicep (older CLIs reject both).
    log "what-if: $params (using infra/main.bicep)"
    az deployment group what-if --resource-group "$group" --parameters "$params" \
      --parameters "principalType=$principal_type"
    return
  fi

  local deployment
  deployment="sas-${env}-$(date -u +%Y%m%d%H%M%S)"
  log "deploying $params (using infra/main.bicep; deployment $deployment)"
  az deployment group create --resource-group "$group" --name "$deployment" \
    --parameters "$params" --parameters "principalType=$principal_type" --output none

  local app_name starter_url
  app_name="$(az deployment group show --resource-group "$group" --name "$deployment" \
    --query properties.outputs.functionAppName.value --output tsv)"
  starter_url="$(az deployment group show --resource-group "$group" --name "$deployment" \
    --query properties.outputs.workflowStarterUrl.value --output tsv)"
  [[ -n "$app_name" ]] || die "deployment $deployment has no functionAppName output"

  if ! $skip_publish; then
    local account hub
    account="$(az deployment group show --resource-group "$group" --name "$deployment" \
      --query properties.outputs.storageAccountName.value --output tsv)"
    hub="$(az deployment group show --resource-group "$group" --name "$deployment" \
      --query properties.parameters.taskHubName.value --output tsv)"
    "$ROOT/infra/replay-check.sh" "$(sed -n "s/^param environmentName = '\([^']*\)'.*/\1/p" "$params")" \
      "$account" "${hub:-SchedulerAgentSupervisor}" "$(durable_backend_of "$params")" ||
      die "not published: the replay check refused (above)"
    publish "$group" "$app_name" "$(durable_backend_of "$params")"
    publish_logic_apps "$group" "$deployment"
  fi
  log "function app: $app_name"
  log "start a workflow: POST $starter_url"
}

main "$@"
