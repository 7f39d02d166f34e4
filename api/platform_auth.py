"""Which Functions auth level the API's routes take: decided once, when the worker indexes the app.

With App Service Authentication on, the platform authenticates every request before the Functions
host sees it (a bearer token for the app registration) and the API then authorizes app roles itself
(:func:`api.boundary.authorize`). A function key on top would make every caller hold a token *and* a
key, which no Entra client can be given; the Functions docs ("Securing Azure Functions", authorization
level) say to use ``anonymous`` with app-level authentication. The platform sets
``WEBSITE_AUTH_ENABLED=True`` in the app's environment exactly when authsettingsV2 has
``platform.enabled`` (infra/modules/function-app.bicep), and only on an Azure-hosted app
(``WEBSITE_INSTANCE_ID``/``WEBSITE_SITE_NAME`` are present there, never locally): both must hold, so a
local shell that sets ``WEBSITE_AUTH_ENABLED`` cannot turn function keys off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import azure.functions as func

AUTH_ENABLED_SETTING = "WEBSITE_AUTH_ENABLED"
AZURE_MARKER_SETTINGS = ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME")


def platform_authentication_on(env: Mapping[str, str] | None = None) -> bool:
    """True when App Service Authentication fronts this (Azure-hosted) app."""
    env = os.environ if env is None else env
    in_azure = any((env.get(name) or "").strip() for name in AZURE_MARKER_SETTINGS)
    return in_azure and (env.get(AUTH_ENABLED_SETTING) or "").strip().lower() == "true"


def api_auth_level(env: Mapping[str, str] | None = None) -> func.AuthLevel:
    """``anonymous`` behind App Service Authentication (the platform authenticates), else ``function``."""
    return func.AuthLevel.ANONYMOUS if platform_authentication_on(env) else func.AuthLevel.FUNCTION
