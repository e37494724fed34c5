// The Logs page: the server renders the lines that match the filters; this adds the live tail (new
// lines from /api/logs/stream, appended at the bottom unless paused) and applies a level at once.
"use strict";

(() => {
  const list = document.getElementById("log");
  if (!list) return;
  const form = document.getElementById("log-filters");
  const pause = document.getElementById("pause");
  const state = document.getElementById("tail-state");
  // Lines on the page at most; the oldest go first (the download has what the server keeps).
  const LIMIT = 2000;
  // Within this many pixels of the bottom, the view follows new lines; scrolled up, it stays put.
  const FOLLOW_PX = 40;
  let paused = false;
  const held = [];

  form.querySelector('select[name="level"]').addEventListener("change", () => form.requestSubmit());

  function span(className, text) {
    const element = document.createElement("span");
    element.className = className;
    element.textContent = text;
    return element;
  }

  function line(entry) {
    const item = document.createElement("li");
    item.className = `line ${entry.level}` + (entry.of_run ? " of-run" : "");
    item.dataset.seq = entry.seq;
    const time = document.createElement("time");
    time.title = entry.date;
    time.textContent = entry.time;
    item.append(time, " ", span("lvl", entry.level), " ", span("who", entry.logger), " ", span("said", entry.message));
    return item;
  }

  function atBottom() {
    return list.scrollHeight - list.scrollTop - list.clientHeight < FOLLOW_PX;
  }

  function append(entries) {
    if (!entries.length) return;
    const follow = atBottom();
    list.querySelector(".empty")?.remove();
    const last = Number(list.lastElementChild?.dataset.seq || 0);
    for (const entry of entries) if (entry.seq > last) list.append(line(entry));
    while (list.children.length > LIMIT) list.firstElementChild.remove();
    if (follow) list.scrollTop = list.scrollHeight;
  }

  function label() {
    pause.textContent = paused ? (held.length ? `Resume (${held.length} new)` : "Resume") : "Pause";
  }

  pause.addEventListener("click", () => {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    if (!paused) append(held.splice(0));
    label();
  });

  const params = new URLSearchParams(list.dataset.query);
  params.set("after", list.dataset.after);
  const stream = new EventSource(`/api/logs/stream?${params}`);
  stream.addEventListener("line", (event) => {
    const entry = JSON.parse(event.data);
    if (paused) {
      held.push(entry);
      if (held.length > LIMIT) held.shift();
      label();
    } else {
      append([entry]);
    }
  });
  stream.addEventListener("open", () => {
    document.body.classList.add("connected");
    state.textContent = "live";
  });
  stream.addEventListener("error", () => {
    // EventSource reconnects by itself, resuming after the last line it had (Last-Event-ID).
    document.body.classList.remove("connected");
    state.textContent = "reconnecting…";
  });

  list.scrollTop = list.scrollHeight;
})();
