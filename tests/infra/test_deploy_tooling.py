"""The deployment tooling around the Bicep: infra/deploy.sh (run against stub `az` / `func` commands that
record their arguments), azure.yaml for `azd up`, the azd parameter file and the checkov setup."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.infra import bicep_checks as bc

ROOT = bc.INFRA_DIR.parent
DEPLOY = bc.INFRA_DIR / "deploy.sh"
APP_NAME = "func-sas-dev-abc123"
STARTER_URL = f"https://{APP_NAME}.azurewebsites.net/api/workflows/{{name}}"

AZ_STUB = f"""#!/usr/bin/env bash
echo "az $*" >> "$STUB_LOG"
case "$*" in
  *"config-zip"*) src="$(echo "$*" | sed 's/.*--src \\([^ ]*\\).*/\\1/')"
    python3 -c "import sys, zipfile; print(' '.join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))" \\
      "$src" >> "$STUB_LOG" ;;
  "account show --query user.type"*) echo "${{STUB_USER_TYPE:-user}}" ;;
  "account show"*) echo "test-subscription" ;;
  *"deployment group show"*agentPoolLogicApps*) echo "${{STUB_LOGIC_APPS:-}}" ;;
  *"deployment group show"*functionAppName*) echo "{APP_NAME}" ;;
  *"deployment group show"*workflowStarterUrl*) echo "{STARTER_URL}" ;;
esac
"""
FUNC_STUB = """#!/usr/bin/env bash
echo "func $*" >> "$STUB_LOG"
"""


@pytest.fixture
def fake_repo(tmp_path: Path) -> Path:
    """A repository copy with just what deploy.sh touches, plus clutter that must not be published."""
    repo = tmp_path / "repo"
    (repo / "infra").mkdir(parents=True)
    shutil.copy2(DEPLOY, repo / "infra" / "deploy.sh")
    shutil.copy2(bc.INFRA_DIR / "replay-check.sh", repo / "infra" / "replay-check.sh")
    for param_file in bc.INFRA_DIR.glob("main.*.bicepparam"):
        shutil.copy2(param_file, repo / "infra" / param_file.name)
    (repo / "infra" / "main.bicep").write_text("// stub\n", encoding="utf-8")
    (repo / "function_app.py").write_text("app = None\n", encoding="utf-8")
    shutil.copy2(ROOT / "host.json", repo / "host.json")
    shutil.copy2(bc.INFRA_DIR / "host_json.py", repo / "infra" / "host_json.py")
    (repo / "requirements.txt").write_text("azure-functions\n", encoding="utf-8")
    (repo / "workflow_core").mkdir()
    (repo / "workflow_core" / "__init__.py").write_text("", encoding="utf-8")
    for clutter in ("tests", ".venv", ".venv-infra", "node_modules", "docs"):
        (repo / clutter).mkdir()
        (repo / clutter / "x.txt").write_text("x", encoding="utf-8")
    (repo / "local.settings.json").write_text("{}", encoding="utf-8")
    (repo / "devtools").mkdir()
    (repo / "devtools" / "x.py").write_text("", encoding="utf-8")
    (repo / ".funcignore").write_text("# as azd reads it\ndevtools/\nexamples/\n", encoding="utf-8")
    shutil.copytree(ROOT / "examples" / "logic-app-agent", repo / "examples" / "logic-app-agent")
    return repo


def _run(
    repo: Path,
    tmp_path: Path,
    *args: str,
    with_func: bool = True,
    user_type: str = "user",
    logic_apps: str = "",
) -> tuple[subprocess.CompletedProcess, list]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "az").write_text(AZ_STUB, encoding="utf-8")
    (bin_dir / "az").chmod(0o755)
    if with_func:
        (bin_dir / "func").write_text(FUNC_STUB, encoding="utf-8")
        (bin_dir / "func").chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "STUB_USER_TYPE": user_type,
        "STUB_LOGIC_APPS": logic_apps,
    }
    result = subprocess.run(
        ["bash", str(repo / "infra" / "deploy.sh"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result, log.read_text(encoding="utf-8").splitlines()


def test_deploy_script_is_valid_bash():
    assert DEPLOY.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in DEPLOY.read_text(encoding="utf-8")
    assert os.access(DEPLOY, os.X_OK)
    subprocess.run(["bash", "-n", str(DEPLOY)], check=True)


def test_what_if_previews_and_changes_nothing(fake_repo, tmp_path):
    result, calls = _run(fake_repo, tmp_path, "dev", "rg-sas-dev", "westeurope", "--what-if")
    assert result.returncode == 0, result.stderr
    assert calls[0].startswith("az account show")
    assert calls[1] == "az account show --query user.type --output tsv"
    assert calls[2].startswith("az group create --name rg-sas-dev --location westeurope")
    # The .bicepparam names the template (`using`): no --template-file beside it.
    assert calls[3] == (
        "az deployment group what-if --resource-group rg-sas-dev --parameters infra/main.dev.bicepparam "
        "--parameters principalType=User"
    )
    assert len(calls) == 4


def test_deploy_provisions_then_publishes_the_source_for_a_remote_build(fake_repo, tmp_path):
    result, calls = _run(fake_repo, tmp_path, "dev", "rg-sas-dev", "westeurope")
    assert result.returncode == 0, result.stderr
    create = [c for c in calls if c.startswith("az deployment group create")]
    assert len(create) == 1
    assert re.fullmatch(
        r"az deployment group create --resource-group rg-sas-dev --name sas-dev-\d{14} "
        r"--parameters infra/main\.dev\.bicepparam --parameters principalType=User --output none",
        create[0],
    )
    # One publishing path whether or not `func` is installed: zip deploy with a remote build.
    assert not any(c.startswith("func ") for c in calls)
    (publish,) = [c for c in calls if "config-zip" in c]
    assert re.fullmatch(
        rf"az functionapp deployment source config-zip --resource-group rg-sas-dev --name {APP_NAME} "
        r"--src \S+/app\.zip --build-remote true --output none",
        publish,
    )
    # The zip holds the source only: no tests, virtualenvs or local settings, and no .python_packages.
    staged = calls[calls.index(publish) + 1].split()
    assert set(staged) == {"function_app.py", "host.json", "requirements.txt", "workflow_core/__init__.py"}
    assert calls.index(create[0]) < calls.index(publish)
    assert STARTER_URL in result.stderr


def test_each_logic_app_pool_gets_the_example_workflow_after_the_app(fake_repo, tmp_path):
    apps = "logic-a\nlogic-b"  # az ... --output tsv: one name a line
    result, calls = _run(fake_repo, tmp_path, "dev", "rg-sas-dev", "westeurope", logic_apps=apps)
    assert result.returncode == 0, result.stderr
    zips = [c for c in calls if c.startswith("az logicapp deployment source config-zip")]
    assert [re.search(r"--name (\S+)", c).group(1) for c in zips] == ["logic-a", "logic-b"]
    for call in zips:
        assert re.fullmatch(
            r"az logicapp deployment source config-zip --resource-group rg-sas-dev --name logic-[ab] "
            r"--src \S+/logic-app\.zip --output none",
            call,
        )
        staged = set(calls[calls.index(call) + 1].split())
        assert {"host.json", "connections.json", "parameters.json", "work-agent/workflow.json"} <= staged
    app_zip = next(c for c in calls if c.startswith("az functionapp deployment source config-zip"))
    assert calls.index(app_zip) < calls.index(zips[0])  # the app first: it answers the workflow


def test_package_only_builds_the_source_zip_without_dependencies(fake_repo, tmp_path):
    result, calls = _run(fake_repo, tmp_path, "--package-only", str(tmp_path / "out.zip"))
    assert result.returncode == 0, result.stderr
    assert calls == []
    names = zipfile.ZipFile(tmp_path / "out.zip").namelist()
    assert sorted(names) == ["function_app.py", "host.json", "requirements.txt", "workflow_core/__init__.py"]


def test_skip_publish(fake_repo, tmp_path):
    result, calls = _run(fake_repo, tmp_path, "prod", "rg-sas-prod", "swedencentral", "--skip-publish")
    assert result.returncode == 0, result.stderr
    assert any("--parameters infra/main.prod.bicepparam" in c for c in calls)
    assert not any("config-zip" in c for c in calls)


def test_unknown_environment_is_refused_before_touching_azure(fake_repo, tmp_path):
    result, calls = _run(fake_repo, tmp_path, "qa", "rg-sas-qa", "westeurope")
    assert result.returncode != 0
    assert "no parameter file infra/main.qa.bicepparam" in result.stderr
    assert calls == []


def test_wrong_arguments_print_usage(fake_repo, tmp_path):
    result, calls = _run(fake_repo, tmp_path, "dev")
    assert result.returncode == 2
    assert "infra/deploy.sh <env> <resource-group> <location>" in result.stdout + result.stderr
    assert calls == []


def test_no_template_file_beside_a_bicepparam_anywhere():
    commands = []
    for path in (DEPLOY, ROOT / "docs" / "deploy.md", bc.INFRA_DIR / "main.bicep"):
        text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))  # join continuation lines
        commands += re.findall(r"az deployment group (?:create|what-if)[^\n`]*", text)
    assert len(commands) >= 5
    for command in commands:
        assert "--parameters" in command or "..." in command, command
        assert "--template-file" not in command, command


def test_azure_yaml_for_azd():
    text = (ROOT / "azure.yaml").read_text(encoding="utf-8")
    assert "remote build" in text
    config = yaml.safe_load(text)
    assert config["infra"] == {"provider": "bicep", "path": "infra", "module": "main"}
    service = {k: v for k, v in config["services"]["api"].items() if k != "hooks"}
    assert service == {"project": ".", "language": "python", "host": "function"}


def test_azd_parameter_file_matches_main_bicep():
    files, problems = bc.load()
    assert problems == []
    declared = files["main.bicep"].section("parameters")
    parameters = json.loads((bc.INFRA_DIR / "main.parameters.json").read_text(encoding="utf-8"))["parameters"]
    assert set(parameters) <= set(declared)
    required = {name for name, p in declared.items() if p.get("default") is None}
    assert required <= set(parameters)


def test_function_app_is_tagged_for_azd():
    files, _ = bc.load()
    site, _ = bc.app_settings_of(files)
    assert site is not None
    assert "azd-service-name" in json.dumps(site.config.get("tags"))
    assert "'azd-service-name': 'api'" in (bc.INFRA_DIR / site.file).read_text(encoding="utf-8")


def test_checkov_is_pinned_and_suppressions_give_reasons():
    pins = (ROOT / "requirements-infra.txt").read_text(encoding="utf-8")
    assert re.search(r"^checkov==\d+\.\d+\.\d+$", pins, re.MULTILINE)
    script = ROOT / "scripts" / "check-infra"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
    for path in bc.INFRA_DIR.rglob("*.bicep"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if "checkov:skip" in line:
                assert re.fullmatch(r"\s*// checkov:skip=CKV2?_AZURE_\d+: \S.{20,}", line), line


SCALE_GROUPS_SCRIPT = """
import json
import function_app

durable = {"orchestrationTrigger", "activityTrigger", "entityTrigger"}
groups = {}
for fn in function_app.app.get_functions():
    kind = fn.get_trigger().type
    name = fn.get_function_name()
    group = "http" if kind == "httpTrigger" else "durable" if kind in durable else "function:" + name
    groups.setdefault(group, []).append(name)
print(json.dumps(groups))
"""
NUMBER_WORDS = {4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def test_the_zone_redundancy_cost_in_the_docs_counts_the_apps_scale_groups():
    """Flex Consumption scale groups: http, durable, one per other trigger function. Counted from the app
    (in a fresh interpreter: get_functions() may run once per process), they must match docs/deploy.md."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCALE_GROUPS_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    groups = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"http", "durable"} <= set(groups)

    docs = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    table = docs.split("| scale group | functions |", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"^\| `([^`]+)` \|", table, re.MULTILINE))
    assert documented == set(groups)
    for name in groups["http"]:
        assert f"`{name}`" in table
    count = len(groups)
    assert count <= 7, groups  # the maintenance features share one timer; each trigger costs a group
    prose = " ".join(docs.split())
    assert f"**{NUMBER_WORDS[count]} scale groups**" in prose
    assert f"{count} groups x 2 = **at least {2 * count} always-ready instances" in prose


def test_operations_doc_shows_the_deployed_query_of_every_alert():
    files, problems = bc.load()
    assert problems == []
    resolver = bc.Resolver(files)
    docs = " ".join((ROOT / "docs" / "operations.md").read_text(encoding="utf-8").split())
    rules = bc.declared(files, "Microsoft.Insights/scheduledQueryRules")
    assert len(rules) == 6  # three in monitoring.bicep, three in canary-alerts.bicep
    for rule in rules:
        for query, _criterion in bc._query_text(resolver, rule):
            assert " ".join(query.split()) in docs, f"docs/operations.md lacks the query of {rule.symbol}"
        assert f"`{rule.symbol}`" in docs
    metric_alerts = bc.declared(files, "Microsoft.Insights/metricAlerts")
    assert {alert.symbol for alert in metric_alerts} == {"deadLetteredResultsAlert", "deadLetteredWorkAlerts"}
    for metric_alert in metric_alerts:
        (criterion,) = resolver.value(metric_alert.file, metric_alert.properties["criteria"])["allOf"]
        assert f"metric: {criterion['metricName']}" in docs
        assert f"aggregation: {criterion['timeAggregation']}" in docs
        assert f"`{metric_alert.symbol}`" in docs


@pytest.mark.parametrize(
    ("user_type", "principal_type"), [("user", "User"), ("servicePrincipal", "ServicePrincipal")]
)
def test_the_deployers_principal_type_goes_with_the_deployment(
    fake_repo, tmp_path, user_type, principal_type
):
    """A CI login is a service principal: a role assignment typed User for it fails with
    UnmatchedPrincipalType, so the script passes the signed-in principal's real type."""
    result, calls = _run(fake_repo, tmp_path, "dev", "rg-sas-dev", "westeurope", user_type=user_type)
    assert result.returncode == 0, result.stderr
    (create,) = [c for c in calls if c.startswith("az deployment group create")]
    assert f"--parameters principalType={principal_type} " in create


def test_azd_passes_the_principal_type_it_runs_as():
    """azd sets AZURE_PRINCIPAL_TYPE (User, or ServicePrincipal in CI); without the mapping the
    template's default (User) fails for a service principal."""
    parameters = json.loads((bc.INFRA_DIR / "main.parameters.json").read_text(encoding="utf-8"))["parameters"]
    assert parameters["principalType"]["value"].startswith("${AZURE_PRINCIPAL_TYPE")
    main = (bc.INFRA_DIR / "main.bicep").read_text(encoding="utf-8")
    allowed = main.split("param principalType string")[0].rsplit("@allowed([", 1)[1]
    assert "'User'" in allowed and "'ServicePrincipal'" in allowed


@pytest.mark.parametrize("backend", ["AzureStorage", "DurableTaskScheduler"])
def test_the_packaged_host_json_and_the_app_settings_name_one_durable_backend(fake_repo, tmp_path, backend):
    """The scale controller learns the backend from host.json only: the package's host.json names the
    backend asked for, and the app settings carry just the connection host.json names (with Azure
    Storage, none: it uses AzureWebJobsStorage)."""
    zip_path = tmp_path / "app.zip"
    result, _ = _run(fake_repo, tmp_path, "--package-only", str(zip_path), "--durable-backend", backend)
    assert result.returncode == 0, result.stderr
    provider = json.loads(zipfile.ZipFile(zip_path).read("host.json"))["extensions"]["durableTask"][
        "storageProvider"
    ]
    files, _ = bc.load()
    _site, raw = bc.app_settings_of(files)
    conditional = bc.conditional_app_settings(files)
    assert not [n for n in raw if "storageProvider" in n]  # no second source of the backend
    if backend == "DurableTaskScheduler":
        assert provider["type"] == "azureManaged"
        assert provider["connectionStringName"] in raw and provider["connectionStringName"] in conditional
    else:
        assert provider["type"] == "AzureStorage" and "connectionStringName" not in provider


def test_the_committed_host_json_is_the_azure_storage_variant():
    """What the package hook writes back after azd packaged a Durable Task Scheduler app is exactly
    the committed file (no dirty tree), and the deploy script reads a .bicepparam's backend."""
    sys.path.insert(0, str(bc.INFRA_DIR))
    try:
        import host_json
    finally:
        sys.path.remove(str(bc.INFRA_DIR))
    committed = (ROOT / "host.json").read_text(encoding="utf-8")
    assert (
        json.dumps(host_json.for_backend(json.loads(committed), "AzureStorage"), indent=2) + "\n" == committed
    )
    assert "durableBackend" in json.loads((bc.INFRA_DIR / "main.parameters.json").read_text())["parameters"]
    hooks = yaml.safe_load((ROOT / "azure.yaml").read_text())["services"]["api"]["hooks"]
    assert "--host-json" in hooks["prepackage"]["run"] and "DURABLE_BACKEND" in hooks["prepackage"]["run"]
    assert hooks["postpackage"]["run"].endswith("--restore-host-json")
    with pytest.raises(ValueError, match="unknown Durable backend"):
        host_json.for_backend(json.loads(committed), "Netherite")


def test_deploying_an_environment_packages_its_durable_backend(fake_repo, tmp_path):
    params = fake_repo / "infra" / "main.dev.bicepparam"
    params.write_text(params.read_text() + "param durableBackend = 'DurableTaskScheduler'\n")
    result, _ = _run(fake_repo, tmp_path, "dev", "rg-sas-dev", "westeurope")
    assert result.returncode == 0, result.stderr
    assert "Durable backend DurableTaskScheduler" in result.stderr


def test_the_backend_switch_is_a_service_hook_so_azd_deploy_runs_it():
    """azd raises project-level package hooks only for the commands that raise the project event; a
    stand-alone `azd deploy` packages each service and raises only the SERVICE package event (azure-dev
    cli/azd/pkg/project/service_config.go). Project-level hooks would ship the Azure Storage host.json
    to an app wired for the Durable Task Scheduler."""
    config = yaml.safe_load((ROOT / "azure.yaml").read_text())
    assert not {"prepackage", "postpackage"} & set(config.get("hooks") or {})
    hooks = config["services"]["api"]["hooks"]
    assert {"prepackage", "postpackage"} <= set(hooks)
    assert all(hooks[name]["shell"] == "sh" for name in ("prepackage", "postpackage"))
    # azd 1.17.1 sets AZURE_PRINCIPAL_TYPE (main.parameters.json's principalType): the project's floor
    assert config["requiredVersions"]["azd"] == ">= 1.17.1"
    assert "azd >= 1.17.1" in (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    # the saved copy (.azure/host.json.committed) never goes into the package azd zips
    assert ".azure" in (ROOT / ".funcignore").read_text(encoding="utf-8").split()


def test_a_failed_package_never_leaves_host_json_modified(fake_repo, tmp_path):
    """prepackage saves the committed host.json; postpackage (or the next prepackage, after a package
    that failed before postpackage ran) puts it back byte for byte."""
    committed = (fake_repo / "host.json").read_bytes()
    result, _ = _run(fake_repo, tmp_path, "--host-json", "DurableTaskScheduler")
    assert result.returncode == 0, result.stderr
    assert b"azureManaged" in (fake_repo / "host.json").read_bytes()
    assert (fake_repo / ".azure" / "host.json.committed").read_bytes() == committed
    # the package failed: postpackage never ran; the next prepackage starts from the committed file
    result, _ = _run(fake_repo, tmp_path, "--host-json", "DurableTaskScheduler")
    assert result.returncode == 0, result.stderr
    assert (fake_repo / ".azure" / "host.json.committed").read_bytes() == committed
    result, _ = _run(fake_repo, tmp_path, "--restore-host-json")
    assert result.returncode == 0, result.stderr
    assert (fake_repo / "host.json").read_bytes() == committed
    assert not (fake_repo / ".azure" / "host.json.committed").exists()
    # restoring with nothing saved is a no-op
    result, _ = _run(fake_repo, tmp_path, "--restore-host-json")
    assert result.returncode == 0 and (fake_repo / "host.json").read_bytes() == committed
    # an unknown backend leaves the committed file in place
    result, _ = _run(fake_repo, tmp_path, "--host-json", "Netherite")
    assert result.returncode != 0 and (fake_repo / "host.json").read_bytes() == committed
    assert not (fake_repo / ".azure" / "host.json.committed").exists()


CHECKOV_STUB = """#!/usr/bin/env bash
if [[ "$1" == "--version" ]]; then echo "$PINNED"; exit 0; fi
printf '%s\\n' "$REPORT"
exit 0
"""


@pytest.mark.parametrize(
    ("report", "passes"),
    [
        ("bicep scan results:\nPassed checks: 12, Failed checks: 0, Skipped checks: 3", True),
        (
            "[ERROR]  Failed to run check CKV_AZURE_70 on /infra/modules/function-app.bicep:authSettings\n"
            "Traceback (most recent call last):\n  KeyError: 'properties'\n"
            "bicep scan results:\nPassed checks: 12, Failed checks: 0, Skipped checks: 3",
            False,
        ),
        ("Passed checks: 12, Failed checks: 0, Skipped checks: 3\nParsing errors: 1", False),
    ],
)
def test_check_infra_fails_when_a_checkov_check_crashes(tmp_path, report, passes):
    """checkov logs a crashing check and exits 0: scripts/check-infra must not pass then."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "infra").mkdir()
    shutil.copy2(ROOT / "scripts" / "check-infra", repo / "scripts" / "check-infra")
    shutil.copy2(ROOT / "requirements-infra.txt", repo / "requirements-infra.txt")
    pinned = re.search(r"^checkov==(\S+)$", (ROOT / "requirements-infra.txt").read_text(), re.MULTILINE)[1]
    stub = repo / ".venv-infra" / "bin" / "checkov"
    stub.parent.mkdir(parents=True)
    stub.write_text(CHECKOV_STUB, encoding="utf-8")
    stub.chmod(0o755)
    (repo / ".venv-infra" / "bin" / "python").symlink_to(sys.executable)
    dirs = os.environ["PATH"].split(os.pathsep)
    path = os.pathsep.join(p for p in dirs if not (Path(p) / "bicep").exists())
    env = {**os.environ, "PINNED": pinned, "REPORT": report, "PATH": path}
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "check-infra")], env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode == 0) is passes, done.stdout + done.stderr
