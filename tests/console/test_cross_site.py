"""In real Chromium: a page on another site can neither act through the API (a form post, a script's
fetch) nor frame the console to have its buttons clicked through (observation 4).

The app is the demo server on ``127.0.0.1``; the attacker's pages come from a second server on
``localhost``: another host, so another site, as far as the browser is concerned.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from devtools.console_demo import ConsoleDemo
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus

TIMEOUT = 15_000
TARGET = "xsite-victim"


@pytest.fixture(scope="module")
def app(azurite):
    with ConsoleDemo(azurite, tables=("Xsitesteps", "Xsitedeadlines"), speed=20) as running:
        make_step(running.harness.ledger, TARGET, StepStatus.FAILED)
        yield running


class Attacker:
    """Serves whatever page the test sets, from ``http://localhost:<port>/``."""

    def __init__(self) -> None:
        self.page = b""
        attacker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(attacker.page)))
                self.end_headers()
                self.wfile.write(attacker.page)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def serve(self, html: str) -> str:
        self.page = html.encode()
        return self.url


@pytest.fixture(scope="module")
def attacker():
    site = Attacker()
    yield site
    site.httpd.shutdown()
    site.httpd.server_close()


def untouched(app) -> bool:
    ledger = app.harness.ledger
    moves = [a for a in ledger.audit_trail(TARGET) if a.actor.startswith("operator:")]
    return ledger.get(TARGET, "create_storage").status is StepStatus.FAILED and not moves


@pytest.mark.parametrize(
    "enctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_a_cross_site_form_post_does_not_act(app, attacker, page, enctype):
    action = f"{app.url}/api/instances/{TARGET}/steps/create_storage/skip"
    # text/plain turns name=value into a JSON-looking body: {"reason":"csrf","x":"="}
    html = f"""<!doctype html><form id="f" method="POST" action="{action}" enctype="{enctype}">
      <input name='{{"reason":"csrf","x":"' value='"}}'></form>
      <script>document.getElementById("f").submit()</script>"""

    with page.expect_response(lambda r: r.url == action, timeout=TIMEOUT) as answer:
        page.goto(attacker.serve(html))

    assert answer.value.status in (400, 403, 415), answer.value.status
    assert untouched(app)


def test_a_cross_site_script_cannot_send_the_client_header(app, attacker, page):
    action = f"{app.url}/api/instances/{TARGET}/steps/create_storage/skip"
    html = f"""<!doctype html><script>
      window.outcome = fetch("{action}", {{method: "POST", mode: "cors",
        headers: {{"Content-Type": "application/json", "X-SAS-Client": "console"}},
        body: JSON.stringify({{reason: "csrf"}})}}).then(r => "status " + r.status, e => "blocked: " + e);
    </script>"""

    page.goto(attacker.serve(html))
    outcome = page.evaluate("() => window.outcome")

    assert outcome.startswith("blocked"), outcome  # the preflight gets no CORS grant
    assert untouched(app)


def test_the_console_cannot_be_framed_by_another_site(app, attacker, page):
    console = f"{app.console_url}#/instance/{TARGET}"
    # The control: at the top level the console renders the instance with its action buttons.
    page.goto(console)
    page.locator('button[data-action="skip"]').first.wait_for(timeout=TIMEOUT)

    page.goto(
        attacker.serve(f'<!doctype html><iframe id="c" src="{console}" width="1200" height="800"></iframe>')
    )
    page.locator("#c").wait_for(timeout=TIMEOUT)
    time.sleep(2)  # what the console would need to render its buttons (it did above in well under that)
    (frame,) = [f for f in page.frames if f is not page.main_frame]

    assert frame.locator("button[data-action]").count() == 0
    assert frame.locator("#main").count() == 0
    page.mouse.click(600, 400)  # a click-jacked click lands on nothing of the console's
    assert untouched(app)
