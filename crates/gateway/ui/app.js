// Flynn's web chat and dashboard: a plain client of the gateway's JSON-RPC
// protocol (docs/protocol.md). No framework, no build step, nothing from a
// CDN. Everything a model or a tool wrote reaches the page as text nodes:
// the markdown renderer builds elements itself and never sets innerHTML.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "flynn.token";
const SESSION_KEY = "flynn.session";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// ---------------------------------------------------------------- markdown

const SAFE_URL = /^(https?:|mailto:)/i;

/** Inline markdown of one line or paragraph, as nodes. */
function inline(text) {
  const out = [];
  // Code spans first: nothing inside them is markdown.
  const pattern = /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]]+)\]\(([^)\s]+)\)|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/g;
  let last = 0;
  for (const m of text.matchAll(pattern)) {
    if (m.index > last) out.push(text.slice(last, m.index));
    if (m[2] !== undefined) out.push(el("code", null, m[2].replace(/^ (.*) $/, "$1")));
    else if (m[3] !== undefined) {
      const url = m[4];
      out.push(SAFE_URL.test(url)
        ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, ...inline(m[3]))
        : m[0]);
    } else if (m[5] !== undefined || m[6] !== undefined) out.push(el("strong", null, ...inline(m[5] ?? m[6])));
    else if (m[7] !== undefined || m[8] !== undefined) out.push(el("em", null, ...inline(m[7] ?? m[8])));
    else if (m[9] !== undefined) out.push(el("a", { href: m[9], target: "_blank", rel: "noopener noreferrer" }, m[9]));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

function splitRow(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|")) row = row.slice(0, -1);
  return row.split("|").map((cell) => cell.trim());
}

/** Markdown as a fragment of elements: fenced code, headings, lists,
 * quotes, tables, paragraphs. Raw HTML stays text. */
function markdown(source) {
  const frag = document.createDocumentFragment();
  const lines = source.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+-]*)/);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;
      const code = el("code", fence[2] ? { "data-lang": fence[2] } : null, body.join("\n"));
      frag.append(el("pre", null, code));
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      frag.append(el("h" + Math.min(6, heading[1].length + 2), null, ...inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*\|.*\|\s*$/.test(line) && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}/.test(lines[i + 1])) {
      const head = splitRow(line);
      i += 2;
      const rows = [];
      while (i < lines.length && /^\s*\|.*\|\s*$/.test(lines[i])) rows.push(splitRow(lines[i++]));
      frag.append(el("table", null,
        el("thead", null, el("tr", null, head.map((c) => el("th", null, ...inline(c))))),
        el("tbody", null, rows.map((r) => el("tr", null, r.map((c) => el("td", null, ...inline(c))))))));
      continue;
    }
    if (/^\s*>/.test(line)) {
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) body.push(lines[i++].replace(/^\s*>\s?/, ""));
      frag.append(el("blockquote", null, markdown(body.join("\n"))));
      continue;
    }
    const item = /^\s*([-*+]|\d+[.)])\s+/;
    if (item.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul");
      while (i < lines.length && item.test(lines[i])) {
        let text = lines[i++].replace(item, "");
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !item.test(lines[i])) text += " " + lines[i++].trim();
        list.append(el("li", null, ...inline(text)));
      }
      frag.append(list);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^(\s*(```|~~~)|#{1,6}\s|\s*>|\s*([-*+]|\d+[.)])\s)/.test(lines[i])) {
      para.push(lines[i++]);
    }
    if (!para.length) para.push(lines[i++]);
    const p = el("p");
    para.forEach((text, n) => {
      if (n) p.append(el("br"));
      p.append(...inline(text));
    });
    frag.append(p);
  }
  return frag;
}

// ---------------------------------------------------------------- JSON-RPC

class Rpc {
  constructor(token, onState) {
    this.token = token;
    this.onState = onState;
    this.nextId = 1;
    this.pending = new Map();
    this.subs = new Map();
    this.ws = null;
    this.retry = 500;
    this.closedByUs = false;
    this.ready = null;
  }

  connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}/rpc?token=${encodeURIComponent(this.token)}`;
    this.ready = new Promise((resolve) => {
      const ws = new WebSocket(url);
      this.ws = ws;
      ws.onopen = () => {
        this.retry = 500;
        this.onState("up");
        resolve();
      };
      ws.onmessage = (event) => this.receive(event.data);
      ws.onclose = () => {
        for (const { reject } of this.pending.values()) reject(new Error("the connection closed"));
        this.pending.clear();
        this.subs.clear();
        if (this.closedByUs) return;
        this.onState("down");
        setTimeout(() => this.connect(), this.retry);
        this.retry = Math.min(this.retry * 2, 10000);
      };
    });
    return this.ready;
  }

  close() {
    this.closedByUs = true;
    if (this.ws) this.ws.close();
  }

  receive(data) {
    let message;
    try { message = JSON.parse(data); } catch { return; }
    if (message.id !== undefined && this.pending.has(message.id)) {
      const { resolve, reject } = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (message.error) reject(Object.assign(new Error(message.error.message), { data: message.error }));
      else resolve(message.result);
    } else if (message.method && message.params) {
      const handler = this.subs.get(String(message.params.subscription));
      if (handler) handler(message.params.result);
    }
  }

  async call(method, params) {
    await this.ready;
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) throw new Error("not connected to the daemon");
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params: params || {} }));
    });
  }

  async subscribe(method, params, handler) {
    const id = await this.call(method, params);
    this.subs.set(String(id), handler);
    return id;
  }
}

/** Checks a token with one HTTP call, so a wrong one gets a clear message. */
async function checkToken(token) {
  const response = await fetch("/rpc", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "system.version", params: {} }),
  });
  if (response.status === 401) throw new Error("The daemon refused this token.");
  if (!response.ok) throw new Error(`The daemon answered ${response.status}.`);
  const answer = await response.json();
  // A token without admin keeps to the sessions of its own channel.
  const client = answer.result?.client;
  state.channel = client && !client.admin ? client.namespace : "web";
  return answer;
}

// ---------------------------------------------------------------- the app

const state = {
  rpc: null,
  session: null,
  sessions: [],
  running: false,
  turn: null,
  bubble: null,
  text: "",
  renderQueued: false,
  tools: new Map(),
  confirms: new Map(),
  shownConfirms: new Set(),
  channel: "web",
  cursor: 0,
  subscription: null,
  pendingCommand: false,
};

function setStatus(kind) {
  const status = $("status");
  status.className = "status " + (kind === "up" ? "ok" : "down");
  status.textContent = kind === "up" ? "connected" : "reconnecting…";
  $("send").disabled = kind !== "up";
  if (kind === "up" && state.session) reopen();
}

function newSessionKey() {
  const random = Array.from(crypto.getRandomValues(new Uint8Array(6)), (b) => b.toString(16).padStart(2, "0")).join("");
  return `${state.channel}:${random}`;
}

function scrollDown() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function addMessage(node) {
  const box = $("messages");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  box.append(node);
  if (atBottom) scrollDown();
  return node;
}

function notice(text, kind) {
  return addMessage(el("div", { class: "msg notice" + (kind ? " " + kind : "") }, text));
}

function assistantBubble() {
  if (!state.bubble) {
    state.bubble = addMessage(el("div", { class: "msg assistant typing" }));
    state.text = "";
  }
  return state.bubble;
}

function renderBubble() {
  state.renderQueued = false;
  if (!state.bubble) return;
  const thinking = state.bubble.querySelector("details.thinking");
  state.bubble.replaceChildren(...(thinking ? [thinking] : []), markdown(state.text));
  scrollDown();
}

function queueRender() {
  if (!state.renderQueued) {
    state.renderQueued = true;
    requestAnimationFrame(renderBubble);
  }
}

function endBubble() {
  if (state.bubble) {
    renderBubble();
    state.bubble.classList.remove("typing");
  }
  state.bubble = null;
  state.text = "";
}

function setRunning(running) {
  state.running = running;
  $("cancel").hidden = !running;
  $("send").hidden = running;
}

function toolLine(id, name, input) {
  const line = el("div", { class: "tool", "data-call": id },
    el("span", { class: "state" }, "… "), `${name} `, el("span", { class: "muted" }, summarize(input)));
  state.tools.set(id, line);
  return addMessage(line);
}

function summarize(input) {
  if (input === undefined || input === null) return "";
  const text = typeof input === "string" ? input : JSON.stringify(input);
  return text.length > 160 ? text.slice(0, 157) + "…" : text;
}

function finishTool(id, name, ok, output) {
  let line = state.tools.get(id);
  if (!line) line = toolLine(id, name, "");
  const mark = line.querySelector(".state");
  mark.className = "state " + (ok ? "ok" : "fail");
  mark.textContent = ok ? "✓ " : "✗ ";
  if (output !== undefined && output !== null && output !== "") {
    line.append(el("details", null, el("summary", null, "output"), el("pre", null, String(output))));
  }
}

/** A tool call's whole input, pretty-printed, scrollable. */
function argumentsBlock(input) {
  return el("pre", { class: "args", tabindex: "0", "aria-label": "the call's arguments" },
    typeof input === "string" ? input : JSON.stringify(input, null, 2));
}

/**
 * The cards for a `confirmation_requested` event: the waiting call is
 * looked up in `confirmations.list` (the server's id, the whole input and
 * its digest), so what is approved is what is shown.
 */
async function showConfirmation(session, callId) {
  try {
    const pending = await state.rpc.call("confirmations.list", {});
    for (const c of pending.filter((c) => c.session === session && c.call_id === callId)) confirmCard(c);
  } catch (error) {
    notice(error.message, "error");
  }
}

/** One waiting call (an entry of `confirmations.list`) as a card. */
function confirmCard(c) {
  if (state.shownConfirms.has(c.id)) return;
  state.shownConfirms.add(c.id);
  const approve = el("button", { class: "primary", type: "button" }, "Approve");
  const deny = el("button", { class: "danger", type: "button" }, "Deny");
  const result = el("span", { class: "muted", role: "status" });
  const card = el("div", { class: "confirm", role: "group", "aria-label": `Confirm ${c.tool}` },
    el("div", null, el("strong", null, c.tool), " wants to run", c.reason ? ` (${c.reason})` : "", " with:"),
    argumentsBlock(c.input),
    el("div", { class: "actions" }, approve, deny, result));
  const decide = async (yes) => {
    approve.disabled = deny.disabled = true;
    try {
      await state.rpc.call("confirmations.resolve", {
        session: c.session, id: c.id, input_digest: c.input_digest, approve: yes,
        reason: yes ? undefined : "denied in the web chat",
      });
    } catch (error) {
      result.textContent = error.message;
      approve.disabled = deny.disabled = false;
    }
  };
  approve.addEventListener("click", () => decide(true));
  deny.addEventListener("click", () => decide(false));
  state.confirms.set(c.call_id, card);
  addMessage(card);
  approve.focus();
}

function resolveCard(id, resolution) {
  const card = state.confirms.get(id);
  if (!card) return;
  card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  card.querySelector("[role=status]").textContent = {
    approved: "approved", denied: "denied", timed_out: "timed out", cancelled: "cancelled",
  }[resolution] || String(resolution);
}

/** A size for people: 608 B, 12.3 KB, 4.1 MB. */
function humanSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/**
 * A file the agent sent (a `media` event): a picture shown, a player for
 * audio and voice notes, a download for anything else. The bytes come
 * from `/media/<id>` with the token (an element's own request could not
 * carry it), as a blob URL.
 */
function mediaCard(file) {
  const status = el("span", { class: "muted", role: "status" }, "loading…");
  const label = `${file.name} (${humanSize(file.size)})`;
  const body = el("div", { class: "media-body" }, status);
  const card = el("figure", { class: "msg assistant media", "data-media": file.id }, body,
    file.caption ? el("figcaption", null, file.caption) : "");
  addMessage(card);
  fetch(`/media/${encodeURIComponent(file.id)}`, {
    headers: { authorization: `Bearer ${state.rpc.token}` },
  }).then(async (response) => {
    if (!response.ok) {
      const why = await response.json().then((b) => b.error && b.error.message, () => null);
      throw new Error(why || `the file could not be fetched (${response.status})`);
    }
    const url = URL.createObjectURL(await response.blob());
    let shown;
    if (file.kind === "image") {
      shown = el("img", { src: url, alt: file.caption || file.name, title: label });
    } else if (file.kind === "audio" || file.kind === "voice") {
      shown = el("audio", { src: url, controls: "", "aria-label": file.kind === "voice" ? "voice note" : file.name });
    } else {
      shown = el("a", { href: url, download: file.name, class: "download" }, `⬇ ${label}`);
    }
    const save = file.kind === "document" ? "" : el("a", { href: url, download: file.name, class: "muted" }, `save ${file.name}`);
    body.replaceChildren(shown, save);
  }).catch((error) => {
    status.textContent = `${label}: ${error.message}`;
  });
}

/** One event of the open session, from any client. */
function onEvent(envelope) {
  if (!envelope || envelope.session !== state.session) return;
  if (envelope.skipped !== undefined) {
    notice(`${envelope.skipped} events were skipped; reloading`);
    reopen();
    return;
  }
  switch (envelope.type) {
    case "run_state":
      if (envelope.state === "start") { setRunning(true); state.turn = envelope.turn; }
      if (["complete", "cancelled", "error"].includes(envelope.state)) {
        endBubble();
        setRunning(false);
        if (envelope.state === "cancelled") notice("cancelled");
        loadSessions();
      }
      break;
    case "content_delta":
      assistantBubble();
      state.text += envelope.text;
      queueRender();
      break;
    case "thinking": {
      const bubble = assistantBubble();
      let details = bubble.querySelector("details.thinking");
      if (!details) {
        details = el("details", { class: "thinking" }, el("summary", null, "Thinking"), el("div"));
        bubble.prepend(details);
      }
      details.lastChild.textContent += envelope.text;
      break;
    }
    case "tool_start":
      endBubble();
      toolLine(envelope.id, envelope.name, envelope.input);
      break;
    case "tool_end":
      finishTool(envelope.id, envelope.name, envelope.ok, envelope.output);
      break;
    case "confirmation_requested":
      endBubble();
      showConfirmation(envelope.session, envelope.id);
      break;
    case "confirmation_resolved":
      resolveCard(envelope.id, envelope.resolution);
      break;
    case "media":
      endBubble();
      mediaCard(envelope.file);
      break;
    case "warning":
      notice("⚠ " + envelope.message);
      break;
    case "error":
      endBubble();
      addMessage(el("div", { class: "msg error", role: "alert" }, envelope.message));
      break;
    case "queued":
      notice("queued behind the running turn");
      break;
    case "compaction":
      notice("older messages were summarised to make room");
      break;
    case "interrupted":
      notice("an earlier turn was interrupted; its message is kept");
      break;
    case "command":
      if (envelope.turn === undefined || envelope.turn === null) {
        state.pendingCommand = false;
        const bubble = addMessage(el("div", { class: "msg assistant" }));
        bubble.append(markdown(envelope.reply || ""));
      }
      break;
    default:
      break;
  }
}

/** Renders stored messages (the history), and the files their turns
 * sent, each after the last message of its turn. */
function renderStored(messages, files = []) {
  const last = new Map();
  messages.forEach((entry, i) => { if (entry.turn != null) last.set(entry.turn, i); });
  const filesOf = new Map();
  for (const file of files) {
    if (!filesOf.has(file.turn)) filesOf.set(file.turn, []);
    filesOf.get(file.turn).push(file);
  }
  messages.forEach((entry, i) => {
    renderEntry(entry);
    if (entry.turn != null && last.get(entry.turn) === i) {
      for (const file of filesOf.get(entry.turn) || []) mediaCard(file);
      filesOf.delete(entry.turn);
    }
  });
  for (const left of filesOf.values()) left.forEach(mediaCard);
}

/** Renders one stored message. */
function renderEntry(entry) {
  const message = entry.message || {};
  const blocks = message.content || [];
  if (message.role === "user") {
    const text = blocks.filter((b) => b.type === "text").map((b) => b.text).join("\n");
    if (text) {
      // Anyone but the owner is named on their message.
      const sender = entry.principal && entry.principal !== "owner" ? entry.principal : null;
      addMessage(sender
        ? el("div", { class: "msg user", title: sender }, el("span", { class: "meta" }, sender), el("br"), text)
        : el("div", { class: "msg user" }, text));
    }
    for (const block of blocks) {
      if (block.type === "tool_result") {
        const id = block.tool_use_id;
        finishTool(id, state.tools.get(id)?.dataset.name || "tool", !block.is_error, block.content);
      }
    }
  } else {
    const text = blocks.filter((b) => b.type === "text").map((b) => b.text).join("\n\n");
    const thinking = blocks.filter((b) => b.type === "thinking").map((b) => b.thinking).join("\n");
    if (text || thinking) {
      const bubble = addMessage(el("div", { class: "msg assistant" }));
      if (thinking) bubble.append(el("details", { class: "thinking" }, el("summary", null, "Thinking"), el("div", null, thinking)));
      bubble.append(markdown(text));
    }
    for (const block of blocks) {
      if (block.type === "tool_use") {
        const line = toolLine(block.id, block.name, block.input);
        line.dataset.name = block.name;
      }
    }
  }
  state.cursor = Math.max(state.cursor, entry.seq || 0);
}

async function openSession(key) {
  state.session = key;
  localStorage.setItem(SESSION_KEY, key);
  const known = state.sessions.find((s) => s.key === key);
  $("chat-title").textContent = shownTitle(known?.title) || (known ? "Chat" : "New chat");
  $("chat-key").textContent = key;
  document.querySelectorAll("#sessions button").forEach((b) => b.setAttribute("aria-current", String(b.dataset.key === key)));
  await reopen();
}

/** (Re)loads the open session: its history, its running turn, and a
 * subscription to its events. Used after a reconnect too. */
async function reopen() {
  const key = state.session;
  if (!key || !state.rpc) return;
  $("messages").replaceChildren();
  state.tools.clear();
  state.confirms.clear();
  state.bubble = null;
  state.cursor = 0;
  setRunning(false);
  try {
    await state.rpc.subscribe("sessions.subscribe", { sessions: [key] }, onEvent);
    const history = await state.rpc.call("sessions.history", { session: key, limit: 200 });
    if (history.more_before) notice("older messages are not shown");
    renderStored(history.messages, history.files);
    const status = await state.rpc.call("agent.status", { session: key });
    if (status.running.some((r) => r.session === key)) {
      setRunning(true);
      notice("a turn is running");
    }
    const pending = await state.rpc.call("confirmations.list", {});
    for (const c of pending.filter((c) => c.session === key)) confirmCard(c);
  } catch (error) {
    notice(error.message, "error");
  }
  scrollDown();
}

async function loadSessions() {
  try {
    state.sessions = await state.rpc.call("sessions.list", {});
  } catch {
    return;
  }
  renderSessions();
  // The open session gets its title with its first message.
  const open = state.sessions.find((s) => s.key === state.session);
  if (open?.title) $("chat-title").textContent = shownTitle(open.title);
}

function renderSessions() {
  const filter = $("session-filter").value.trim().toLowerCase();
  const list = $("sessions");
  list.replaceChildren();
  for (const s of state.sessions) {
    const label = shownTitle(s.title) || s.key;
    if (filter && !label.toLowerCase().includes(filter) && !s.key.toLowerCase().includes(filter)) continue;
    const when = new Date(s.updated_at).toLocaleString();
    list.append(el("li", null, el("button", {
      "data-key": s.key,
      "aria-current": String(s.key === state.session),
      onclick: () => { openSession(s.key); closeSidebar(); },
    }, label, el("span", { class: "meta" }, `${s.message_count} messages · ${when}`))));
  }
}

/** What a voice message's text starts with, as chats mark theirs. */
const VOICE_MARK = "[voice note, transcribed] ";

/** A session's title as shown: a voice message's without its mark. */
function shownTitle(title) {
  return title && title.startsWith(VOICE_MARK) ? title.slice(VOICE_MARK.length) : title;
}

/** A microphone icon (no emoji font needed). */
function micIcon() {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", "icon");
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", "M12 14a3 3 0 0 0 3-3V5a3 3 0 0 0-6 0v6a3 3 0 0 0 3 3zm5-3a5 5 0 0 1-10 0H5a7 7 0 0 0 6 6.92V21h2v-3.08A7 7 0 0 0 19 11h-2z");
  svg.append(path);
  return svg;
}

/** A stop icon. */
function stopIcon() {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", "icon");
  svg.setAttribute("aria-hidden", "true");
  const rect = document.createElementNS(ns, "rect");
  for (const [k, v] of Object.entries({ x: 6, y: 6, width: 12, height: 12, rx: 2 })) rect.setAttribute(k, v);
  svg.append(rect);
  return svg;
}

/** The microphone: records while pressed on, then sends the words. */
const recorder = { media: null, chunks: [] };

async function toggleMic() {
  const mic = $("mic");
  if (recorder.media) {
    recorder.media.stop();
    return;
  }
  if (!navigator.mediaDevices || !window.MediaRecorder) {
    notice("this browser cannot record audio", "error");
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (error) {
    notice(`the microphone is not available: ${error.message}`, "error");
    return;
  }
  const media = new MediaRecorder(stream);
  recorder.media = media;
  recorder.chunks = [];
  media.addEventListener("dataavailable", (event) => {
    if (event.data.size) recorder.chunks.push(event.data);
  });
  media.addEventListener("stop", async () => {
    stream.getTracks().forEach((track) => track.stop());
    recorder.media = null;
    mic.classList.remove("recording");
    mic.setAttribute("aria-pressed", "false");
    mic.replaceChildren(micIcon());
    const type = (media.mimeType || "audio/webm").split(";")[0];
    const blob = new Blob(recorder.chunks, { type });
    mic.disabled = true;
    const status = notice("transcribing…");
    try {
      const response = await fetch("/transcribe", {
        method: "POST",
        headers: { authorization: `Bearer ${state.rpc.token}`, "content-type": type },
        body: blob,
      });
      const body = await response.json().catch(() => ({}));
      if (!response.ok) throw new Error((body.error && body.error.message) || `the recording could not be transcribed (${response.status})`);
      const text = (body.text || "").trim();
      if (!text) {
        notice("nothing was heard in the recording");
        return;
      }
      send(VOICE_MARK + text);
    } catch (error) {
      notice(error.message, "error");
    } finally {
      if (status) status.remove();
      mic.disabled = false;
    }
  });
  media.start();
  mic.classList.add("recording");
  mic.setAttribute("aria-pressed", "true");
  mic.replaceChildren(stopIcon());
}

async function send(text) {
  if (!text.trim() || !state.session) return;
  if (text.startsWith(VOICE_MARK)) addMessage(el("div", { class: "msg user voice", title: "a voice message, transcribed" }, micIcon(), text.slice(VOICE_MARK.length)));
  else if (!text.startsWith("/")) addMessage(el("div", { class: "msg user" }, text));
  else state.pendingCommand = true;
  scrollDown();
  try {
    const result = await state.rpc.call("sessions.send", { session: state.session, message: text, approval: "ask" });
    if (result.command && state.pendingCommand) {
      state.pendingCommand = false;
      const bubble = addMessage(el("div", { class: "msg assistant" }));
      bubble.append(markdown(result.outcome.reply || ""));
    }
  } catch (error) {
    endBubble();
    setRunning(false);
    if (!/cancel/i.test(error.message)) addMessage(el("div", { class: "msg error", role: "alert" }, error.message));
  }
}

// ---------------------------------------------------------------- dashboard

function fmtNumber(n) { return Number(n || 0).toLocaleString(); }
function fmtCost(n) { return "$" + Number(n || 0).toFixed(4); }
function table(head, rows, numeric) {
  return el("table", { class: "data" },
    el("thead", null, el("tr", null, head.map((h, i) => el("th", { class: numeric?.includes(i) ? "num" : null, scope: "col" }, h)))),
    el("tbody", null, rows.map((r) => el("tr", null, r.map((c, i) => el("td", { class: numeric?.includes(i) ? "num" : null }, c))))));
}
function kv(pairs) {
  return el("dl", { class: "kv" }, pairs.flatMap(([k, v]) => [el("dt", null, k), el("dd", null, v)]));
}

function chart(daily) {
  // Cost per day, all tiers together; tokens when nothing is priced.
  const days = new Map();
  for (const d of daily) {
    const entry = days.get(d.day) || { cost: 0, tokens: 0 };
    entry.cost += d.cost_usd || 0;
    entry.tokens += (d.usage?.input_tokens || 0) + (d.usage?.output_tokens || 0);
    days.set(d.day, entry);
  }
  const entries = [...days.entries()];
  const byCost = entries.some(([, v]) => v.cost > 0);
  const value = (v) => (byCost ? v.cost : v.tokens);
  const max = Math.max(1e-9, ...entries.map(([, v]) => value(v)));
  const width = 600, height = 160, pad = 18;
  const bar = entries.length ? Math.min(48, (width - pad) / entries.length) : 0;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${byCost ? "Cost" : "Tokens"} per day: ` + entries.map(([d, v]) => `${d} ${byCost ? fmtCost(v.cost) : fmtNumber(v.tokens)}`).join(", "));
  entries.forEach(([day, v], i) => {
    const h = ((height - 2 * pad) * value(v)) / max;
    const rect = document.createElementNS(ns, "rect");
    rect.setAttribute("x", pad + i * bar + 2);
    rect.setAttribute("y", height - pad - h);
    rect.setAttribute("width", Math.max(1, bar - 4));
    rect.setAttribute("height", h);
    const title = document.createElementNS(ns, "title");
    title.textContent = `${day}: ${byCost ? fmtCost(v.cost) : fmtNumber(v.tokens) + " tokens"}`;
    rect.append(title);
    svg.append(rect);
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", pad + i * bar + 2);
    label.setAttribute("y", height - 4);
    label.textContent = day.slice(5);
    svg.append(label);
  });
  return svg;
}

async function section(id, load) {
  const box = $(id);
  try {
    box.replaceChildren(await load());
  } catch (error) {
    box.replaceChildren(el("p", { class: "error" }, error.message));
  }
}

async function loadDashboard() {
  const rpc = state.rpc;
  await Promise.all([
    section("d-health", async () => {
      const h = await rpc.call("system.health", {});
      return kv([["status", h.status], ["version", h.version], ["up", `${h.uptime_secs} s`],
        ["active sessions", h.active_sessions], ["running turns", h.running_turns], ["pending confirmations", h.pending_confirmations]]);
    }),
    section("d-usage", async () => {
      const u = await rpc.call("usage.summary", { days: 14 });
      const rows = u.tiers.map((t) => [t.tier, fmtNumber(t.calls), fmtNumber(t.usage.input_tokens), fmtNumber(t.usage.output_tokens), fmtCost(t.cost_usd)]);
      rows.push(["total", fmtNumber(u.total.calls), fmtNumber(u.total.usage.input_tokens), fmtNumber(u.total.usage.output_tokens), fmtCost(u.total.cost_usd)]);
      const frag = document.createDocumentFragment();
      frag.append(table(["tier", "calls", "input", "output", "cost"], rows, [1, 2, 3, 4]));
      frag.append(el("h3", { class: "muted" }, "Last 14 days"));
      frag.append(u.daily?.length ? chart(u.daily) : el("p", { class: "muted" }, "no model calls in the last 14 days"));
      if (u.total.unpriced_calls) frag.append(el("p", { class: "muted" }, `${u.total.unpriced_calls} call(s) with no known price are not in the cost`));
      return frag;
    }),
    section("d-confirm", async () => {
      const list = await rpc.call("confirmations.list", {});
      if (!list.length) return el("p", { class: "muted" }, "none");
      const answer = (c, approve) => async () => {
        await rpc.call("confirmations.resolve", {
          session: c.session, id: c.id, input_digest: c.input_digest, approve,
          reason: approve ? undefined : "denied on the dashboard",
        });
        loadDashboard();
      };
      return el("ul", null, list.map((c) => el("li", { class: "pending" },
        el("div", null, el("strong", null, c.tool), ` in ${c.session} (agent ${c.agent})`, c.reason ? ` — ${c.reason}` : "", ":"),
        argumentsBlock(c.input),
        el("div", { class: "actions" },
          el("button", { class: "primary", type: "button", onclick: answer(c, true) }, "Approve"),
          el("button", { class: "danger", type: "button", onclick: answer(c, false) }, "Deny")))));
    }),
    section("d-providers", async () => {
      const list = await rpc.call("providers.status", {});
      if (!list.length) return el("p", { class: "muted" }, "no providers configured");
      return table(["provider", "kind", "state"], list.map((p) => [p.name, p.kind,
        p.ok ? el("span", { class: "pill ok" }, p.latency_ms === undefined ? "answers (no model list)" : `ok · ${p.latency_ms} ms`) : el("span", { class: "pill fail", title: p.error }, p.error || "down")]));
    }),
    section("d-channels", async () => {
      const list = await rpc.call("channels.status", {});
      const pill = (c) => {
        if (c.state === "connected") return el("span", { class: "pill ok" }, c.detail ? `connected · ${c.detail}` : "connected");
        if (c.state === "connecting") return el("span", { class: "pill" }, "connecting");
        if (c.state === "standby") return el("span", { class: "pill", title: "another node of the cluster holds this channel's connection; this one takes over if it stops" }, `standby · held by ${c.detail || "another node"}`);
        const why = c.last_error || c.state;
        const next = c.retry_in_ms !== undefined ? ` · retry in ${Math.ceil(c.retry_in_ms / 1000)} s` : "";
        return el("span", { class: "pill fail", title: why }, `${c.unauthorized ? "token refused" : c.state}${next}: ${why}`);
      };
      return table(["channel", "state", "received"], list.map((c) => [c.name, pill(c), c.name === "web" ? "—" : fmtNumber(c.received)]), [2]);
    }),
    section("d-cluster", async () => {
      const c = await rpc.call("cluster.status", {});
      // Shown only when the daemon shares its database with others.
      $("c-cluster").hidden = !c.nodes.length;
      if (!c.nodes.length) return document.createDocumentFragment();
      const shown = (n) => n.alive
        ? el("span", { class: "pill ok" }, n.id === c.this_node ? "alive · this node" : "alive")
        : el("span", { class: "pill fail" }, `silent ${Math.round(n.silent_ms / 1000)} s`);
      return table(["node", "kind", "state", "sessions", "roles"], c.nodes.map((n) => [
        n.id, n.kind, shown(n), fmtNumber(n.sessions), n.roles.length ? n.roles.join(", ") : "—"]), [3]);
    }),
    section("d-pairing", async () => {
      const p = await rpc.call("pairing.list", {});
      const frag = document.createDocumentFragment();
      if (!p.pending.length) frag.append(el("p", { class: "muted" }, "no pairing codes waiting"));
      else frag.append(el("ul", null, p.pending.map((c) => el("li", null,
        `${c.channel} · ${c.name ? `${c.name} (${c.sender})` : c.sender} · `, el("code", null, c.code), " ",
        el("button", { class: "primary", type: "button", "aria-label": `Approve ${c.code} on ${c.channel}`, onclick: async () => {
          await rpc.call("pairing.approve", { channel: c.channel, code: c.code });
          loadDashboard();
        } }, "Approve")))));
      if (p.approved.length) {
        frag.append(el("h3", { class: "muted" }, "Approved"));
        frag.append(el("ul", null, p.approved.map((a) => el("li", null,
          `${a.channel} · ${a.name ? `${a.name} (${a.sender})` : a.sender} `,
          el("button", { class: "danger", type: "button", "aria-label": `Revoke ${a.sender} on ${a.channel}`, onclick: async () => {
            if (!confirm(`Stop answering ${a.name || a.sender} on ${a.channel}?`)) return;
            await rpc.call("pairing.revoke", { channel: a.channel, sender: a.sender });
            loadDashboard();
          } }, "Revoke")))));
      }
      return frag;
    }),
    section("d-agents", async () => {
      const agents = await rpc.call("config.get", { path: "agents" });
      const tiers = await rpc.call("config.get", { path: "models.tiers" });
      const frag = document.createDocumentFragment();
      frag.append(table(["tier", "models"], Object.entries(tiers).map(([t, m]) => [t, (m || []).join(", ") || "—"])));
      const list = agents.list || [];
      frag.append(el("p", null, "Agents: ", list.length ? list.map((a) => a.name).join(", ") : "main"));
      return frag;
    }),
    section("d-sessions", async () => {
      await loadSessions();
      return table(["session", "messages", "updated", ""], state.sessions.map((s) => [
        s.title ? `${s.title} (${s.key})` : s.key, fmtNumber(s.message_count), new Date(s.updated_at).toLocaleString(),
        el("span", null,
          el("button", { type: "button", onclick: () => { showTab("chat"); openSession(s.key); } }, "Open"), " ",
          el("button", { type: "button", class: "danger", onclick: async () => {
            if (!confirm(`Forget ${s.key}?`)) return;
            await rpc.call("sessions.reset", { session: s.key });
            loadDashboard();
          } }, "Reset")),
      ]), [1]);
    }),
    section("d-tools", async () => {
      const tools = await rpc.call("tools.list", {});
      return table(["tool", "effect", "policy"], tools.map((t) => [t.name, t.effect,
        !t.allowed ? "denied" : t.needs_confirmation ? "asks first" : "allowed"]));
    }),
    section("d-logs", async () => {
      const logs = await rpc.call("system.logs", { limit: 200 });
      return el("pre", { class: "logs" }, logs.lines.join("\n") || "no log lines yet");
    }),
    section("d-config", async () => {
      const config = await rpc.call("config.get", {});
      return el("pre", { class: "logs" }, JSON.stringify(config, null, 2));
    }),
  ]);
}

// ---------------------------------------------------------------- wiring

function showTab(name) {
  const chat = name === "chat";
  $("chat").hidden = !chat;
  $("dash").hidden = chat;
  $("tab-chat").setAttribute("aria-selected", String(chat));
  $("tab-dash").setAttribute("aria-selected", String(!chat));
  if (!chat) loadDashboard();
}

function closeSidebar() {
  $("sidebar").classList.remove("open");
  $("menu").setAttribute("aria-expanded", "false");
}

async function start(token) {
  state.rpc = new Rpc(token, setStatus);
  $("login").hidden = true;
  $("app").hidden = false;
  await state.rpc.connect();
  await loadSessions();
  const saved = localStorage.getItem(SESSION_KEY);
  const own = (key) => key && (state.channel === "web" || key.startsWith(`${state.channel}:`));
  await openSession((own(saved) && saved) || state.sessions[0]?.key || newSessionKey());
  $("input").focus();
}

function showLogin(message) {
  $("app").hidden = true;
  $("login").hidden = false;
  const error = $("login-error");
  error.hidden = !message;
  error.textContent = message || "";
  $("token").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    try {
      await checkToken(token);
    } catch (error) {
      showLogin(error.message);
      return;
    }
    localStorage.setItem(TOKEN_KEY, token);
    start(token);
  });
  $("logout").addEventListener("click", () => {
    localStorage.removeItem(TOKEN_KEY);
    if (state.rpc) state.rpc.close();
    state.rpc = null;
    showLogin();
  });
  $("tab-chat").addEventListener("click", () => showTab("chat"));
  $("tab-dash").addEventListener("click", () => showTab("dash"));
  $("menu").addEventListener("click", () => {
    const open = $("sidebar").classList.toggle("open");
    $("menu").setAttribute("aria-expanded", String(open));
  });
  $("new-chat").addEventListener("click", () => { showTab("chat"); openSession(newSessionKey()); closeSidebar(); $("input").focus(); });
  $("session-filter").addEventListener("input", renderSessions);
  const input = $("input");
  input.addEventListener("input", () => {
    input.style.height = "auto";
    input.style.height = Math.min(input.scrollHeight, 240) + "px";
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
    if (event.key === "Escape" && state.running) $("cancel").click();
  });
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value;
    input.value = "";
    input.style.height = "auto";
    send(text);
  });
  $("mic").replaceChildren(micIcon());
  $("mic").addEventListener("click", toggleMic);
  $("cancel").addEventListener("click", async () => {
    try {
      await state.rpc.call("agent.cancel", { session: state.session });
    } catch (error) {
      notice(error.message, "error");
    }
  });

  if ("serviceWorker" in navigator) navigator.serviceWorker.register("/sw.js").catch(() => {});
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) {
    checkToken(token).then(() => start(token), (error) => showLogin(error.message));
  } else {
    showLogin();
  }
});
