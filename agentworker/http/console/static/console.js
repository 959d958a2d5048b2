// The turn console's only script: live fragments, the SSE timeline, answers to waiting turns.
// Every call goes to the API with the session cookie; writes also send the console header,
// which a cross-site form cannot.
"use strict";

const CONSOLE_HEADER = { "x-agentworker-console": "1" };
const POLL_MS = 2000;
const REFRESH_MS = 500;

async function refresh(el) {
  const response = await fetch(el.dataset.live || el.dataset.refresh, { credentials: "same-origin" });
  if (response.redirected || response.status === 401) {
    window.location = "/console/login";
    return;
  }
  if (!response.ok) return;
  const html = await response.text();
  if (el.id === "inbox") {
    // Keep a half-typed reason: swap the inbox only when what waits has changed.
    const next = document.createElement("div");
    next.innerHTML = html;
    const before = el.querySelector("ul.inbox");
    const after = next.querySelector("ul.inbox");
    if (before && after && before.dataset.ids === after.dataset.ids) return;
  }
  if (el.id === "turn-body" && el.contains(document.activeElement) &&
      document.activeElement.tagName === "INPUT") {
    return;
  }
  el.innerHTML = html;
  wire(el);
  layout(el);
}

function poll() {
  for (const el of document.querySelectorAll("[data-live]")) {
    refresh(el).catch(() => {});
  }
}

let pending = null;
function refreshAll() {
  // A burst of committed events (a batch of tool results) costs one round of fetches.
  if (pending) return;
  pending = setTimeout(() => {
    pending = null;
    for (const el of document.querySelectorAll("[data-live], [data-refresh]")) {
      refresh(el).catch(() => {});
    }
  }, REFRESH_MS);
}

function layout(root) {
  // Bars are placed here: the page's CSP allows no inline style attributes.
  for (const page of root.querySelectorAll(".waterfall-page")) {
    const t0 = parseFloat(page.dataset.t0);
    const span = Math.max(parseFloat(page.dataset.t1) - t0, 0.001);
    for (const bar of page.querySelectorAll(".bar")) {
      const start = parseFloat(bar.dataset.start);
      const seconds = parseFloat(bar.dataset.seconds);
      bar.style.marginLeft = `${Math.min(99.5, (start / span) * 100)}%`;
      bar.style.width = `${Math.max(0.5, Math.min(100, (seconds / span) * 100))}%`;
    }
  }
}

async function post(path, payload, box) {
  const error = box.closest(".turn-actions, .batch, .card")?.querySelector(".error");
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json", ...CONSOLE_HEADER },
    body: JSON.stringify(payload),
  });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    if (error) {
      error.hidden = false;
      error.textContent = (body.error && body.error.message) || `HTTP ${response.status}`;
    }
    return false;
  }
  refreshAll();
  return true;
}

async function copy(button) {
  const text = button.dataset.copy;
  const shown = button.parentElement.querySelector(".copied");
  shown.hidden = false;
  shown.textContent = text;
  try {
    await navigator.clipboard.writeText(text);
    shown.dataset.state = "copied";
  } catch (e) {
    // No clipboard (an insecure origin, a headless browser): the text is shown to select.
    shown.dataset.state = "shown";
    const range = document.createRange();
    range.selectNodeContents(shown);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
}

async function resume(turnId, payload, box) {
  // The answered part: one call of several, the batch, or the whole card.
  const part = box.closest(".call, .batch, .card, li");
  const error = part.querySelector(".error");
  const response = await fetch(`/turns/${encodeURIComponent(turnId)}/resume`, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json", ...CONSOLE_HEADER },
    body: JSON.stringify({ ...payload, metadata: { via: "console" } }),
  });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    if (error) {
      error.hidden = false;
      error.textContent = (body.error && body.error.message) || `HTTP ${response.status}`;
    }
    return;
  }
  part.classList.add("answered");
  poll();
}

function fieldFor(name, prop, required) {
  const label = document.createElement("label");
  label.textContent = (prop.title || name) + " ";
  let input;
  if (Array.isArray(prop.enum)) {
    input = document.createElement("select");
    for (const value of prop.enum) {
      const option = document.createElement("option");
      option.value = JSON.stringify(value);
      option.textContent = String(value);
      input.append(option);
    }
  } else {
    input = document.createElement("input");
    input.type = prop.type === "boolean" ? "checkbox"
      : (prop.type === "number" || prop.type === "integer") ? "number" : "text";
    if (prop.type === "number") input.step = "any";
  }
  input.name = name;
  input.dataset.type = prop.type || "string";
  if (required && input.type !== "checkbox") input.required = true;
  label.append(input);
  return label;
}

function valueOf(input) {
  if (input.tagName === "SELECT") return JSON.parse(input.value);
  if (input.type === "checkbox") return input.checked;
  if (input.dataset.type === "integer") return parseInt(input.value, 10);
  if (input.dataset.type === "number") return parseFloat(input.value);
  return input.value;
}

function buildForm(form) {
  if (form.dataset.built) return;
  form.dataset.built = "1";
  const schema = JSON.parse(form.dataset.schema || "{}");
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const names = Object.keys(props);
  if (names.length === 0) {
    form.append(fieldFor("text", { type: "string", title: "answer" }, true));
  }
  for (const name of names) form.append(fieldFor(name, props[name], required.has(name)));
  const submit = document.createElement("button");
  submit.type = "submit";
  submit.className = "submit";
  submit.textContent = "Send";
  form.append(submit);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const inputs = [...form.querySelectorAll("input, select")];
    const data = names.length === 0 ? inputs[0].value
      : Object.fromEntries(inputs.map((input) => [input.name, valueOf(input)]));
    resume(form.dataset.turn, { command: "user_input", call_id: form.dataset.call, data }, form);
  });
}

function wire(root) {
  for (const button of root.querySelectorAll(".actions button")) {
    if (button.dataset.wired) continue;
    button.dataset.wired = "1";
    button.addEventListener("click", () => {
      const box = button.closest(".actions");
      const reason = box.querySelector(".reason").value;
      resume(box.dataset.turn, { command: button.dataset.command, call_id: box.dataset.call, reason }, box);
    });
  }
  for (const button of root.querySelectorAll(".batch button.approve-all")) {
    if (button.dataset.wired) continue;
    button.dataset.wired = "1";
    button.addEventListener("click", () => {
      const box = button.closest(".batch");
      const callIds = box.dataset.calls.split(" ").filter(Boolean);
      resume(box.dataset.turn, { command: "approve_tools", call_ids: callIds }, box);
    });
  }
  for (const button of root.querySelectorAll(".batch button.reject-all")) {
    once(button, () => {
      const box = button.closest(".batch");
      const reason = box.querySelector(".reason-all").value;
      const reasons = Object.fromEntries(
        box.dataset.calls.split(" ").filter(Boolean).map((id) => [id, reason]));
      resume(box.dataset.turn, { command: "reject_tools", reasons }, box);
    });
  }
  for (const button of root.querySelectorAll("button.cancel-turn")) {
    once(button, () => {
      const box = button.closest(".cancel");
      const reason = box.querySelector(".cancel-reason").value || null;
      post(`/turns/${encodeURIComponent(box.dataset.turn)}/cancel`, { reason }, box);
    });
  }
  for (const button of root.querySelectorAll("button.retry-now")) {
    once(button, () => {
      const box = button.closest(".retry");
      const payload = { command: "continue_turn", metadata: { via: "console" } };
      post(`/turns/${encodeURIComponent(box.dataset.turn)}/resume`, payload, box);
    });
  }
  for (const button of root.querySelectorAll("button.copy")) once(button, () => copy(button));
  for (const form of root.querySelectorAll("form.user-input")) buildForm(form);
}

function once(button, handler) {
  if (button.dataset.wired) return;
  button.dataset.wired = "1";
  button.addEventListener("click", handler);
}

const TIMELINE_KEEP = 500;

function follow(list) {
  // Each event arrives under its own type name (the SSE "event:" line); the page lists them.
  // The page drew the events before the stream's position it asks from; a reconnect may
  // send some again, so committed ones are told apart by turn and sequence.
  const seen = new Set([...list.querySelectorAll("li[data-key]")].map((li) => li.dataset.key));
  const source = new EventSource(list.dataset.stream, { withCredentials: true });
  const add = (event) => {
    const data = JSON.parse(event.data);
    const key = `${data.turn_id}:${data.sequence}`;
    if (!data.provisional) {
      if (seen.has(key)) return;
      seen.add(key);
    }
    const item = document.createElement("li");
    item.className = data.provisional ? "provisional" : "committed";
    item.dataset.type = data.type;
    if (!data.provisional) item.dataset.key = key;
    const seq = data.provisional ? `attempt ${data.attempt ?? "?"}` : `#${data.sequence}`;
    item.textContent = `${seq} ${data.type} · ${String(data.turn_id || "").slice(0, 12)}`;
    list.append(item);
    while (list.children.length > TIMELINE_KEEP) list.firstElementChild.remove();
    if (data.provisional) running(data);
    else refreshAll();
  };
  for (const type of JSON.parse(list.dataset.types || "[]")) source.addEventListener(type, add);
  source.addEventListener("message", add);
}

function running(data) {
  // A call that started shows at once, in grey, until its committed result redraws the rows.
  if (data.type !== "MODEL_STARTED" && data.type !== "TOOL_STARTED") return;
  const box = document.getElementById("waterfall-body");
  const rows = document.getElementById("waterfall-rows");
  if (!box || !rows || box.dataset.turn !== data.turn_id) return;
  const row = document.createElement("tr");
  row.className = "row provisional running";
  row.dataset.kind = data.type === "MODEL_STARTED" ? "model" : "tool";
  const what = data.type === "MODEL_STARTED" ? "model call" : `tool ${data.data?.tool ?? data.tool ?? ""}`;
  for (const text of [what, new Date(data.occurred_at * 1000).toISOString().slice(11, 23), "running…", "", "provisional"]) {
    const cell = document.createElement("td");
    cell.textContent = text;
    row.append(cell);
  }
  for (const empty of rows.querySelectorAll("td.empty")) empty.parentElement.remove();
  rows.append(row);
}

document.addEventListener("DOMContentLoaded", () => {
  wire(document);
  layout(document);
  for (const list of document.querySelectorAll("ol[data-stream]")) follow(list);
  if (document.querySelector("[data-live]")) setInterval(poll, POLL_MS);
});
