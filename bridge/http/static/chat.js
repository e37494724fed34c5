// The chat page (templates/chat.html): send a message with the page's CSRF value, and draw what the bot
// says in this chat as it happens, from /chat/events: the answer streaming in, tool activity edited in
// place, notices, the reply. No build step, no library; text only ever goes in as textContent.
"use strict";

(() => {
  const root = document.getElementById("webchat");
  if (!root) return;
  const csrf = document.querySelector('meta[name="csrf"]')?.content ?? "";
  const log = document.getElementById("conversation");
  const form = document.getElementById("chat-form");
  const box = document.getElementById("chat-text");
  const typing = document.getElementById("chat-typing");
  const session = root.dataset.session;
  // Ids of the messages this page sent: the stream tells every page of the chat about them, and this
  // one has drawn them already.
  const mine = new Set();
  // The bubble the answer is streaming into, while one is.
  let streaming = null;
  // From sending a message until the bot has said something back: the conversation is not fetched
  // again meanwhile, so nothing drawn live is lost.
  let busy = false;

  function messageId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  function scrolled() {
    form.scrollIntoView({ block: "end" });
  }

  function bubble(kind, who, text) {
    log.querySelector(".chat-empty")?.remove();
    const item = document.createElement("div");
    item.className = `msg ${kind}`;
    const label = document.createElement("div");
    label.className = "who";
    label.textContent = who;
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    item.append(label, body);
    log.append(item);
    scrolled();
    return item;
  }

  function settled() {
    busy = false;
    typing.hidden = true;
  }

  function endStream(as) {
    if (!streaming) return;
    streaming.classList.remove("streaming");
    if (as) streaming.classList.add(as);
    streaming = null;
  }

  function notify(text, failed) {
    const notice = document.getElementById("notice");
    notice.textContent = text;
    notice.hidden = false;
    notice.classList.toggle("error", Boolean(failed));
  }

  // ---------------------------------------------------------------- what the bot says

  const handlers = {
    delta(data) {
      if (!streaming) streaming = bubble("bot streaming", "bot", "");
      streaming.querySelector(".text").textContent += data.text;
      scrolled();
    },
    item(data) {
      if (data.kind === "activity") {
        // Tool calls follow what streamed so far: that was a preamble, and the answer comes after.
        endStream("preamble");
        bubble("activity", "tools", data.text).dataset.id = data.id;
        return;
      }
      if (data.kind === "reply" && streaming) {
        streaming.querySelector(".text").textContent = data.text;
        streaming.dataset.id = data.id;
        endStream();
      } else {
        endStream();
        const reply = data.kind === "reply";
        bubble(reply ? "bot" : "note", reply ? "bot" : "notice", data.text).dataset.id = data.id;
      }
      settled();
    },
    edit(data) {
      const shown = log.querySelector(`[data-id="${CSS.escape(data.id)}"] .text`);
      if (shown) shown.textContent = data.text;
    },
    typing() {
      typing.hidden = false;
    },
    in(data) {
      if (!mine.has(data.id)) bubble("user", "operator", data.text);
    },
    // The conversation changed through another surface or worker: draw it again from the store.
    stored() {
      if (!busy) reload();
    },
  };

  async function reload() {
    const response = await fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
    if (!response.ok || busy) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const next = fresh.getElementById("conversation");
    if (!next) return;
    log.replaceChildren(...next.childNodes);
    root.dataset.sessionId = fresh.getElementById("webchat")?.dataset.sessionId ?? root.dataset.sessionId;
    typing.hidden = fresh.getElementById("chat-typing")?.hidden ?? typing.hidden;
    streaming = null;
    scrolled();
  }

  const stream = new EventSource(`/chat/events?session=${encodeURIComponent(session)}`);
  for (const [name, handle] of Object.entries(handlers)) {
    stream.addEventListener(name, (event) => handle(JSON.parse(event.data || "{}")));
  }
  stream.addEventListener("open", () => document.body.classList.add("connected"));
  stream.addEventListener("error", () => document.body.classList.remove("connected"));

  // ---------------------------------------------------------------- what the operator says

  async function send() {
    const text = box.value;
    if (!text.trim()) return;
    const id = messageId();
    mine.add(id);
    // What is on the page before this message: gone if it starts a new session (/clear).
    const before = [...log.children];
    const shown = bubble("user", "you", text);
    box.value = "";
    busy = true;
    let answer;
    try {
      answer = await fetch("/api/chat", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify({ session, text, id }),
      });
    } catch {
      answer = null;
    }
    let data = {};
    try { data = answer ? await answer.json() : {}; } catch { /* not JSON */ }
    if (!answer || !answer.ok) {
      shown.classList.add("failed");
      settled();
      box.value = box.value || text;
      notify(`Not sent: ${data.detail || data.error || "the server did not answer"}`, true);
      return;
    }
    document.getElementById("notice").hidden = true;
    const known = root.dataset.sessionId;
    if (known && data.session_id && data.session_id !== known) {
      for (const old of before) old.remove();
    }
    if (data.session_id) root.dataset.sessionId = data.session_id;
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  box.addEventListener("keydown", (event) => {
    // Enter sends; Shift+Enter is a new line (and so is Enter while an input method composes).
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });

  // ---------------------------------------------------------------- the session picker

  const picker = document.getElementById("chat-session");
  const named = document.getElementById("chat-new");
  const name = document.getElementById("chat-new-name");
  picker.addEventListener("change", () => {
    if (picker.value === "") {
      named.hidden = false;
      name.required = true;
      name.focus();
    } else {
      location.assign(`/chat?session=${encodeURIComponent(picker.value)}`);
    }
  });
  document.getElementById("chat-pick").addEventListener("submit", (event) => {
    if (picker.value !== "") return;
    event.preventDefault();
    if (name.value.trim()) location.assign(`/chat?session=${encodeURIComponent(name.value.trim())}`);
  });
  scrolled();
})();
