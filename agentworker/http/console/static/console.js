// The turn console's only script: live fragments, the SSE timeline, answers to waiting turns.
// Every call goes to the API with the session cookie; writes also send the console header,
// which a cross-site form cannot.
"use strict";

const CONSOLE_HEADER = { "x-agentworker-console": "1" };
const POLL_MS = 2000;

async function refresh(el) {
  const response = await fetch(el.dataset.live, { credentials: "same-origin" });
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
}

function poll() {
  for (const el of document.querySelectorAll("[data-live]")) {
    refresh(el).catch(() => {});
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
  for (const form of root.querySelectorAll("form.user-input")) buildForm(form);
}

function follow(list) {
  // Each event arrives under its own type name (the SSE "event:" line); the page lists them.
  const source = new EventSource(list.dataset.stream, { withCredentials: true });
  const add = (event) => {
    const data = JSON.parse(event.data);
    const item = document.createElement("li");
    item.className = data.provisional ? "provisional" : "committed";
    item.dataset.type = data.type;
    const seq = data.provisional ? `attempt ${data.attempt ?? "?"}` : `#${data.sequence}`;
    item.textContent = `${seq} ${data.type} · ${String(data.turn_id || "").slice(0, 12)}`;
    list.append(item);
    if (!data.provisional) poll();
  };
  for (const type of JSON.parse(list.dataset.types || "[]")) source.addEventListener(type, add);
  source.addEventListener("message", add);
}

document.addEventListener("DOMContentLoaded", () => {
  wire(document);
  for (const list of document.querySelectorAll("ol[data-stream]")) follow(list);
  if (document.querySelector("[data-live]")) setInterval(poll, POLL_MS);
});
