"""Loading workflow definitions from YAML files, once per directory per process: they ship with the
app like code, and changing one in flight is a versioning decision (docs/scheduler.md).

And the rules every definition must pass beyond its schema (``sas lint``), checked over whatever is
in ``workflows/`` so a new definition meets the same rules as the shipped ones: every agent has a
handler (the caller passes the names: this layer imports no role), a description for operators, and
a ``sample_input`` the starter accepts that resolves every ``$input`` reference. ``lint_directory``
reads each file on its own, so one broken file is one problem line, not the end.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from workflow_core.workflows.errors import (
    StepInputError,
    UnknownWorkflow,
    WorkflowDefinitionError,
    WorkflowInputError,
)
from workflow_core.workflows.model import WorkflowDefinition, iter_references, resolve_value
from workflow_core.workflows.pools import (
    POOLS_FILE,
    SERVED_OUTSIDE_THE_APP,
    AgentPools,
    clear_pools_cache,
    load_pools_file,
)

DEFAULT_DIRECTORY = Path(__file__).resolve().parents[2] / "workflows"
# A pools.yaml elsewhere than next to the definitions (``sas-agent --pools-file``); None: next to them.
POOLS_FILE_OVERRIDE: Path | None = None

_cache: dict[Path, dict[str, WorkflowDefinition]] = {}
_lock = threading.Lock()


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: YAML would silently keep the last one."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            problem = f"found duplicate key {key!r}"
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, problem, key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _format_location(loc: tuple[Any, ...]) -> str:
    # "<...>" parts are a union member's tag (``<step>``, ``<parallel>``), not a field the author wrote
    parts = (f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc if not str(p).startswith("<"))
    return "".join(parts).removeprefix(".")


def _known_keys() -> set[str]:
    from workflow_core.workflows import model, steps

    classes = [v for m in (model, steps) for v in vars(m).values() if isinstance(v, type)]
    models = [c for c in classes if issubclass(c, BaseModel) and c is not BaseModel]
    return {field.alias or name for c in models for name, field in c.model_fields.items()}


def _misspellings(errors: list[Any]) -> dict[str, tuple[str, str]]:
    """``{location of an unknown key: (parent location, the key meant)}``: a missing sibling first,
    then any known key."""
    missing = [_format_location(e["loc"]) for e in errors if e["type"] == "missing"]
    known = sorted(_known_keys())
    found: dict[str, tuple[str, str]] = {}
    for error in (e for e in errors if e["type"] == "extra_forbidden"):
        written = _format_location(error["loc"])
        parent, _, key = written.rpartition(".")
        siblings = [m.rpartition(".")[2] for m in missing if m.rpartition(".")[0] == parent]
        close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
        others = [k for k in known if k != key]  # a key valid elsewhere is misplaced, not misspelt
        close = close or difflib.get_close_matches(key, others, n=1, cutoff=0.75)
        if close:
            found[written] = (parent, close[0])
    return found


def _format_validation_error(exc: ValidationError) -> str:
    """One clause per problem. A misspelt key is reported as such ("did you mean"), instead of the
    errors it causes (the key meant is "missing", a list it empties is "too short")."""
    errors = exc.errors()
    misspelt = _misspellings(errors)
    parents = {parent for parent, _ in misspelt.values()}
    lines = []
    for error in errors:
        where = _format_location(error["loc"])
        if where in misspelt:
            lines.append(f"{where}: unknown key; did you mean {misspelt[where][1]!r}?")
            continue
        parent = where.rpartition(".")[0] if error["type"] == "missing" else where
        if error["type"] in ("missing", "too_short") and any(
            p == parent or p.startswith(f"{where}[") or p.startswith(f"{where}.") for p in parents
        ):
            continue  # a consequence of the misspelling reported above
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "too_short" and isinstance(ctx := error.get("ctx"), dict):
            message = f"needs at least {ctx.get('min_length')} entries, got {ctx.get('actual_length')}"
        lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)


def parse_workflow(text: str, source: str = "<string>") -> WorkflowDefinition:
    """One definition from YAML text; errors start with ``source`` and name the field."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise WorkflowDefinitionError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise WorkflowDefinitionError(f"{source}: the top level must be a mapping with name, input and steps")
    try:
        return WorkflowDefinition.model_validate(data)
    except ValidationError as exc:
        raise WorkflowDefinitionError(f"{source}: {_format_validation_error(exc)}") from None


def read_directory(directory: Path) -> Iterator[tuple[str, WorkflowDefinition | WorkflowDefinitionError]]:
    """Each definition file's name, with its definition or what keeps it out: it does not parse, its
    name is not its file's (so the file that defines a workflow is obvious), or another file took it."""
    origin: dict[str, str] = {}
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        if path.name == POOLS_FILE:  # routing, not a workflow (workflow_core.workflows.pools)
            continue
        try:
            definition = parse_workflow(path.read_text(encoding="utf-8"), source=path.name)
            if definition.name != path.stem:
                raise WorkflowDefinitionError(
                    f"{path.name}: name: {definition.name!r} must match the file name ({path.stem!r})"
                )
            if definition.name in origin:
                taken = f"{definition.name!r} is also defined in {origin[definition.name]}"
                raise WorkflowDefinitionError(f"{path.name}: name: {taken}")
        except WorkflowDefinitionError as exc:
            yield path.name, exc
            continue
        origin[definition.name] = path.name
        yield path.name, definition


def _load_directory(directory: Path) -> dict[str, WorkflowDefinition]:
    if not directory.is_dir():
        raise WorkflowDefinitionError(f"workflow directory {directory} does not exist")
    loaded = [definition for _, definition in read_directory(directory)]
    if broken := [d for d in loaded if isinstance(d, WorkflowDefinitionError)]:
        raise broken[0]
    return {d.name: d for d in loaded}


def load_workflows(directory: Path | None = None) -> dict[str, WorkflowDefinition]:
    """All definitions in ``directory`` (default: the repository's ``workflows/``), by name."""
    given = directory or DEFAULT_DIRECTORY
    with _lock:
        if given not in _cache:  # resolved once per spelling (a lookup runs on every step)
            key = given.resolve()
            _cache[given] = _cache[key] = _cache.get(key) or _load_directory(key)
        return dict(_cache[given])


def clear_workflow_cache() -> None:
    """Forget parsed definitions and pools (tests that write definition files)."""
    with _lock:
        _cache.clear()
    clear_pools_cache()


def get_workflow(name: str, directory: Path | None = None) -> WorkflowDefinition:
    workflows = load_workflows(directory)
    try:
        return workflows[name]
    except (KeyError, TypeError):
        raise UnknownWorkflow(str(name), workflows) from None


def agent_pools(directory: Path | None = None) -> AgentPools:
    """The agent pools declared next to the definitions (``workflow_core.workflows.pools``)."""
    if directory is None and POOLS_FILE_OVERRIDE is not None:
        return load_pools_file(POOLS_FILE_OVERRIDE)
    return load_pools_file((directory or DEFAULT_DIRECTORY) / POOLS_FILE)


def agents_used(directory: Path | None = None) -> set[str]:
    """For start-up cross-checks."""
    return set().union(*(definition.agents_used() for definition in load_workflows(directory).values()))


@dataclass(frozen=True)
class LintProblem:
    """One thing to fix, in one file, at one field (``""`` when the file as a whole is at fault)."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}" if self.field else f"{self.file}: {self.message}"


def lint_definition(
    definition: WorkflowDefinition, *, source: str, agents: Collection[str] | None = None
) -> list[LintProblem]:
    """Every problem of one loaded definition; ``agents=None`` skips the handler check (as it is for a
    definition whose agents only pools outside the app serve: ``SERVED_OUTSIDE_THE_APP``)."""
    if definition.name in SERVED_OUTSIDE_THE_APP:
        agents = None
    empty = "empty; say what the workflow does, for operators"
    problems = [] if definition.description.strip() else [LintProblem(source, "description", empty)]
    for where, step, _ in definition.located_steps():
        for at, name in ((f"{where}.agent", step.agent), (f"{where}.compensation.agent", step.compensator)):
            if agents is not None and name is not None and name not in agents:
                message = f"agent {name!r} has no handler; register one with @agent({name!r}) in a module of "
                message += "activities/worker/handlers/ imported by its __init__.py (docs/agents.md)"
                problems.append(LintProblem(source, at, message))
    if definition.sample_input is None:
        return problems
    try:
        validated = definition.validate_input(definition.sample_input)
    except WorkflowInputError as exc:
        return problems + [LintProblem(source, "sample_input", problem) for problem in exc.problems]
    for where, step, _ in definition.located_steps():
        for at, ref in iter_references(step.input, f"{where}.input"):
            try:
                if ref.source == "input":
                    resolve_value(ref.text, validated, {}, at)
            except StepInputError as exc:
                problems.append(LintProblem(source, "sample_input", str(exc)))
    return problems


def lint_directory(
    directory: Path | None = None, *, agents: Collection[str] | None = None
) -> tuple[dict[str, WorkflowDefinition], list[LintProblem]]:
    """The definitions that load from ``directory`` and every problem of every file."""
    directory = directory or DEFAULT_DIRECTORY
    if not directory.is_dir():
        return {}, [LintProblem(str(directory), "", "no such directory")]
    found: dict[str, WorkflowDefinition] = {}
    problems: list[LintProblem] = []
    for file, definition in read_directory(directory):
        if isinstance(definition, WorkflowDefinitionError):
            problems.append(_load_problem(file, str(definition)))
            continue
        found[definition.name] = definition
        problems += lint_definition(definition, source=file, agents=agents)
    return found, problems


def _load_problem(file: str, message: str) -> LintProblem:
    rest = message.removeprefix(f"{file}: ")
    field, sep, text = rest.partition(": ")
    if sep and " " not in field:
        return LintProblem(file, field, text)
    return LintProblem(file, "", rest)


def lint_summary(definitions: Mapping[str, WorkflowDefinition]) -> list[str]:
    lines = []
    for name, definition in sorted(definitions.items()):
        has_sample = definition.sample_input is not None
        sample = "sample input" if has_sample else "no sample input (the demo needs --input)"
        steps, agents = len(definition.steps), len(definition.agents_used())
        lines.append(f"ok  {name}: {steps} step(s), {agents} agent(s), {sample}")
    return lines


def skeleton_input(definition: WorkflowDefinition) -> dict[str, Any]:
    """A placeholder for every required field, by type: what to put in ``--input`` or ``sample_input``."""
    placeholders = {"string": "...", "integer": 1, "number": 1.5, "boolean": True, "object": {}, "array": []}
    return {name: placeholders[definition.input.properties[name].type] for name in definition.input.required}
