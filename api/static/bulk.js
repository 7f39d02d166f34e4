// Bulk actions from the instance list: "Act on all N matching" (docs/operations.md, "Bulk operations").
// A dry run first (POST /api/operations with dryRun: it lists, changes nothing) gives the count and a
// sample for the confirmation; only the confirmed request, with the operator's reason, acts. Opening the
// confirmation makes one Idempotency-Key for that intent: a Confirm repeated after a dropped answer
// sends it again and gets the first operation back instead of starting a second one.
"use strict";

const BULK_ACTIONS = ["retry", "skip", "compensate", "resume", "stop", "cancel"];
const BULK_FILTER = { status: "status", workflow: "workflow", version: "version", businessKey: "businessKeyPrefix",
  startedFrom: "startedAfter", startedTo: "startedBefore", needsAttention: "needsAttention" };

function bulkFilter() {
  const params = new URLSearchParams((location.hash.split("?")[1]) || "");
  const filter = {};
  for (const [name, field] of Object.entries(BULK_FILTER)) {
    const v = params.get(name);
    if (!v) continue;
    if (field === "needsAttention") filter[field] = v === "true";
    else if (name.startsWith("started")) filter[field] = v.endsWith("Z") ? v : v + ":00Z";
    else filter[field] = v;
  }
  return filter;
}

function bulkDialog() {
  let dialog = document.getElementById("bulk-confirm");
  if (dialog) return dialog;
  dialog = h("dialog", { id: "bulk-confirm", "aria-labelledby": "bulk-title" },
    h("form", { method: "dialog", id: "bulk-form" },
      h("h2", { id: "bulk-title" }, "Act on all matching?"),
      h("p", { id: "bulk-count" }),
      h("ul", { id: "bulk-sample" }),
      h("label", { for: "bulk-reason" }, "Reason (recorded in every instance's audit trail with your name)"),
      h("textarea", { id: "bulk-reason", rows: "3", required: true }),
      h("div", { id: "bulk-problem", class: "problem", role: "alert", hidden: true }),
      h("div", { class: "buttons" },
        h("button", { type: "button", id: "bulk-cancel" }, "Cancel"),
        h("button", { type: "submit", id: "bulk-ok", class: "primary" }, "Confirm"))));
  document.body.appendChild(dialog);
  dialog.querySelector("#bulk-cancel").addEventListener("click", () => dialog.close());
  dialog.querySelector("#bulk-form").addEventListener("submit", bulkSubmit);
  return dialog;
}

async function bulkPreview(action) {
  const dialog = bulkDialog();
  const filter = bulkFilter();
  problemBox(dialog.querySelector("#bulk-problem"), null);
  try {
    const preview = await api("/operations", { method: "POST",
      body: JSON.stringify({ action, filter, reason: "console preview", dryRun: true }) });
    const found = preview.wouldAct || [];
    dialog.dataset.action = action;
    dialog.dataset.filter = JSON.stringify(filter);
    dialog.dataset.key = crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`;
    dialog.querySelector("#bulk-title").textContent = `${action[0].toUpperCase()}${action.slice(1)} all ${found.length} matching?`;
    dialog.querySelector("#bulk-count").textContent = found.length
      ? `${found.length} instance(s) match these filters; each is acted on once, audited with your name. For example:`
      : "No instance matches these filters: nothing to do.";
    dialog.querySelector("#bulk-sample").replaceChildren(...found.slice(0, 5).map((id) => h("li", {}, id)));
    dialog.querySelector("#bulk-ok").disabled = !found.length;
    dialog.querySelector("#bulk-reason").value = "";
    dialog.showModal();
    dialog.querySelector("#bulk-reason").focus();
  } catch (err) { showProblem(err); }
}

async function bulkSubmit(e) {
  e.preventDefault();
  const dialog = bulkDialog();
  const reason = dialog.querySelector("#bulk-reason").value.trim();
  if (!reason) {
    problemBox(dialog.querySelector("#bulk-problem"), new ApiProblem(400, { error: "a reason is required" }));
    return;
  }
  dialog.querySelector("#bulk-ok").disabled = true;
  try {
    const result = await api("/operations", { method: "POST", headers: { "Idempotency-Key": dialog.dataset.key },
      body: JSON.stringify({ action: dialog.dataset.action, filter: JSON.parse(dialog.dataset.filter), reason }) });
    dialog.close();
    const c = result.counts || {};
    notice(`bulk ${result.action} ${result.id} by ${result.actor}: acted ${c.acted || 0}, skipped ${c.skipped || 0}, ` +
      `failed ${c.failed || 0}${result.done ? "" : "; the rest continue in the background"}.`);
    await render(false);
  } catch (err) {
    problemBox(dialog.querySelector("#bulk-problem"), err);
  } finally {
    dialog.querySelector("#bulk-ok").disabled = false;
  }
}

function bulkBar() {
  const main = document.getElementById("main");
  const form = main.querySelector("form.filters");
  if (!form || main.querySelector("#bulk-bar")) return;
  const select = h("select", { id: "bulk-action", "aria-label": "Bulk action" },
    BULK_ACTIONS.map((a) => h("option", { value: a }, a)));
  const button = h("button", { type: "button", id: "bulk-start" }, "Act on all matching…");
  button.addEventListener("click", () => bulkPreview(select.value));
  form.after(h("div", { id: "bulk-bar", class: "card" }, h("label", {}, "Bulk action ", select), button));
}

new MutationObserver(bulkBar).observe(document.getElementById("main"), { childList: true });
bulkBar();
