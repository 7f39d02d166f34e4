"""A static check of the Logic App agent (``examples/logic-app-agent``) against the message contract.

No Logic Apps runtime runs on these machines, so the workflow is read, not run. Two checks:

* **fields**: every expression reading a message field (``body('Parse_work_message')?['reply_token']``,
  ``variables('answer')?['current']``, ...) resolves in the published JSON Schema of that message,
  and every message the workflow writes (its ``Compose`` bodies, sent as they are) has only fields of
  its schema and all the required ones; the ``Parse JSON`` schema of the work message requires
  exactly what the published one requires;
* **order**: the action graph keeps the contract's order (docs/agents.md, "Writing one from scratch:
  the details"): the expiry, misrouting and blob-input guards, then the asking heartbeat and the
  ``current`` guard, before any effect (an HTTP call); every completion of a work message runs only
  after a reply was sent or inside a refusal guard (expired, not current); dead-letters only for a
  malformed or misrouted message.

``problems(workflow, schemas)`` returns one line per violation; the tests mutate the schemas or the
workflow and expect a line.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "logic-app-agent"
WORKFLOW = EXAMPLE / "work-agent" / "workflow.json"
SCHEMA_NAMES = ("work-message", "result-message", "heartbeat-message", "attempt-status")

# Where a message's fields are read in the workflow, and the schema of that message.
SOURCES = {
    ("body", "Parse_work_message"): "work-message",
    ("body", "Parse_answer"): "attempt-status",
    ("variables", "answer"): "attempt-status",
}
READ = re.compile(r"\b(body|variables)\('(\w+)'\)((?:\??\['[^']*'\])+)")
KEY = re.compile(r"\['([^']*)'\]")
COMPLETE, DEAD_LETTER, SEND = "completeQueueMessageV2", "deadLetterQueueMessageV2", "sendMessage"


def load_schemas() -> dict[str, dict[str, Any]]:
    return {
        name: json.loads((ROOT / "docs" / "schemas" / f"{name}.schema.json").read_text(encoding="utf-8"))
        for name in SCHEMA_NAMES
    }


def load_workflow() -> dict[str, Any]:
    return json.loads(WORKFLOW.read_text(encoding="utf-8"))


# ----- schemas -----


def _branches(schema: dict[str, Any], root: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``schema`` and every schema it may also be (``$ref``, ``oneOf``/``anyOf``/``allOf``, ``then``)."""
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        yield from _branches(target, root)
        return
    yield schema
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in schema.get(key, []):
            yield from _branches(sub, root)
    if isinstance(schema.get("then"), dict):
        yield from _branches(schema["then"], root)


def resolve(schema: dict[str, Any], path: list[str]) -> bool:
    """Does the field ``path`` exist in ``schema`` (in some branch: a field of a blob reference is
    a field of the input)? An object without declared properties resolves nothing."""
    current = [schema]
    for key in path:
        found = [
            branch["properties"][key]
            for s in current
            for branch in _branches(s, schema)
            if key in branch.get("properties", {})
        ]
        if not found:
            return False
        current = found
    return True


def _fields(schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    return set(schema.get("properties", {})), set(schema.get("required", []))


# ----- the workflow's actions -----


def actions(scope: dict[str, Any], parent: tuple[str, str] | None = None) -> Iterator[tuple[str, dict, Any]]:
    """Every action, nested ones included, with its container ``(name, branch)`` (None: top level)."""
    for name, action in scope.items():
        yield name, action, parent
        branches = (("actions", action.get("actions")), ("else", action.get("else", {}).get("actions")))
        for branch, inner in branches:
            if isinstance(inner, dict):
                yield from actions(inner, (name, branch))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _operation(action: dict[str, Any]) -> str | None:
    return action.get("inputs", {}).get("serviceProviderConfiguration", {}).get("operationId")


def _parameters(action: dict[str, Any]) -> dict[str, Any]:
    return action.get("inputs", {}).get("parameters", {})


class Graph:
    """The actions with their containers, and what is sure to have run before each."""

    def __init__(self, workflow: dict[str, Any]) -> None:
        found = actions(workflow["definition"]["actions"])
        self.all = {name: (action, parent) for name, action, parent in found}

    def scope_of(self, name: str) -> dict[str, Any]:
        _, parent = self.all[name]
        if parent is None:
            return {n: a for n, (a, p) in self.all.items() if p is None}
        return {n: a for n, (a, p) in self.all.items() if p == parent}

    def before(self, name: str) -> set[str]:
        """Every action that ran before ``name`` on any path to it (runAfter in its scope, then its
        containers' own predecessors and the containers themselves, which were entered)."""
        scope, seen, todo = self.scope_of(name), set(), [name]
        while todo:
            for prior in scope[todo.pop()].get("runAfter", {}):
                if prior not in seen:
                    seen.add(prior)
                    todo.append(prior)
        parent = self.all[name][1]
        if parent is not None:
            seen |= {parent[0]} | self.before(parent[0])
        return seen | {inner for prior in list(seen) for inner in self._inside(prior)}

    def _inside(self, name: str) -> set[str]:
        return {n for n, (_, p) in self.all.items() if p is not None and p[0] == name}

    def guard(self, name: str) -> tuple[str, str] | None:
        """The innermost If branch ``name`` sits in."""
        parent = self.all[name][1]
        while parent is not None and self.all[parent[0]][0].get("type") != "If":
            parent = self.all[parent[0]][1]
        return parent

    def expression_reads(self, name: str, field: str) -> bool:
        return any(f"['{field}']" in s for s in _strings(self.all[name][0].get("expression", {})))


# ----- the checks -----


def field_problems(workflow: dict[str, Any], schemas: dict[str, dict[str, Any]]) -> list[str]:
    found = []
    for text in _strings(workflow):
        for source, name, keys in READ.findall(text):
            schema = SOURCES.get((source, name))
            if schema is None:
                if source == "body" and name.startswith("Parse_"):
                    found.append(f"{source}('{name}') is not mapped to a published schema")
                continue
            path = KEY.findall(keys)
            if not resolve(schemas[schema], path):
                found.append(f"{source}('{name}') reads {'.'.join(path)}, which {schema}.schema.json lacks")
    graph = Graph(workflow)
    for name, (action, _) in graph.all.items():
        if action.get("type") == "ParseJson" and name == "Parse_work_message":
            declared, required = _fields(action["inputs"]["schema"])
            published, published_required = _fields(schemas["work-message"])
            if required != published_required:
                found.append(f"{name} requires {sorted(required)}; the schema, {sorted(published_required)}")
            if declared - published:
                found.append(f"{name} declares {sorted(declared - published)}, which the schema lacks")
        if action.get("type") == "Compose":
            body = action["inputs"]
            schema = "heartbeat-message" if body.get("type") == "heartbeat" else "result-message"
            allowed, required = _fields(schemas[schema])
            if set(body) - allowed:
                found.append(f"{name} writes {sorted(set(body) - allowed)}, which {schema}.schema.json lacks")
            if required - set(body):
                found.append(f"{name} leaves out {sorted(required - set(body))}, which {schema} requires")
    return found


def _is_work_queue(action: dict[str, Any]) -> bool:
    return _parameters(action).get("queueName") == "@parameters('workQueue')"


def _sent_compose(action: dict[str, Any]) -> str | None:
    content = _parameters(action).get("message", {}).get("contentData", "")
    match = re.search(r"outputs\('(\w+)'\)", str(content))
    return match.group(1) if match else None


def order_problems(workflow: dict[str, Any]) -> list[str]:
    g, found = Graph(workflow), []
    named = {name: action for name, (action, _) in g.all.items()}
    ifs = [n for n, a in named.items() if a.get("type") == "If"]
    expiry = [n for n in ifs if g.expression_reads(n, "expires_at")]
    misrouted = [n for n in ifs if g.expression_reads(n, "agent")]
    blob = [n for n in ifs if g.expression_reads(n, "$blob")]
    current = [n for n in ifs if g.expression_reads(n, "current")]
    sends = [n for n, a in named.items() if _operation(a) == SEND]
    sent = {n: named.get(_sent_compose(named[n]) or "", {}).get("inputs", {}) for n in sends}
    asks = [n for n in sends if "answer_queue" in sent[n]]
    replies = [n for n in sends if "outcome" in sent[n]]
    for name, action in named.items():
        if action.get("type") != "Http":
            continue
        before = g.before(name)
        for what, guards in (
            ("the expiry check", expiry),
            ("the misrouting check", misrouted),
            ("the blob-input check", blob),
            ("the asking heartbeat (answer_queue)", asks),
            ("the answer's `current` check", current),
        ):
            if not set(guards) & before:
                found.append(f"effect {name} does not come after {what}")
        if g.guard(name) is not None:
            found.append(f"effect {name} sits inside the condition {g.guard(name)[0]}")
    chain = [*expiry[:1], *misrouted[:1], *blob[:1], *asks[:1], *current[:1]]
    for earlier, later in itertools.pairwise(chain):
        if earlier not in g.before(later):
            found.append(f"{later} does not come after {earlier}: the checks are out of order")
    refusals = set(expiry) | set(current)  # the contract completes these with no reply
    for name, action in named.items():
        if _operation(action) == COMPLETE and _is_work_queue(action):
            guard = g.guard(name)
            replied = [r for r in replies if r in g.before(name) and _only_on_success(g, name, r)]
            if not replied and not (guard is not None and guard[0] in refusals and guard[1] == "actions"):
                found.append(f"{name} completes the work message without a reply or a refusal before it")
        if _operation(action) == DEAD_LETTER and _is_work_queue(action):
            guard = g.guard(name)
            malformed = "Parse_work_message" in action.get("runAfter", {})
            if not malformed and not (guard is not None and guard[0] in misrouted):
                found.append(f"{name} dead-letters a message that is neither malformed nor misrouted")
    return found


def _only_on_success(g: Graph, name: str, reply: str) -> bool:
    """Does ``name`` run only once ``reply`` succeeded (its runAfter chain to it lists only Succeeded)?"""
    scope, todo, seen = g.scope_of(name), [name], set()
    while todo:
        current = todo.pop()
        for prior, statuses in scope.get(current, {}).get("runAfter", {}).items():
            if statuses != ["Succeeded"] or prior in seen:
                continue
            if prior == reply:
                return True
            seen.add(prior)
            todo.append(prior)
    return False


def problems(workflow: dict[str, Any], schemas: dict[str, dict[str, Any]]) -> list[str]:
    return field_problems(workflow, schemas) + order_problems(workflow)
