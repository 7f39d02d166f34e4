// The recovery canary in the console: the header badge ("recovery verified N min ago", red when the last
// verdict failed or none passed recently; grey "off" with how to turn it on when CANARY_ENABLED is off)
// on every page, and the history table on canary.html.
// Reads GET /api/canary only; times are the server's ("now" in the answer), not the browser's.
"use strict";

(function () {
  const API = location.pathname.replace(/\/console(\/.*)?$/, "");
  const KEY = new URLSearchParams(location.search).get("code");
  const REFRESH_MS = 60000;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  async function load() {
    const headers = { Accept: "application/json" };
    if (KEY) headers["x-functions-key"] = KEY;
    const response = await fetch(`${API}/canary?limit=20`, { headers });
    if (!response.ok) throw new Error(`the API answered ${response.status}`);
    return response.json();
  }

  function minutesAgo(now, then) {
    return Math.max(0, Math.floor((Date.parse(now) - Date.parse(then)) / 60000));
  }

  const TURN_ON = "set CANARY_ENABLED=true (docs/operations.md, \"Recovery canary\")";

  function hintOf(data) {  // GET /api/canary's hint when it sends one
    return String(data.hint || TURN_ON).replace(/\.$/, "");
  }

  function drawBadge(badge, data) {
    const ok = data.state === "passed";
    const off = data.state === "off";
    badge.classList.toggle("canary-ok", ok);
    badge.classList.toggle("canary-bad", !ok && !off);
    badge.classList.toggle("canary-off", off);
    badge.dataset.state = data.state;
    badge.hidden = false;
    if (off) {  // nothing is wrong: nobody turned it on
      badge.textContent = "recovery canary off · CANARY_ENABLED=true turns it on";
      badge.title = `the recovery canary is off: ${hintOf(data)}`;
      return;
    }
    let text = data.last_passed_at
      ? `recovery verified ${minutesAgo(data.now, data.last_passed_at)} min ago`
      : "recovery not verified yet";
    if (data.state === "failed") text += " · last check failed";
    else if (data.state === "stale") text += " · stale";
    badge.textContent = text;
    const failing = Object.entries(data.pools || {}).filter(([, p]) => p.state === "failed").map(([n]) => n);
    const where = failing.length ? ` (failed in pool ${failing.join(", ")})` : "";
    badge.title = `recovery canary: ${data.state}${where}${data.enabled ? "" : " (CANARY_ENABLED is off)"}`;
    badge.hidden = false;
  }

  function drawHistory(main, data) {
    main.replaceChildren();
    main.append(el("h1", "Recovery canary"));
    if (data.state === "off") {
      main.append(el("p", `The recovery canary is off: ${hintOf(data)}.`, "canary-off-hint"));
    }
    main.append(el("p", `State: ${data.state}. Last passed: ${data.last_passed_at || "never"}.`, "muted"));
    // Each pool's own state: a pool whose last verdict failed is red even when another pool passed.
    const pools = Object.entries(data.pools || {});
    if (pools.length) {
      const list = el("ul", null, "canary-pools");
      for (const [name, p] of pools) {
        list.append(el("li", `pool ${name}: ${p.state}; last passed ${p.last_passed_at || "never"}`, `verdict-${p.state}`));
      }
      main.append(list);
    }
    if (!data.verdicts.length) {
      main.append(el("p", "No verdict yet: the canary timer records one after each run (docs/operations.md)."));
      return;
    }
    const table = el("table", null, "canary-history");
    const head = el("tr");
    for (const name of ["Judged", "Scenario", "Pool", "Outcome", "Recovery", "Bound", "Instance", "Cause"]) {
      head.append(el("th", name));
    }
    const thead = el("thead");
    thead.append(head);
    table.append(thead);
    const body = el("tbody");
    for (const v of data.verdicts) {
      const row = el("tr", null, `verdict-${v.outcome}`);
      const link = el("a", v.instance_id);
      link.href = `./${location.search}#/instance/${encodeURIComponent(v.instance_id)}`;
      const cells = [
        v.at, v.scenario, v.pool, v.outcome,
        v.recovery_seconds === null ? "–" : `${Math.round(v.recovery_seconds)} s`,
        `${Math.round(v.expected_seconds)} s`, link, v.cause || "",
      ];
      for (const cell of cells) {
        const td = el("td");
        td.append(typeof cell === "string" ? document.createTextNode(cell) : cell);
        row.append(td);
      }
      body.append(row);
    }
    table.append(body);
    main.append(table);
  }

  async function refresh() {
    const badge = document.getElementById("canary-badge");
    const history = document.getElementById("canary-main");
    try {
      const data = await load();
      if (badge) drawBadge(badge, data);
      if (history) drawHistory(history, data);
    } catch (err) {
      if (badge) {
        badge.classList.remove("canary-ok");
        badge.classList.add("canary-bad");
        badge.dataset.state = "unknown";
        badge.textContent = "recovery canary unavailable";
        badge.hidden = false;
      }
      if (history) history.replaceChildren(el("p", `Cannot read the canary: ${err.message}`, "problem"));
    }
  }

  const badge = document.getElementById("canary-badge");
  if (badge) badge.href = `canary.html${location.search}`;
  refresh();
  setInterval(refresh, REFRESH_MS);
})();
