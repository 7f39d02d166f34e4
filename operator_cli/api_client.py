"""The operator CLI's one client of the app's HTTP API (``sas doctor``, ``sas canary run``).

The function key comes from ``SAS_FUNCTION_KEY`` only (a key on a command line ends up in the shell's
history). What goes wrong is one :class:`ApiError` with its exit code, from the transport error or the
app's problem+json answer (docs/api.md, "Errors"): 2 when the app refused the request's content (a
4xx problem), 7 when the app could not be asked (unreachable, no such route, refused the credentials,
a server error, an answer that is not JSON).
"""

from __future__ import annotations

import functools
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from operator_cli.session import EXIT_USAGE

DEFAULT_URL = "http://localhost:7071"  # func start's port, and ./scripts/demo --serve's
KEY_VARIABLE = "SAS_FUNCTION_KEY"
DEFAULT_TIMEOUT = 60.0
MAX_BODY = 1_000_000
EXIT_UNREACHABLE = 7
HINTS = {
    401: f"set {KEY_VARIABLE} to a function key or, behind App Service Authentication, "
    "pass a token (--token / SAS_TOKEN)",
    403: "the caller needs the app role Workflows.Operate",
    404: "the app has no such route: is --url the Function App, and does it run this version?",
}


class ApiError(Exception):
    """The app could not be asked, or refused: one line, and ``exit_code``, what ``sas`` exits with."""

    def __init__(self, message: str, exit_code: int = EXIT_UNREACHABLE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ApiClient:
    url: str
    key: str | None = None
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The JSON answer of ``method path``, or :class:`ApiError` saying why not."""
        if not self.url.startswith(("http://", "https://")):
            raise ApiError(f"--url must be an http(s) URL, is {self.url!r}")
        headers = {
            "Accept": "application/json",
            "X-SAS-Client": "sas-cli",
            "Content-Type": "application/json",
        }
        headers |= {"x-functions-key": self.key} if self.key else {}
        headers |= {"Authorization": f"Bearer {self.token}"} if self.token else {}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url.rstrip("/") + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read(MAX_BODY + 1)
        except urllib.error.HTTPError as exc:
            raise refusal(exc.code, exc.read(MAX_BODY)) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ApiError(f"cannot reach {self.url}: {getattr(exc, 'reason', exc)}") from None
        if len(raw) > MAX_BODY:
            raise ApiError(f"the answer to {method} {path} is larger than {MAX_BODY} bytes")
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            raise ApiError(f"the answer to {method} {path} is not JSON: is --url the Function App?") from None


def refusal(status: int, raw: bytes) -> ApiError:
    """An HTTP error answer as one line: the problem's detail and its listed problems when the app sent
    problem+json (docs/api.md), the hint for 401/403/404, and the exit code the status stands for."""
    try:
        problem = json.loads(raw)
    except ValueError:
        problem = None
    said = ""
    if isinstance(problem, dict):  # problem+json
        detail = problem.get("detail") or problem.get("error") or problem.get("title") or ""
        details = [str(d) for d in problem.get("details") or [] if d][:5]
        said = "; ".join([str(detail), *details] if detail else details)
    hint = HINTS.get(status, "see the app's logs" if status >= 500 else "")
    text = f"the app refused the request: HTTP {status}"
    text += "".join(f" ({part})" for part in (said, hint) if part)
    content = 400 <= status < 500 and status not in HINTS
    return ApiError(text, EXIT_USAGE if content else EXIT_UNREACHABLE)


def api_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options of every command that asks the app; the command gets them as ``api``."""
    url_help = f"the Function App's base URL (its function key: env {KEY_VARIABLE})"

    @click.option(
        "--url", envvar="SAS_API_URL", show_envvar=True, default=DEFAULT_URL, show_default=True, help=url_help
    )
    @click.option("--token", envvar="SAS_TOKEN", show_envvar=True, help="a bearer token (App Service Auth)")
    @click.option(
        "--timeout", type=click.FloatRange(1, 300), default=DEFAULT_TIMEOUT, show_default=True, help="seconds"
    )
    @functools.wraps(function)
    def command(*args: Any, url: str, token: str | None, timeout: float, **kwargs: Any) -> Any:
        api = ApiClient(url, os.environ.get(KEY_VARIABLE) or None, token, timeout)
        return function(*args, api=api, **kwargs)

    return command
