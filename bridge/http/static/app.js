// The dashboard's only script, no build step: JSON API calls with the CSRF value, live updates over
// server-sent events, and the send-policy editor.
"use strict";

const csrf = document.querySelector('meta[name="csrf"]')?.content ?? "";

async function api(method, url, body) {
  const response = await fetch(url, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRF-Token": csrf },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = {};
  try { data = await response.json(); } catch { /* an empty or non-JSON answer */ }
  return { ok: response.ok, status: response.status, data };
}

// What went wrong, in the API's words: an invalid draft names its key and reason.
function problem(result) {
  const d = result.data || {};
  if (d.key && d.reason) return `${d.key}: ${d.reason}`;
  return d.detail || d.error || `the server answered ${result.status}`;
}

function show(element, text, failed) {
  if (!element) return;
  element.textContent = text;
  element.hidden = false;
  element.classList.toggle("error", Boolean(failed));
}

// ---------------------------------------------------------------- actions: <form data-api="POST /url">

document.addEventListener("submit", async (event) => {
  const form = event.target.closest("form[data-api]");
  if (!form) return;
  event.preventDefault();
  if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
  const [method, url] = form.dataset.api.split(" ");
  const fields = Object.fromEntries(new FormData(form, event.submitter));
  delete fields.csrf;
  const result = await api(method, url, fields);
  show(document.getElementById("notice"), result.ok ? (result.data.said || "Done.") : problem(result), !result.ok);
  if (result.ok) form.reset();
  // A refusal may have changed something too (a server that failed to connect counts the attempt).
  refresh();
});

// ---------------------------------------------------------------- live parts of a page

let refreshing = null;
// An event came while the page was being fetched: what it changed may be missing from that fetch.
let stale = false;
// A chat's page follows its one session closely; the overview sums up everything, so on a busy bot
// it is fetched again at most this often.
const REFRESH_MS = document.body.dataset.live === "session" ? 250 : 1500;

// Fetch this page again and swap in every element marked data-live, keeping open tool calls open.
function refresh() {
  if (refreshing) {
    stale = true;
    return;
  }
  stale = false;
  refreshing = setTimeout(async () => {
    // From here on, an event means the fetch below may have missed it.
    stale = false;
    try {
      const response = await fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const old of document.querySelectorAll("[data-live][id]")) {
        const next = fresh.getElementById(old.id);
        if (!next) continue;
        const open = [...old.querySelectorAll("details[open][id]")].map((d) => d.id);
        old.replaceChildren(...next.childNodes);
        for (const id of open) document.getElementById(id)?.setAttribute("open", "");
      }
      document.dispatchEvent(new CustomEvent("bridge:refreshed"));
    } finally {
      refreshing = null;
      if (stale) refresh();
    }
  }, REFRESH_MS);
}

const FEED_LIMIT = 100;
// Delivery states the live feed leaves out: the ordinary course of a message.
const QUIET_STATES = ["sent", "pending"];

function feed(kind, data) {
  const list = document.getElementById("feed");
  if (!list) return;
  list.querySelector(".muted")?.remove();
  const item = document.createElement("li");
  const label = document.createElement("span");
  label.className = "kind";
  label.textContent = kind.replace("_", " ");
  const link = document.createElement("a");
  link.href = `/sessions/${encodeURIComponent(data.session_key || "").replaceAll("%3A", ":")}`;
  link.textContent = data.session_key || "";
  const detail = document.createElement("span");
  detail.textContent = " " + (data.text ?? data.tool ?? data.status ?? "");
  item.append(label, link, detail);
  list.prepend(item);
  while (list.children.length > FEED_LIMIT) list.lastElementChild.remove();
}

function watch() {
  const scope = document.body.dataset.live;
  if (!scope || !window.EventSource) return;
  const session = document.body.dataset.session;
  const stream = new EventSource("/api/events");
  for (const kind of ["message_in", "message_out", "run_started", "run_finished", "tool", "delivery"]) {
    stream.addEventListener(kind, (event) => {
      const data = JSON.parse(event.data);
      if (scope === "session" && data.session_key !== session) return;
      // A row that went out is already on the feed as "message out"; what did not go out is news.
      if (kind !== "delivery" || QUIET_STATES.indexOf(data.state) < 0) feed(kind, data);
      refresh();
    });
  }
  stream.addEventListener("open", () => document.body.classList.add("connected"));
}

// ---------------------------------------------------------------- ages that count up

// How long a run has run or a message waited, as the server writes it (pages.py `age`), kept
// current between refreshes: <span data-since="unix seconds">.
function age(seconds) {
  const whole = Math.max(0, Math.floor(seconds));
  if (whole < 60) return `${whole} s`;
  if (whole < 3600) return `${Math.floor(whole / 60)} min ${whole % 60} s`;
  return `${Math.floor(whole / 3600)} h ${Math.floor((whole % 3600) / 60)} min`;
}

function tick() {
  const now = Date.now() / 1000;
  for (const element of document.querySelectorAll("[data-since]")) {
    const since = Number(element.dataset.since);
    if (since) element.textContent = age(now - since);
  }
}

// ---------------------------------------------------------------- the send-policy editor

function draft(form) {
  const rules = [...form.querySelectorAll("#rules tbody tr.rule")].map((row) => {
    const value = (name) => row.querySelector(`[name="${name}"]`).value.trim();
    const match = {};
    for (const name of ["surface", "chat_type", "key_prefix"]) if (value(name)) match[name] = value(name);
    return { action: value("action"), match };
  });
  return { default: form.querySelector('[name="default"]').value, rules };
}

function policyEditor() {
  const form = document.getElementById("policy-editor");
  if (!form) return;
  const body = form.querySelector("#rules tbody");
  const result = document.getElementById("policy-result");
  form.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-rule]");
    if (!button) return;
    const row = button.closest("tr");
    if (button.dataset.rule === "add") {
      body.append(document.getElementById("rule-template").content.cloneNode(true));
      body.lastElementChild.querySelector("select")?.focus();
    } else if (button.dataset.rule === "remove") {
      row.remove();
    } else if (button.dataset.rule === "up" && row.previousElementSibling) {
      row.previousElementSibling.before(row);
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const saved = await api("PUT", "/api/policy", draft(form));
    show(result, saved.ok ? "Saved to the config file, and live now." : `Not saved. ${problem(saved)}`, !saved.ok);
  });

  const tester = document.getElementById("explain-form");
  tester.addEventListener("submit", async (event) => {
    event.preventDefault();
    const fields = Object.fromEntries(new FormData(tester));
    const request = { key: fields.key.trim(), draft: draft(form) };
    if (fields.surface.trim()) request.surface = fields.surface.trim();
    const answer = await api("POST", "/api/policy/explain", request);
    const out = document.getElementById("explain-out");
    out.hidden = false;
    const action = document.getElementById("explain-action");
    if (answer.ok) {
      action.textContent = answer.data.action;
      action.className = `pill ${answer.data.action}`;
      document.getElementById("explain-reason").textContent = `decided by ${answer.data.reason}`;
      document.getElementById("explain-lines").textContent = answer.data.explain.join("\n");
    } else {
      action.textContent = "invalid";
      action.className = "pill error";
      document.getElementById("explain-reason").textContent = problem(answer);
      document.getElementById("explain-lines").textContent = "";
    }
  });
}

watch();
policyEditor();
setInterval(tick, 1000);
