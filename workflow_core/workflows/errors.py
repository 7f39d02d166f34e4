"""Errors of the workflow-definition layer, typed so callers can map them to the right response."""

from __future__ import annotations

from collections.abc import Iterable


class WorkflowDefinitionError(ValueError):
    """A workflow file is malformed; the message names the file and the field."""


class UnknownWorkflow(LookupError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name, self.known = name, sorted(known)
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(f"unknown workflow {name!r}; known workflows: {listed}")


class WorkflowInputError(ValueError):
    def __init__(self, workflow: str, problems: list[str]) -> None:
        self.workflow, self.problems = workflow, list(problems)
        super().__init__(f"invalid input for workflow {workflow!r}: " + "; ".join(self.problems))


class StepInputError(ValueError):
    """A step's input mapping refers to something the running workflow does not have."""


class UnknownVersion(LookupError):
    def __init__(self, workflow: str, reference: str, known: Iterable[str] = ()) -> None:
        self.workflow, self.reference, self.known = workflow, reference, list(known)
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(
            f"workflow {workflow!r} has no stored version {reference!r}; stored versions: {listed}"
        )
