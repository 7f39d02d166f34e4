"""App Service Authentication (Microsoft Entra ID) in front of the Function App, from the parsed Bicep."""

from __future__ import annotations

import re

from tests.infra import bicep_checks as bc


def _auth_settings():
    files, problems = bc.load()
    assert problems == []
    configs = [
        r
        for r in bc.declared(files, "Microsoft.Web/sites/config")
        if r.config.get("name") == "authsettingsV2"
    ]
    assert len(configs) == 1, "one authsettingsV2 resource on the Function App"
    return files, configs[0]


def test_the_api_requires_an_entra_token_and_answers_401():
    _files, auth = _auth_settings()
    props = auth.config["properties"]
    assert props["platform"]["enabled"] is True
    validation = props["globalValidation"]
    assert validation["requireAuthentication"] is True
    assert validation["unauthenticatedClientAction"] == "Return401"  # API callers: no login redirect
    assert validation["excludedPaths"] == ["/api/health"]  # the only anonymous path: the health probe
    aad = props["identityProviders"]["azureActiveDirectory"]
    assert aad["enabled"] is True
    assert bc.dotted(aad["registration"]["clientId"]) == "authClientId"
    assert "clientSecretSettingName" not in aad["registration"], "token validation needs no secret"
    assert props["httpSettings"]["requireHttps"] is True


def test_authentication_is_provisioned_only_with_a_client_id_and_prod_requires_one():
    files, auth = _auth_settings()
    # The resource is unconditional in its own module (checkov crashes on a conditional config resource);
    # the module call in function-app.bicep carries the condition and passes the client id through.
    assert auth.file == "modules/app-authentication.bicep" and auth.condition is None
    path, params, condition = bc.modules_of(files["main.bicep"])["authentication"]
    assert path == "modules/app-authentication.bicep"
    assert condition is not None and "authClientId" in str(condition)
    assert bc.dotted(params["authClientId"]) == "authClientId"
    main_params = files["main.bicep"].section("parameters")
    assert {"authClientId", "authTenantId"} <= set(main_params)
    prod = (bc.INFRA_DIR / "main.prod.bicepparam").read_text(encoding="utf-8")
    # readEnvironmentVariable without a default: a prod deploy without the registration fails to build.
    assert re.search(r"^param authClientId = readEnvironmentVariable\('SAS_AUTH_CLIENT_ID'\)$", prod, re.M)


def test_the_health_route_excluded_from_authentication_exists():
    source = (bc.INFRA_DIR.parent / "api" / "functions.py").read_text(encoding="utf-8")
    assert 'route="health"' in source


def test_the_documented_registration_asks_for_the_v2_tokens_the_v2_issuer_issues():
    """authsettingsV2 validates the v2.0 issuer; a registration at the default (v1.0 tokens, issuer
    sts.windows.net) would be refused with 401, so the recipe sets api.requestedAccessTokenVersion."""
    _files, auth = _auth_settings()
    issuer = auth.config["properties"]["identityProviders"]["azureActiveDirectory"]["registration"]
    assert str(issuer["openIdIssuer"]).endswith("/v2.0")
    recipe = (bc.INFRA_DIR.parent / "docs" / "deploy.md").read_text(encoding="utf-8")
    section = recipe.split("## App Service Authentication", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"az ad app update [^\n]*--set api\.requestedAccessTokenVersion=2", section)
