"""The harness's on-demand watchdog tick runs the real tick and hands back its report."""

from __future__ import annotations

from devtools.harness import PatternHarness


def test_watchdog_tick_runs_a_tick_and_returns_its_report(azurite):
    with PatternHarness(azurite, watchdog_every=None) as h:
        report = h.watchdog_tick()
        assert report is not None
        assert h.tick_reports == [report]
