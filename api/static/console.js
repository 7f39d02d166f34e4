// The operator console: a small single-page app over the operator API (no framework, no build step).
// Views: #/ (instance list with filters), #/instance/<id> (timeline and actions), #/attention (inbox).
"use strict";

const API = location.pathname.replace(/\/console(\/.*)?$/, "");
const KEY = new URLSearchParams(location.search).get("code");
const REFRESH_MS = 3000;
const STATUSES = ["Running", "Succeeded", "Compensating", "Compensated", "CompensationFailed", "Failed", "Stopped", "Cancelled", "Purging"];
const COLORS = {
  Pending: "#c9ced8", Dispatched: "#6d9be6", Running: "#2f6fd6", Succeeded: "#1f8a4c", Failed: "#c2352b",
  TimedOut: "#e0683c", Retrying: "#d4a21a", Compensating: "#7d4cc2", Compensated: "#4f9a78",
  CompensationFailed: "#8e1b12", Skipped: "#8a93a3", Cancelled: "#a7aebb", Stopped: "#b7791f",
};
const state = { view: null, timer: null, instances: [], continuation: null, lastFocus: null };

// ---- small helpers ---------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c.nodeType ? c : String(c));
  return el;
}
const $ = (sel) => document.querySelector(sel);
const fmt = (iso) => (iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 19) : "–");
const badge = (status) => h("span", { class: `badge s-${status}` }, status || "–");
const link = (id) => h("a", { href: `#/instance/${encodeURIComponent(id)}` }, id);

class ApiProblem extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `the API answered ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

async function api(path, options = {}) {
  // X-SAS-Client: the API refuses a state-changing request without it (a cross-site form cannot send it).
  const headers = { Accept: "application/json" };
  if (options.body) Object.assign(headers, { "Content-Type": "application/json", "X-SAS-Client": "console" });
  Object.assign(headers, options.headers || {});  // Idempotency-Key of the click
  if (KEY) headers["x-functions-key"] = KEY;
  let response;
  try {
    response = await fetch(API + path, { ...options, headers });
  } catch (err) {
    throw new ApiProblem(0, { error: "the Function App cannot be reached", details: ["is it running? " + err.message] });
  }
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = { error: text.slice(0, 200) }; }
  if (!response.ok) throw new ApiProblem(response.status, body);
  return body;
}

function problemBox(box, err) {
  box.replaceChildren();
  if (!err) { box.hidden = true; return; }
  const body = err.body || {};
  box.append(h("strong", {}, err.message));
  if (body.details && body.details.length) box.append(h("ul", {}, body.details.map((d) => h("li", {}, d))));
  if (body.code) box.append(h("div", { class: "muted" }, `(${body.code}, HTTP ${err.status})`));
  box.hidden = false;
}
const showProblem = (err) => problemBox($("#problem"), err);

function notice(text) {
  const box = $("#notice");
  box.textContent = text;
  box.hidden = !text;
}

function stamp() { $("#updated").textContent = "updated " + new Date().toLocaleTimeString(); }

// ---- routing and live refresh ----------------------------------------------------------------------

function route() {
  const hash = location.hash || "#/";
  const [path, query] = hash.slice(1).split("?");
  const params = new URLSearchParams(query || "");
  if (path.startsWith("/instance/")) return { name: "instance", id: decodeURIComponent(path.slice(10)), params };
  if (path === "/attention") return { name: "attention", params };
  return { name: "list", params };
}

async function render(first) {
  const r = route();
  document.querySelectorAll("[data-nav]").forEach((a) =>
    a.toggleAttribute("aria-current", a.dataset.nav === (r.name === "instance" ? "list" : r.name)));
  if (a11yName(r) && first) document.title = a11yName(r) + " · Scheduler Agent Supervisor";
  try {
    if (r.name === "instance") await renderInstance(r.id, first);
    else if (r.name === "attention") await renderAttention(first);
    else await renderList(r.params, first);
    showProblem(null);
    stamp();
  } catch (err) {
    showProblem(err);
  }
  refreshAttentionCount();
}
const a11yName = (r) => ({ list: "Workflows", attention: "Attention", instance: `Instance ${r.id}` })[r.name];

function schedule() {
  clearTimeout(state.timer);
  if ($("#live").checked) state.timer = setTimeout(async () => { if (!$("#confirm").open) await render(false); schedule(); }, REFRESH_MS);
}

async function refreshAttentionCount() {
  try {
    const inbox = await api("/attention");
    const n = inbox.stalled.length + inbox.compensationFailed.length + inbox.deadLettered.length;
    const el = $("#attention-count");
    el.textContent = n;
    el.hidden = n === 0;
  } catch { /* the main view shows API problems */ }
}

// ---- the instance list -----------------------------------------------------------------------------

function filterForm(params) {
  // a refused value is shown as typed: a datetime-local input would blank one it cannot parse
  const asTyped = (name, type) => (type === "datetime-local" && params.get(name)
    && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?$/.test(params.get(name)) ? "text" : type);
  const field = (label, name, type = "text") =>
    h("label", {}, label, h("input", { name, type: asTyped(name, type), value: params.get(name) || "" }));
  const status = h("select", { name: "status" }, h("option", { value: "" }, "any"),
    STATUSES.map((s) => h("option", { value: s, selected: params.get("status") === s }, s)));
  const form = h("form", { class: "filters card", role: "search", "aria-label": "Filter instances" },
    h("label", {}, "Status", status),
    field("Workflow", "workflow"), field("Version", "version"), field("Business key starts with", "businessKey"),
    field("Started from", "startedFrom", "datetime-local"), field("Started before", "startedTo", "datetime-local"),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: "needsAttention", value: "true",
      checked: params.get("needsAttention") === "true" }), "Needs attention"),
    h("label", { class: "check" }, h("input", { type: "checkbox", name: "canary", value: "include",
      checked: params.get("canary") === "include" }), "Canary runs"),
    h("button", { type: "submit", class: "primary" }, "Apply filters"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
    location.hash = "#/?" + q.toString();
  });
  return form;
}

function query(params, continuation) {
  const q = new URLSearchParams();
  for (const [k, v] of params) {
    if (!v) continue;
    // a datetime-local value is the operator's UTC time: seconds and "Z" added where it has none
    const utc = /T\d{2}:\d{2}$/.test(v) ? v + ":00Z" : /T\d{2}:\d{2}:\d{2}(\.\d+)?$/.test(v) ? v + "Z" : v;
    q.set(k, k.startsWith("started") ? utc : v);
  }
  if (continuation) q.set("continuation", continuation);
  return q.toString();
}

function instanceRows(list) {
  if (!list.length) return h("p", { class: "empty" }, "No instances match these filters.");
  return h("div", { class: "table-wrap" }, h("table", { id: "instances" },
    h("thead", {}, h("tr", {}, ["Instance", "Workflow", "Version", "Status", "Business key", "Started", "Updated", "Attention"]
      .map((c, i) => h("th", { scope: "col", class: i === 2 || i === 6 ? "wide" : null }, c)))),
    h("tbody", {}, list.map((r) => h("tr", { "data-instance": r.instanceId },
      h("td", { class: "id" }, link(r.instanceId)), h("td", {}, r.workflow), h("td", { class: "wide" }, r.version ?? ""),
      h("td", {}, badge(r.status)), h("td", {}, r.businessKey || ""), h("td", {}, fmt(r.startedAt)),
      h("td", { class: "wide" }, fmt(r.updatedAt)), h("td", {}, r.needsAttention ? (r.attentionReason || "yes") : ""))))));
}

async function renderList(params, first) {
  let page;
  try {
    page = await api("/instances?" + query(params));
  } catch (err) {
    if (!(err instanceof ApiProblem) || err.status >= 500 || err.status === 401 || err.status === 403) throw err;
    // the API refused a filter: keep the form with the refused value, and say why next to it
    state.view = "list-refused";
    const box = h("div", { id: "filter-problem", class: "problem", role: "alert" });
    problemBox(box, err);
    $("#main").replaceChildren(h("h1", {}, "Workflow instances"), filterForm(params), box);
    return;
  }
  if (!first && state.view === "list" && state.continuation && state.instances.length > page.instances.length) {
    return; // the operator loaded more pages: do not pull them away under their eyes
  }
  const main = $("#main");
  const inPlace = !first && state.view === "list" && main.querySelector("#rows");
  state.view = "list";
  state.instances = page.instances;
  state.continuation = page.continuation;
  if (inPlace) { // live refresh: new rows, the filter form (and what the operator types) untouched
    const rowsEl = main.querySelector("#rows");
    // A keyboard user tabbing through the rows keeps their place: focus returns to the same link.
    const focused = rowsEl.contains(document.activeElement) ? document.activeElement.getAttribute("href") : null;
    rowsEl.replaceChildren(instanceRows(state.instances));
    if (focused) {
      const again = [...rowsEl.querySelectorAll("a")].find((a) => a.getAttribute("href") === focused);
      if (again) again.focus();
    }
    main.querySelector("#more").hidden = !page.continuation;
    return;
  }
  const more = h("button", { type: "button", id: "more", hidden: !page.continuation }, "Load more");
  const rows = h("div", { id: "rows" }, instanceRows(state.instances));
  more.addEventListener("click", async () => {
    try {
      const next = await api("/instances?" + query(params, state.continuation));
      state.instances = state.instances.concat(next.instances);
      state.continuation = next.continuation;
      rows.replaceChildren(instanceRows(state.instances));
      more.hidden = !next.continuation;
    } catch (err) { showProblem(err); }
  });
  main.replaceChildren(h("h1", {}, "Workflow instances"), filterForm(params), h("h2", {}, "Newest first"), rows, more);
}

// ---- the attention inbox ---------------------------------------------------------------------------

function stepRows(id, steps, kind) {
  if (!steps.length) return h("p", { class: "empty" }, `Nothing ${kind}.`);
  return h("div", { class: "table-wrap" }, h("table", { "data-inbox": kind },
    h("thead", {}, h("tr", {}, ["Instance", "Step", "Status", "Attempt", "Deadline", "Last error", ""].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, steps.map((s) => h("tr", {},
      h("td", { class: "id" }, link(s.instanceId)), h("td", {}, s.id), h("td", {}, badge(s.status)),
      h("td", {}, s.attempt), h("td", {}, fmt(s.deadline)), h("td", {}, s.lastError || ""),
      h("td", {}, stepButtons(s.instanceId, s)))))));
}

async function renderAttention() {
  const inbox = await api("/attention");
  state.view = "attention";
  $("#main").replaceChildren(
    h("h1", {}, "Needs attention"),
    h("h2", {}, "Compensation failed: no automation will move these on"), stepRows(null, inbox.compensationFailed, "compensation-failed"),
    h("h2", {}, "Stalled: past their deadline"), stepRows(null, inbox.stalled, "stalled"),
    h("h2", {}, "Dead-lettered work messages"), stepRows(null, inbox.deadLettered, "dead-lettered"),
    h("h2", {}, "Instances flagged by the supervisor"), instanceRows(inbox.instances),
    h("h2", {}, "Agents' circuits not closed"), circuitLines(inbox.circuits || []));
}

function circuitLines(circuits) {
  // docs/agent-limits.md: each line as the API words it; an operator opens/closes with `sas circuit`
  if (!circuits.length) return h("p", { class: "empty" }, "Every circuit is closed.");
  return h("ul", { "data-inbox": "circuits" }, circuits.map((c) => h("li", {}, c.text)));
}

// ---- one instance ----------------------------------------------------------------------------------

function stepButtons(instanceId, step) {
  const can = {
    retry: ["Failed", "TimedOut", "CompensationFailed"].includes(step.status),
    skip: !["Succeeded", "Compensated", "Skipped", "Cancelled", "Compensating"].includes(step.status),
  };
  const why = {
    retry: "only a Failed, TimedOut or CompensationFailed step can be retried",
    skip: `a ${step.status} step cannot be skipped`,
  };
  return h("span", { class: "actions" }, ["retry", "skip"].map((action) => h("button", {
    type: "button", "data-action": action, "data-step": step.id, "aria-label": `${action} step ${step.id}`,
    class: can[action] ? null : "muted", disabled: !can[action], title: can[action] ? null : why[action],
    onclick: (e) => confirmAction(e.currentTarget, `${action} step ${step.id} of ${instanceId}`,
      `/instances/${encodeURIComponent(instanceId)}/steps/${encodeURIComponent(step.id)}/${action}`, explain[action]),
  }, action[0].toUpperCase() + action.slice(1))));
}

const explain = {
  retry: "A Failed or TimedOut step is retried now; a CompensationFailed step runs its compensator again. The watchdog carries it out on its next tick.",
  skip: "The step is marked Skipped: it needs no (more) work and leaves the watchdog's worklist for good.",
  compensate: "The watchdog starts the compensation, which undoes every completed step in reverse order.",
  resume: "The watchdog resumes the workflow from the ledger's state on its next tick.",
  stop: "The instance is marked Stopped with your name and reason, then its orchestration is terminated. Steps already done stay done (nothing is undone), no later step runs, and the watchdog never resumes it; it waits in the attention inbox until someone cancels it.",
  cancel: "The instance is marked Compensating with your name and reason, then its orchestration is terminated; the watchdog then undoes every completed step in reverse order. No later step runs.",
};

function summary(d) {
  const r = d.record || {};
  const item = (k, v) => [h("dt", {}, k), h("dd", {}, v ?? "–")];
  return h("dl", { class: "summary card" },
    item("Status", badge(r.status || d.runtimeStatus)), item("Orchestration", d.runtimeStatus),
    item("Workflow", d.workflow || "?"), item("Version", r.version), item("Business key", r.businessKey),
    item("Started", fmt(r.startedAt)), item("Updated", fmt(r.updatedAt)), item("Completed", fmt(r.completedAt)),
    item("Scheduler deadline", fmt(r.schedulerDeadline)), item("Resumes", r.resumeCount != null ? `${r.resumeCount} of ${r.maxResumes}` : null),
    item("Needs attention", r.needsAttention ? r.attentionReason || "yes" : "no"), item("Last error", r.lastError));
}

const INSTANCE_ACTION_STATUSES = {
  compensate: ["Running", "Failed", "CompensationFailed"],
  resume: ["Running", "Failed"],
  stop: ["Running", "Failed"],
  cancel: ["Running", "Failed", "Stopped"],
};

function instanceActions(d) {
  const id = d.instanceId;
  const status = (d.record || {}).status;
  return h("div", { class: "actions", role: "group", "aria-label": "Instance actions" },
    Object.keys(INSTANCE_ACTION_STATUSES).map((action) => {
      const can = !status || INSTANCE_ACTION_STATUSES[action].includes(status);
      return h("button", {
      type: "button", "data-action": action, class: action === "stop" || action === "cancel" ? "danger" : null,
      "data-expected": action === "stop" || action === "cancel" ? status : null,
      disabled: !can, title: can ? null : `the instance is ${status}; ${action} applies only to ${INSTANCE_ACTION_STATUSES[action].join(", ")} instances`,
      onclick: (e) => confirmAction(e.currentTarget, `${action} instance ${id}`, `/instances/${encodeURIComponent(id)}/${action}`, explain[action]),
    }, action[0].toUpperCase() + action.slice(1));
    }));
}

function payload(label, p) {
  if (!p) return null;
  const text = p.truncated ? p.preview + "\n… (" + p.size + " characters, cut)" : JSON.stringify(p.value, null, 2);
  return h("details", {}, h("summary", {}, label), h("pre", {}, text));
}

function lastError(step) {
  // As of the current attempt: an earlier attempt's error is named as such, never as this one's.
  if (step.waiting) return h("span", { class: "muted" }, `waiting: ${step.waiting}`); // agent limits
  if (step.lastError) return step.lastError;
  if (!step.earlierError) return "";
  return h("span", { class: "muted" }, `none in attempt ${step.attempt} (attempt ${step.earlierError.attempt}: ${step.earlierError.error})`);
}

async function renderInstance(id, first) {
  const d = await api(`/instances/${encodeURIComponent(id)}`);
  state.view = "instance";
  const main = $("#main");
  const steps = h("div", { class: "table-wrap" }, h("table", { id: "steps" },
    h("thead", {}, h("tr", {}, ["#", "Step", "Status", "Attempt", "Deadline", "Heartbeat", "Owner", "Last error", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, d.steps.map((s) => h("tr", { "data-step": s.id },
      h("td", {}, s.sequence), h("td", {}, s.id, payload("input", s.input), payload("output", s.output)),
      h("td", { class: "step-status" }, badge(s.status)), h("td", {}, `${s.attempt}/${s.maxAttempts}`), h("td", {}, fmt(s.deadline)),
      h("td", {}, fmt(s.lastHeartbeat)), h("td", {}, s.owner || ""), h("td", {}, lastError(s)), h("td", {}, stepButtons(id, s)))))));
  const audit = h("div", { class: "table-wrap" }, h("table", { id: "audit" },
    h("thead", {}, h("tr", {}, ["At (UTC)", "Step", "Actor", "Action", "Move", "Attempt", "Reason"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, d.audit.map((a) => h("tr", {}, h("td", {}, fmt(a.at)), h("td", {}, a.step), h("td", {}, a.actor), h("td", {}, a.action),
      h("td", {}, a.from && a.from !== a.to ? `${a.from} → ${a.to}` : a.to || ""), h("td", {}, a.attempt ?? ""), h("td", {}, a.reason))))));
  const focusInside = main.contains(document.activeElement) && document.activeElement !== main;
  const chart = h("div", { class: "gantt card", id: "gantt" });
  const parts = [h("h1", {}, `Instance ${id}`), summary(d), instanceActions(d), payload("workflow input", d.input), payload("outcome", d.outcome),
    h("h2", {}, "Timeline"), chart, legend(), h("h2", {}, "Steps"), steps, h("h2", {}, "Audit trail (ledger order)"), audit];
  if (first || !focusInside) main.replaceChildren(...parts);
  else { // keep the operator's focus: update the chart and the tables in place
    main.querySelector("#gantt").replaceWith(chart);
    main.querySelector("#steps").closest(".table-wrap").replaceWith(steps);
    main.querySelector("#audit").closest(".table-wrap").replaceWith(audit);
    main.querySelector(".summary").replaceWith(summary(d));
  }
  drawGantt(chart, d);
}

function legend() {
  return h("div", { class: "legend", "aria-hidden": "true" },
    Object.entries(COLORS).map(([k, c]) => h("span", {}, h("i", { style: `background:${c}` }), k)),
    h("span", {}, "▲ operator"), h("span", {}, "◆ watchdog"), h("span", {}, "| heartbeat"), h("span", {}, "┆ deadline"));
}

// ---- the Gantt-style timeline ----------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) {
    const title = document.createElementNS(SVG, "title");
    title.textContent = text;
    el.append(title);
  }
  return el;
}

function segments(d) {
  // Per step, one bar per status held, from the transition into it to the next one (ledger order).
  // A live instance's bars run to now; a settled one's axis ends at its last event (a demo's fast
  // clock, or an instance looked at days later, would otherwise squeeze its whole life to the left).
  const live = !d.record || ["Running", "Compensating"].includes(d.record.status);
  const lastEvent = Math.max(...d.audit.map((a) => Date.parse(a.at)));
  const end = live ? Math.max(Date.parse(d.now), lastEvent) : lastEvent;
  const rows = d.steps.map((st) => ({ step: st, bars: [], marks: [] }));
  const byId = Object.fromEntries(rows.map((r) => [r.step.id, r]));
  for (const a of d.audit) {
    const row = byId[a.step];
    const at = Date.parse(a.at);
    if (!row) continue;
    const who = a.actor.startsWith("operator:") ? "operator" : a.actor.startsWith("supervisor") ? "watchdog" : null;
    if (a.action === "transition") {
      const last = row.bars[row.bars.length - 1];
      if (last) last.to = at;
      row.bars.push({ status: a.to, from: at, to: end, attempt: a.attempt, reason: a.reason, actor: a.actor });
    } else if (a.action === "heartbeat") row.marks.push({ kind: "heartbeat", at, text: `heartbeat ${fmt(a.at)}` });
    if (who) row.marks.push({ kind: who, at, text: `${a.actor}: ${a.action} ${a.to || ""} ${a.reason}` });
  }
  for (const row of rows) if (row.step.deadline && (live || Date.parse(row.step.deadline) <= end)) row.marks.push({ kind: "deadline", at: Date.parse(row.step.deadline), text: `deadline ${fmt(row.step.deadline)}` });
  const start = Math.min(...d.audit.map((a) => Date.parse(a.at)), end);
  const last = Math.max(end, ...rows.flatMap((r) => r.marks.map((m) => m.at)));
  return { rows, start, end: last > start ? last : start + 1000 };
}

function drawGantt(box, d) {
  const { rows, start, end } = segments(d);
  const width = Math.max(box.clientWidth - 2, 520);
  const label = Math.min(180, width * 0.3), rowH = 30, top = 24, plot = width - label - 12;
  const x = (t) => label + ((t - start) / (end - start)) * plot;
  const svg = s("svg", { width, height: top + rows.length * rowH + 8, role: "img",
    "aria-label": `Timeline of ${rows.length} steps from ${fmt(new Date(start).toISOString())} to ${fmt(new Date(end).toISOString())}` });
  for (let i = 0; i <= 4; i++) {
    const t = start + ((end - start) * i) / 4;
    svg.append(s("line", { x1: x(t), x2: x(t), y1: top - 6, y2: top + rows.length * rowH, stroke: "#e3e7ee" }));
    const tick = s("text", { x: x(t), y: 12, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle", fill: "#5b6577" });
    tick.textContent = new Date(t).toISOString().slice(11, 19);
    svg.append(tick);
  }
  rows.forEach((row, i) => {
    const y = top + i * rowH;
    const name = s("text", { x: 4, y: y + 19, fill: "#1d2330" });
    name.textContent = row.step.id.length > 24 ? row.step.id.slice(0, 23) + "…" : row.step.id;
    svg.append(name);
    for (const b of row.bars) {
      const w = Math.max(x(b.to) - x(b.from), 2);
      svg.append(s("rect", { x: x(b.from), y: y + 6, width: w, height: rowH - 12, rx: 3, fill: COLORS[b.status] || "#999",
        class: "bar", "data-step": row.step.id, "data-status": b.status },
        `${row.step.id}: ${b.status}${b.attempt ? " (attempt " + b.attempt + ")" : ""} from ${fmt(new Date(b.from).toISOString())} — ${b.actor} ${b.reason || ""}`));
      if (b.status === "Dispatched" && w > 18) {
        const t = s("text", { x: x(b.from) + 3, y: y + 19, fill: "#fff", "font-size": 11 });
        t.textContent = "#" + b.attempt;
        svg.append(t);
      }
    }
    for (const m of row.marks) {
      const mx = x(m.at);
      if (m.kind === "deadline") svg.append(s("line", { x1: mx, x2: mx, y1: y + 2, y2: y + rowH - 2, stroke: "#c2352b", "stroke-dasharray": "3 2", "stroke-width": 2, class: "deadline" }, m.text));
      else if (m.kind === "heartbeat") svg.append(s("line", { x1: mx, x2: mx, y1: y + 8, y2: y + rowH - 8, stroke: "#fff", "stroke-width": 2 }, m.text));
      else {
        const path = m.kind === "operator" ? `M${mx - 6},${y + rowH} L${mx + 6},${y + rowH} L${mx},${y + rowH - 10}Z` : `M${mx},${y - 1} L${mx + 6},${y + 5} L${mx},${y + 11} L${mx - 6},${y + 5}Z`;
        svg.append(s("path", { d: path, fill: m.kind === "operator" ? "#1d2330" : "#b86e00", stroke: "#fff", class: m.kind }, m.text));
      }
    }
  });
  box.replaceChildren(svg);
}

// ---- the confirm-and-reason dialog -----------------------------------------------------------------

function confirmAction(button, title, path, text) {
  const dialog = $("#confirm");
  state.lastFocus = button;
  $("#confirm-title").textContent = title[0].toUpperCase() + title.slice(1) + "?";
  $("#confirm-text").textContent = text || "";
  $("#confirm-reason").value = "";
  problemBox($("#confirm-problem"), null);
  dialog.dataset.path = path;
  // one idempotency key per click: submitting the dialog twice (or a retry after a lost answer) acts once
  dialog.dataset.key = crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`;
  dialog.dataset.expected = button.dataset.expected || "";
  dialog.showModal();
  $("#confirm-reason").focus();
}

async function submitAction(e) {
  e.preventDefault();
  const dialog = $("#confirm");
  const reason = $("#confirm-reason").value.trim();
  if (!reason) {
    problemBox($("#confirm-problem"), new ApiProblem(400, { error: "a reason is required", details: ["say why: it is recorded in the audit trail with your name"] }));
    $("#confirm-reason").focus();
    return;
  }
  $("#confirm-ok").disabled = true;
  try {
    const body = { reason, ...(dialog.dataset.expected ? { expectedStatus: dialog.dataset.expected } : {}) };
    const result = await api(dialog.dataset.path, { method: "POST", body: JSON.stringify(body), headers: { "Idempotency-Key": dialog.dataset.key } });
    dialog.close();
    const what = result.step ? `step ${result.step.id} is now ${result.step.status}` : result.instance ? `instance is ${result.instance.status}` : "done";
    notice(`${result.action} recorded as ${result.actor}: ${what}.`);
    await render(false);
    if (state.lastFocus && document.contains(state.lastFocus)) state.lastFocus.focus();
  } catch (err) {
    problemBox($("#confirm-problem"), err);
  } finally {
    $("#confirm-ok").disabled = false;
  }
}

$("#confirm-form").addEventListener("submit", submitAction);
$("#confirm-cancel").addEventListener("click", () => $("#confirm").close());
$("#confirm").addEventListener("close", () => { if (state.lastFocus && document.contains(state.lastFocus)) state.lastFocus.focus(); });
$("#live").addEventListener("change", schedule);
// The skip link moves focus to the content without touching the URL: "#main" is not a route, and a
// hash change would re-render the view (and the next refresh would leave an instance page for the list).
$("a.skip").addEventListener("click", (event) => { event.preventDefault(); $("#main").focus(); });
window.addEventListener("hashchange", async () => { notice(""); await render(true); $("#main").focus(); schedule(); });
window.addEventListener("resize", () => { if (state.view === "instance") render(false); });
render(true).then(schedule);
