"""Shared core of the Scheduler Agent Supervisor app: settings, the step ledger and the transport.

The role folders (``orchestrators/``, ``activities/``, ``supervisor/``) hold Azure Functions
bindings; everything they share, and everything that must be testable without the Functions
host, lives here.
"""
