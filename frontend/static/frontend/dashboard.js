// Steerboard dashboard: keeps the team page (and the team list) live.
//
// The websocket only rings a doorbell ("team.changed"); the page then re-reads
// the snapshot from the server, which reads the database. On every (re)connect
// the page re-reads too, so nothing shown stays stale after a dropped socket.
// Message HTML arrives already rendered and sanitised by the server; every
// other string is set as text.

import { startAges, timeAgo } from "./ages.js";
import { followSnapshot, announce } from "./announce.js";
import { latencyChart, startCharts } from "./charts.js";

const SVG = "http://www.w3.org/2000/svg";
const STATES = ["queued", "accepted", "delivered"];  // a lane's columns
const BAR_STATES = [...STATES, "cancelled"];  // its bar: every state, cancelled its own
const body = document.body;
const page = body.dataset.page;

// ---------------------------------------------------------------- DOM helpers
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

const pad = (n) => String(n).padStart(2, "0");
function clock(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
function seconds(value) {
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 120) return `${value.toFixed(1)} s`;
  return `${Math.round(value / 60)} min`;
}
function timeEl(label, iso) {
  return timeAgo(iso, `${label} {ago}`, { class: `t-${label}` });
}

// ------------------------------------------------------------ the server's database
// The socket can stay up while the server cannot reach its database: nothing rings
// then, and "live" would be stale. The page asks /readyz every 10 s (every 2 s while
// the database is away, and at once when a read or the socket fails) and the top bar
// says "server can't reach its database" (data-database="unreachable" on <body>)
// until it is back; then the page re-reads.
const READY_EVERY = 10000;
const READY_EVERY_DOWN = 2000;
let databaseDown = false;
let resync = () => {};
// The top bar's indicator (looked up once: <body> gets a data-connection of its own).
const conn = document.querySelector("[data-connection]");

function showConnection() {
  if (!conn) return;
  const state = body.dataset.connection || "connecting";
  if (databaseDown && state === "live") {
    conn.dataset.connection = "no-database";
    conn.textContent = "server can't reach its database";
  } else {
    conn.dataset.connection = state;
    conn.textContent = { live: "live", offline: "offline — reconnecting" }[state] || "connecting…";
  }
  if (conn.dataset.announced !== conn.dataset.connection) {
    if (conn.dataset.announced) announce(`Connection: ${conn.textContent}.`);
    conn.dataset.announced = conn.dataset.connection;
  }
}

function setDatabase(ok) {
  if (ok !== databaseDown) return; // no change
  databaseDown = !ok;
  body.dataset.database = ok ? "ok" : "unreachable";
  showConnection();
  if (ok) resync(); // whatever was written meanwhile is in this read
}

async function checkReady() {
  try {
    const response = await fetch("/readyz", { cache: "no-store", headers: { Accept: "application/json" } });
    const data = await response.json();
    setDatabase(!(data.database && data.database.ok === false));
  } catch (error) {
    // The server itself does not answer: the socket's state says so.
  }
}

function watchDatabase() {
  const tick = async () => {
    if (!document.hidden) await checkReady();
    setTimeout(tick, databaseDown ? READY_EVERY_DOWN : READY_EVERY);
  };
  setTimeout(tick, READY_EVERY);
}

// ------------------------------------------------------------------ live link
export function liveSocket(path, onChange) {
  let delay = 500;
  const setConn = (state) => {
    body.dataset.connection = state;
    showConnection();
  };
  const open = () => {
    setConn("connecting");
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}${path}`);
    ws.addEventListener("message", (event) => {
      const frame = JSON.parse(event.data);
      if (frame.type === "subscribed") {
        delay = 500;
        setConn("live");
        onChange(frame); // resync: whatever happened while away is in this read
      } else if (frame.type === "team.changed") {
        onChange(frame);
      }
    });
    ws.addEventListener("close", (event) => {
      if (event.code === 4401) {
        location.assign(`/login/?next=${encodeURIComponent(location.pathname)}`);
        return;
      }
      setConn("offline");
      checkReady();
      setTimeout(open, delay);
      delay = Math.min(delay * 2, 5000);
    });
  };
  open();
}

// A burst of doorbells costs one read in flight and at most one more after it.
export function coalesced(read) {
  let running = false;
  let again = false;
  return async function run() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        await read();
      } while (again);
    } finally {
      running = false;
    }
  };
}

export async function getJson(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (response.redirected || response.status === 401 || response.status === 403) {
    location.assign(`/login/?next=${encodeURIComponent(location.pathname)}`);
    throw new Error("signed out");
  }
  if (response.status === 503) {
    checkReady(); // SERVICE_UNAVAILABLE: the server cannot reach its database
    throw new Error(`${url}: the server cannot reach its database`);
  }
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

// ------------------------------------------------------------ operator calls
function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

export async function operatorPost(url, payload) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: payload === undefined ? "" : JSON.stringify(payload),
    credentials: "same-origin",
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error ? data.error.message : `refused (${response.status})`);
  return data;
}

// ---------------------------------------------------------------- pictures
function stateBar(counts) {
  const total = BAR_STATES.reduce((sum, st) => sum + (counts[st] || 0), 0);
  const svg = s("svg", { class: "bar", viewBox: "0 0 100 6", preserveAspectRatio: "none", role: "img", "data-chart": "states" });
  svg.append(s("title", {}, BAR_STATES.map((st) => `${counts[st]} ${st}`).join(", ")));
  if (total === 0) {
    svg.append(s("rect", { x: 0, y: 0, width: 100, height: 6, class: "empty" }));
    return svg;
  }
  let x = 0;
  for (const st of BAR_STATES) {
    const w = ((counts[st] || 0) / total) * 100;
    if (w > 0) svg.append(s("rect", { x: x.toFixed(3), y: 0, width: w.toFixed(3), height: 6, class: `fill-${st}`, "data-state": st, "data-count": counts[st] }));
    x += w;
  }
  return svg;
}

// ---------------------------------------------------------------- team page
// One message card, on the team page and on the team messages page (console.js, withTarget).
export function messageItem(team, m, canAct, { withTarget = false } = {}) {
  const pending = m.state === "queued" || m.state === "accepted";
  const cancel = canAct && pending
    ? h("button", {
        type: "button", class: "small", "data-action": "cancel", "data-cancel-message": m.id, "aria-label": `Cancel message #${m.seq} from ${m.sender}`,
        title: "Take this message back: it is never pushed or replayed again",
        onclick: (ev) => act(ev.currentTarget, `/api/v1/teams/${encodeURIComponent(team)}/messages/${encodeURIComponent(m.id)}/cancel`, "cancelled"),
      }, "cancel")
    : null;
  // Retry only what is stuck (frontend/attention.py, message_stuck): a message in its
  // normal second or two in accepted has nothing to retry.
  const retry = canAct && pending && m.stuck
    ? h("button", {
        type: "button", class: "small", "data-action": "retry", "data-retry-message": m.id, "aria-label": `Retry message #${m.seq} from ${m.sender}`,
        title: "Run admission again for this message",
        onclick: (ev) => act(ev.currentTarget, `/api/v1/teams/${encodeURIComponent(team)}/messages/${encodeURIComponent(m.id)}/retry`),
      }, "retry")
    : null;
  const latency = m.delivered_at ? h("span", { class: "lat muted" }, `in ${seconds((Date.parse(m.delivered_at) - Date.parse(m.queued_at)) / 1000)}`) : null;
  const body = h("div", { class: "md" });
  body.innerHTML = m.html; // rendered from Markdown and sanitised by the server (markdown-it-py + nh3)
  return h("li", { class: `msg state-${m.state}`, "data-message-id": m.id, "data-state": m.state, "data-seq": m.seq },
    h("div", { class: "msg-head" },
      h("span", { class: "seq" }, `#${m.seq}`), " from ", h("b", { class: "sender" }, m.sender),
      withTarget ? [" to ", h("b", { class: "target" }, m.target), " ", h("span", { class: `pill state-${m.state}` }, m.state)] : null,
      h("span", { class: "times" }, timeEl("queued", m.queued_at), timeEl("accepted", m.accepted_at), timeEl("delivered", m.delivered_at), timeEl("cancelled", m.cancelled_at)),
      latency,
      m.failures ? h("span", { class: "muted", "data-failures": m.failures }, `${m.failures} failed`) : null,
      m.repushes ? h("span", { class: "muted", "data-repushes": m.repushes }, `re-pushed ${m.repushes}×`) : null,
      h("a", { class: "small trace-link", href: `/teams/${encodeURIComponent(team)}/messages/${encodeURIComponent(m.id)}/`, "data-trace-link": m.id,
        "aria-label": `Trace of message #${m.seq}` }, "trace"),
      retry, cancel),
    m.last_error && pending ? h("div", { class: "last-error", role: "note" }, m.last_error) : null,
    body);
}

// Sender and author come from the server's own message and prompt records (the
// snapshot's `sender`, `author`, `message_kind`, `verified`), never from what the
// session reported; a reference to no message or prompt of this member is "unverified".
function steeredLabel(e) {
  if (!e.verified) return "team message (unverified sender)";
  if (e.ask) return `answer to ask ${e.ask.id} · ${e.ask.decision || "in words"}${e.ask.answered_by ? ` · by ${e.ask.answered_by}` : ""}`;
  return e.message_kind === "spawn_prompt" ? `spawn prompt from ${e.sender}` : `steered from ${e.sender}`;
}

function promptLabel(e) {
  if (e.verified && e.a2a_task) return `prompt from ${e.author} · A2A task ${e.a2a_task}`;
  if (e.verified) return `prompt from ${e.author}`;
  return e.prompt_id ? "prompt (unverified author)" : "human prompt";
}

function entryItem(e) {
  const label = {
    user_message: e.message_id ? steeredLabel(e) : "user", prompt: promptLabel(e),
    assistant_text: "assistant", tool_call: "tool call", tool_result: "tool result",
    turn_start: "turn started", turn_end: "turn ended",
  }[e.kind] || e.kind;
  const checked = e.message_id || e.kind === "prompt";
  return h("li", { class: `entry kind-${e.kind}`, "data-entry-kind": e.kind, "data-entry-message-id": e.message_id || null, "data-entry-prompt-id": e.prompt_id || null,
    "data-entry-verified": checked ? String(Boolean(e.verified)) : null,
    "data-entry-message-kind": e.message_id && e.verified ? e.message_kind : null,
    "data-entry-sender": e.message_id && e.verified ? e.sender : null,
    "data-entry-author": e.kind === "prompt" && e.verified ? e.author : null,
    "data-entry-ask-id": e.ask ? e.ask.id : null, "data-entry-decision": e.ask ? e.ask.decision : null },
    h("span", { class: "entry-kind" }, label), e.text ? h("span", { class: "entry-text" }, e.text) : null,
    timeAgo(e.at, "{ago}", { class: "muted" }));
}

function timeline(member) {
  // "in progress" only for the turn the member is running now: a member that only
  // polls (an MCP or REST inbox read) leaves turns without an end, and is not busy.
  const running = member.current_turn ? member.current_turn.turn_id : null;
  if (!member.timeline.length) return h("p", { class: "muted small" }, "No turns yet.");
  const turns = member.timeline.slice(-8).reverse(); // newest first; older ones are in the session history
  return h("ol", { class: "turns" }, turns.map((t) =>
    h("li", { class: `turn turn-${t.kind}${t.ended ? " ended" : ""}${t.turn_id === running ? " open" : ""}`, "data-turn-id": t.turn_id, "data-turn-kind": t.kind, "data-prompt-id": t.prompt_id, "data-ended": t.ended ? "true" : "false", "data-in-progress": t.turn_id === running ? "true" : "false" },
      h("div", { class: "turn-head" },
        h("b", {}, t.kind === "prompt" ? "Prompt turn" : "Turn"), " ",
        h("span", { class: "muted" }, `${t.step_count} step${t.step_count === 1 ? "" : "s"} · `, timeAgo(t.started_at, "started {ago}"),
          `${t.turn_id === running ? " · in progress" : ""}${t.partial ? " · earlier entries not shown" : ""}`),
        t.usage ? [" · ", usageBadge(t.usage, { "data-turn-usage": t.turn_id })] : null),
      h("ol", { class: "steps" }, t.steps.map((st) =>
        h("li", { class: "step", "data-step": st.step },
          h("span", { class: "step-no" }, `step ${st.step}`),
          h("ul", { class: "entries" }, st.entries.map(entryItem))))))));
}

// ---------------------------------------------------------------- usage and budget
const tokensText = (n) => (n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : n >= 1e4 ? `${(n / 1e3).toFixed(1)} k` : String(n));
const dollars = (cost) => (cost === null || cost === undefined ? null : `$${cost < 1 ? cost.toFixed(4) : cost.toFixed(2)}`);

// What a member's (or the team's) model replies used: tokens, and their cost when the server
// knows every model's price ([data-cost] is then the dollars, else empty).
function usageBadge(usage, attrs = {}) {
  const cost = dollars(usage.cost_usd);
  return h("span", { class: "usage small muted", "data-tokens": usage.tokens, "data-cost": cost === null ? "" : usage.cost_usd,
    title: `${usage.input_tokens} input (${usage.cached_tokens} cached) + ${usage.output_tokens} output tokens in ${usage.replies} replies`, ...attrs },
  `${tokensText(usage.tokens)} tokens`, cost ? ` · ${cost}` : "");
}

function budgetLine(budget) {
  if (!budget || budget.tokens === null) return h("span", { class: "small muted", "data-budget": "none" }, "no token budget");
  return h("span", { class: `small ${budget.exhausted ? "budget-exhausted" : "muted"}`, "data-budget": budget.tokens,
    "data-budget-used": budget.used, "data-budget-exhausted": budget.exhausted ? "true" : "false" },
  `budget ${tokensText(budget.used)} of ${tokensText(budget.tokens)} tokens`, budget.exhausted ? " · used up: no new turn starts" : "");
}

// What a member is doing now, and why (its activity, derived by the server: docs/dashboard.md).
const ACTIVITY_LABEL = {
  working: "working", waiting_peer: "waiting for a peer", waiting_human: "waiting for a human", idle: "idle",
  inactive: "inactive", stalled: "stalled", failed: "failed", retired: "retired",
};

function activityLine(activity, status) {
  if (!activity) return null;
  // An activity that is the status itself, with no reason, would only say the status pill again.
  const repeats = activity.state === status && !activity.detail;
  return h("span", { class: `activity activity-${activity.state} small`, "data-activity": activity.state, hidden: repeats ? true : null },
    h("span", { class: `pill activity-pill activity-${activity.state}` }, ACTIVITY_LABEL[activity.state] || activity.state),
    activity.detail ? h("span", { class: "activity-detail", "data-activity-detail": "" }, ` ${activity.detail} `) : " ",
    timeAgo(activity.since, "for {age}", { class: "muted", "data-activity-since": "" }));
}

function lane(team, member, canAct, openState, color, laneOpen = false) {
  const counts = member.counts;
  const cols = STATES.map((st) => {
    const list = member.messages[st];
    const hidden = counts[st] - list.length;
    return h("section", { class: `col col-${st}`, "data-column": st },
      h("h4", {}, st, " ", h("span", { class: "count", "data-count": st }, counts[st])),
      h("ol", { class: "msgs" }, list.map((m) => messageItem(team, m, canAct))),
      hidden > 0 ? h("a", { class: "more small", href: `/teams/${encodeURIComponent(team)}/messages/?target=${encodeURIComponent(member.name)}&state=${st}` }, `${hidden} more →`) : null);
  });
  const turn = member.current_turn;
  const prompts = member.prompts.length
    ? h("ul", { class: "prompts" }, member.prompts.map((p) =>
        h("li", { class: `prompt state-${p.state}`, "data-prompt-id": p.id, "data-state": p.state },
          h("span", { class: `pill state-${p.state}` }, `prompt ${p.state}`), " ", h("span", { class: "muted" }, `${p.author} · `, timeAgo(p.created_at, "{ago}")), " ",
          h("span", { class: "prompt-text" }, p.content.length > 200 ? `${p.content.slice(0, 199)}…` : p.content))))
    : null;
  // What the member waits for a person on (ask_human): answered from Needs attention.
  const asks = (member.asks || []).length
    ? h("ul", { class: "asks" }, member.asks.map((a) =>
        h("li", { class: "lane-ask", "data-lane-ask": "", "data-ask-id": a.id, "data-state": a.state },
          h("span", { class: "pill state-ask" }, a.kind === "approval" ? "awaits approval" : "asks a person"), " ",
          h("span", { class: "muted" }, timeAgo(a.created_at, "{ago}")), " ",
          h("q", { class: "ask-question" }, a.question.length > 200 ? `${a.question.slice(0, 199)}…` : a.question),
          a.options.length ? h("span", { class: "muted small" }, ` (${a.options.join(" / ")})`) : null)))
    : null;
  const details = h("details", { class: "timeline", "data-timeline": member.name, open: openState ? true : null,
    ontoggle: (ev) => { openTimelines.set(member.name, ev.currentTarget.open); } },
  h("summary", {}, "Timeline"), timeline(member));
  const headingId = `lane-${member.name}`;
  // The roster row (head, bar and counts, last message) is always shown; the rest opens below
  // it, and stays open across re-renders (openLanes).
  const laneBody = h("details", { class: "lane-body", "data-lane-details": member.name, open: laneOpen ? true : null,
    ontoggle: (ev) => { laneToggled(member.name, ev.currentTarget); } },
  h("summary", { class: "lane-summary", "aria-label": `${member.name}: ${counts.queued} queued, ${counts.accepted} accepted, ${counts.delivered} delivered. Messages, charts and timeline` },
    h("span", { class: "pictures" },
      h("span", { class: "bar-wrap" }, stateBar(counts),
        h("span", { class: "small muted" }, `${counts.queued} queued · ${counts.accepted} accepted · ${counts.delivered} delivered`,
          counts.cancelled ? h("span", { "data-count": "cancelled" }, ` · ${counts.cancelled} cancelled`) : null))),
    lastMessage(member)),
  member.description ? h("p", { class: "desc muted small" }, member.description) : null,
  h("div", { class: "lane-charts", "data-lane-charts": member.name }),
  h("div", { class: "cols" }, cols),
  details);
  return h("article", { class: `lane card status-${member.status}`, "data-member": member.name, "data-status": member.status, "data-role": member.role, "aria-labelledby": headingId,
    "data-expanded": laneOpen ? "true" : "false" },
    h("header", { class: "lane-head" },
      h("span", { class: `swatch c${color}`, "aria-hidden": "true", "data-color": color }),
      h("h3", { id: headingId }, member.name), h("span", { class: "role" }, member.role),
      h("a", { class: "small a2a-card", "data-a2a-card": member.name, title: "This member's A2A Agent Card (docs/a2a.md)",
        href: `/a2a/${encodeURIComponent(team)}/${encodeURIComponent(member.name)}/.well-known/agent-card.json` }, "A2A card"),
      h("span", { class: `pill status status-${member.status}`, "data-status-label": "" }, member.status),
      timeAgo(member.status_changed_at, "for {age}", { class: "small muted", "data-status-since": "" }),
      activityLine(member.activity, member.status),
      usageBadge(member.usage),
      h("span", { class: "current-turn", "data-current-turn": turn ? turn.turn_id : "" },
        turn ? [`${turn.kind === "prompt" ? "prompt turn" : "turn"} · step ${turn.step} · since `, timeAgo(turn.started_at, "{age}")] : (member.status === "running" ? "turn starting" : "")),
      canAct && ["queued", "accepted"].some((st) => member.messages[st].some((m) => m.stuck))
        ? h("button", { type: "button", class: "small", "data-action": "retry-all", "data-member-ref": member.name, title: "Run admission again for all undelivered messages to this member", "aria-label": `Retry all undelivered messages to ${member.name}`,
            onclick: (ev) => act(ev.currentTarget, `/api/v1/teams/${encodeURIComponent(team)}/members/${encodeURIComponent(member.name)}/retry`) }, "retry all")
        : null),
    asks,
    prompts,
    laneBody);
}

// The roster row's last message: the newest one to this member, as one line of text.
function lastMessage(member) {
  const newest = STATES.flatMap((st) => member.messages[st]).reduce((a, m) => (!a || m.seq > a.seq ? m : a), null);
  if (!newest) return h("span", { class: "last-message muted small", "data-last-message": "" }, "no messages yet");
  // The card's HTML is sanitised by the server; an inert document only reads its text.
  const text = new DOMParser().parseFromString(newest.html, "text/html").body.textContent.replace(/\s+/g, " ").trim();
  return h("span", { class: "last-message small", "data-last-message": newest.id, title: text },
    h("span", { class: "muted" }, `#${newest.seq} from `), h("b", {}, newest.sender), " ",
    h("span", { class: `pill state-${newest.state}` }, newest.state), " ",
    timeAgo(newest.delivered_at || newest.accepted_at || newest.queued_at, "{ago}", { class: "muted" }), " ",
    h("span", { class: "last-text" }, text));
}

// Which lanes are open: kept across re-renders and, per team, across a reload (sessionStorage).
const openLanes = new Map();
function laneStoreKey() {
  return `steerboard.openLanes.${body.dataset.team}`;
}
function loadOpenLanes() {
  try {
    for (const name of JSON.parse(sessionStorage.getItem(laneStoreKey()) || "[]")) openLanes.set(name, true);
  } catch (error) { /* storage may be off */ }
}
function laneToggled(name, details) {
  openLanes.set(name, details.open);
  const article = details.closest("[data-member]");
  if (article) article.dataset.expanded = details.open ? "true" : "false";
  try {
    sessionStorage.setItem(laneStoreKey(), JSON.stringify([...openLanes].filter(([, open]) => open).map(([n]) => n)));
  } catch (error) { /* storage may be off */ }
}
// A link to #lane-<member> (Needs attention's "show in lane") opens that lane.
function openLaneOfHash() {
  const name = decodeURIComponent(location.hash.replace(/^#lane-/, ""));
  if (!location.hash.startsWith("#lane-") || !name) return;
  const details = document.querySelector(`[data-lane-details="${CSS.escape(name)}"]`);
  if (details && !details.open) details.open = true; // its toggle event records it
  openLanes.set(name, true);
}

function taskBoard(tasks, more) {
  if (!tasks.length) return h("p", { class: "muted small" }, "No tasks on the board.");
  return h("div", {},
    h("ul", { class: "tasks" }, tasks.map((t) =>
      h("li", { class: `task task-${t.status}`, "data-task-id": t.id, "data-task-status": t.status, "data-ready": t.ready ? "true" : "false" },
        h("div", { class: "task-head" }, h("b", { class: "task-id" }, t.id), " ", h("span", { class: "task-subject", title: t.description }, t.subject)),
        h("div", { class: "task-meta small" },
          h("span", { class: `pill task-${t.status}` }, t.status.replace("_", " ")),
          // "ready" only when nothing blocks it; blockers only while they block (open, on an open task).
          t.ready ? h("span", { class: "pill ready", "data-ready-label": "" }, "ready") : null,
          h("span", {}, t.owner ? `owner ${t.owner}` : "unowned"),
          t.blocking.length ? h("span", { class: "blocked", "data-blocking": t.blocking.join(" ") }, `blocked by ${t.blocking.join(", ")}`) : null)))),
    more ? h("p", { class: "muted small" }, "More tasks on the board than shown; see the API.") : null);
}

const openTimelines = new Map();
const laneKeys = new Map();
let lastTasksKey = "";
let lastLatencyKey = "";

function renderTeam(snap) {
  const team = snap.team;
  const canAct = snap.me.can_act;
  const lanes = document.getElementById("lanes");
  const colors = new Map(snap.members.map((m, i) => [m.name, i])); // one colour per member everywhere
  const seen = new Set();
  let previous = null;
  for (const member of snap.members) {
    seen.add(member.name);
    const key = JSON.stringify(member) + canAct;
    let el = lanes.querySelector(`:scope > [data-member="${CSS.escape(member.name)}"]`);
    if (!el || laneKeys.get(member.name) !== key) {
      const open = openTimelines.has(member.name) ? openTimelines.get(member.name) : true;
      const fresh = lane(team, member, canAct, open, colors.get(member.name) % 8, openLanes.get(member.name) === true);
      // A keyboard user on a lane's summary keeps the focus there when the lane is re-rendered.
      const refocus = el && document.activeElement && document.activeElement.matches(".lane-summary") && el.contains(document.activeElement);
      if (el) el.replaceWith(fresh);
      if (refocus) fresh.querySelector(".lane-summary").focus();
      el = fresh;
      laneKeys.set(member.name, key);
    }
    const want = previous ? previous.nextElementSibling : lanes.firstElementChild;
    if (want !== el) lanes.insertBefore(el, want);
    previous = el;
  }
  for (const el of [...lanes.children]) if (!seen.has(el.dataset.member)) el.remove();

  const tasksKey = JSON.stringify(snap.tasks);
  if (tasksKey !== lastTasksKey) {
    document.getElementById("tasks").replaceChildren(taskBoard(snap.tasks, snap.tasks_more));
    lastTasksKey = tasksKey;
  }
  const points = snap.members.flatMap((m) => m.latency);
  const latencyKey = JSON.stringify(points);
  if (latencyKey !== lastLatencyKey) {
    const legend = h("ul", { class: "legend small" }, snap.members.filter((m) => m.latency.length).map((m) =>
      h("li", { class: `c${colors.get(m.name) % 8}` }, m.name)));
    document.getElementById("latency").replaceChildren(latencyChart(points, { colors }), legend);
    lastLatencyKey = latencyKey;
  }
  const select = document.querySelector('form[data-action="prompt"] select[name="target"]');
  if (select) {
    const names = snap.members.filter((m) => m.status !== "retired").map((m) => m.name);
    if ([...select.options].map((o) => o.value).join() !== names.join()) {
      const chosen = select.value;
      select.replaceChildren(...names.map((n) => h("option", { value: n, selected: n === chosen ? true : null }, n)));
    }
  }
  const totals = document.querySelector("[data-team-usage]");
  if (totals && snap.usage) totals.replaceChildren(usageBadge(snap.usage, { "data-team-total": "" }), " · ", budgetLine(snap.budget));
  const budgetForm = document.querySelector('form[data-action="budget"]');
  if (budgetForm && snap.budget) {
    budgetForm.dataset.exhausted = snap.budget.exhausted ? "true" : "false";
    const input = budgetForm.querySelector('input[name="tokens"]');
    if (input && document.activeElement !== input) input.placeholder = snap.budget.tokens === null ? "no budget" : String(snap.budget.tokens);
  }
  const stamp = document.querySelector("[data-generated-at]");
  if (stamp) stamp.replaceChildren(timeAgo(snap.generated_at, "as of {ago}"));
  body.dataset.syncedAt = snap.generated_at;
  document.dispatchEvent(new CustomEvent("dashboard:rendered", { detail: snap }));
}

async function act(button, url, done = "retried") {
  button.disabled = true;
  button.classList.remove("failed");
  try {
    await operatorPost(url);
    button.textContent = done;
  } catch (error) {
    button.textContent = "refused";
    button.classList.add("failed");
    button.title = error.message;
  } finally {
    setTimeout(() => { button.disabled = false; }, 1000);
  }
}

// An operator's form: on submit its button is disabled and its status line (.form-status) says
// `busy` until send(form, status) settles; send posts and says in the status line what came
// of it; a refusal reads "<failed>: <why>".
function operatorForm(action, busy, failed, send) {
  const form = document.querySelector(`form[data-action="${action}"]`);
  if (!form) return;
  const status = form.querySelector(".form-status");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const submit = form.querySelector('button[type="submit"]');
    submit.disabled = true;
    status.textContent = busy;
    try {
      await send(form, status);
    } catch (error) {
      status.textContent = `${failed}: ${error.message}`;
    } finally {
      submit.disabled = false;
    }
  });
}

function promptForm(team) {
  operatorForm("prompt", "sending…", "not sent", async (form, status) => {
    const data = new FormData(form);
    const answer = await operatorPost(`/api/v1/teams/${encodeURIComponent(team)}/prompts`, {
      target: data.get("target"), content: data.get("content"),
    });
    status.textContent = `queued for ${answer.prompt.target}`;
    // The status line then follows the prompt in the snapshots (announce.js): started, completed.
    Object.assign(status.dataset, {
      promptRef: answer.prompt.id, promptTarget: answer.prompt.target, promptState: "queued",
      promptAnsweredAt: String(performance.now()),
    });
    form.querySelector("textarea").value = "";
  });
}

function budgetForm(team) {
  operatorForm("budget", "saving…", "not saved", async (form, status) => {
    const raw = new FormData(form).get("tokens").trim();
    const answer = await operatorPost(`/api/v1/teams/${encodeURIComponent(team)}/budget`, { tokens: raw === "" ? null : Number(raw) });
    status.textContent = answer.tokens === null ? "no budget" : `${answer.used} of ${answer.tokens} tokens used${answer.exhausted ? ": still used up" : ""}`;
    form.querySelector('input[name="tokens"]').value = "";
  });
}

// The new host token, answered once by the server: shown here and nowhere again.
function hostTokenForm(team) {
  operatorForm("host-token-rotate", "rotating…", "not rotated", async (form, status) => {
    const answer = await operatorPost(`/api/v1/teams/${encodeURIComponent(team)}/host_token/rotate`);
    const shown = form.querySelector("[data-rotated]");
    shown.querySelector("[data-host-token]").textContent = answer.host_token;
    shown.hidden = false;
    status.textContent = "rotated: hosts with the old token are disconnected";
  });
}

function teamPage() {
  const team = body.dataset.team;
  startAges();
  document.addEventListener("dashboard:rendered", (event) => followSnapshot(event.detail));
  const chartsChanged = startCharts(team, { announce });
  loadOpenLanes();
  const initial = document.getElementById("snapshot");
  if (initial) renderTeam(JSON.parse(initial.textContent));
  openLaneOfHash();
  window.addEventListener("hashchange", openLaneOfHash);
  promptForm(team);
  budgetForm(team);
  hostTokenForm(team);
  const refresh = coalesced(async () => {
    try {
      const requestedAt = performance.now();
      const snap = await getJson(`/teams/${encodeURIComponent(team)}/snapshot.json`);
      snap.requestedAt = requestedAt; // what announce.js may conclude from it (a prompt's absence)
      renderTeam(snap);
      chartsChanged();
      delete body.dataset.syncError;
    } catch (error) {
      body.dataset.syncError = error.message;
      // The doorbell rang but the read failed: read again while the socket is up.
      if (body.dataset.connection === "live") setTimeout(refresh, 2000);
    }
  });
  resync = refresh;
  document.addEventListener("dashboard:refresh", refresh); // console.js: a message crossed the attention threshold
  watchDatabase();
  liveSocket(`/ws/dashboard/${encodeURIComponent(team)}/`, refresh);
}

// ---------------------------------------------------------------- team list
function renderTeams(data) {
  const grid = document.getElementById("teams");
  if (!data.teams.length) return;
  grid.replaceChildren(...data.teams.map((t) =>
    h("a", { class: "card team-card", href: `/teams/${encodeURIComponent(t.team)}/`, "data-team": t.team },
      h("h2", {}, t.team),
      h("ul", { class: "pills" }, t.members.map((m) => h("li", { class: `pill status-${m.status}`, "data-member": m.name, "data-status": m.status }, `${m.name} · ${m.status}`))),
      stateBar(t.messages),
      h("p", { class: "counts" },
        h("span", { class: "q" }, `${t.messages.queued} queued`), " · ", h("span", { class: "a" }, `${t.messages.accepted} accepted`), " · ",
        h("span", { class: "d" }, `${t.messages.delivered} delivered`), ` · ${t.open_tasks} open tasks`,
        t.attention ? [" · ", h("span", { class: "attention-count", "data-attention-count": t.attention }, `${t.attention} need attention`)] : null),
      h("p", { class: "small muted" }, timeAgo(t.created_at, "created {ago}")))));
}

// A team made by an operator: its Lead and host tokens, answered once, shown once.
function teamCreateForm(refresh) {
  operatorForm("team-create", "creating…", "not created", async (form, status) => {
    const input = form.querySelector('input[name="name"]');
    const answer = await operatorPost("/api/v1/teams", { name: input.value.trim() });
    const created = document.querySelector("[data-created-team]");
    const link = created.querySelector("[data-created-link]");
    link.textContent = answer.team;
    link.href = `/teams/${encodeURIComponent(answer.team)}/`;
    created.dataset.createdTeam = answer.team;
    created.querySelector("[data-lead-token]").textContent = answer.lead.token;
    created.querySelector("[data-host-token]").textContent = answer.host_token;
    created.hidden = false;
    status.textContent = `created ${answer.team}`;
    input.value = "";
    refresh();
  });
}

function teamListPage() {
  startAges();
  const initial = document.getElementById("teams-data");
  if (initial) renderTeams({ teams: JSON.parse(initial.textContent) });
  const refresh = coalesced(async () => {
    try {
      renderTeams(await getJson("/teams.json"));
    } catch (error) {
      body.dataset.syncError = error.message;
    }
  });
  resync = refresh;
  teamCreateForm(refresh);
  watchDatabase();
  liveSocket("/ws/dashboard/", refresh);
  // The socket hears the teams that existed when it opened; new teams show up on this slow re-read.
  setInterval(refresh, 30000);
}

// Every page: any <time data-ago> (a template's {% age %}, console.js's) stays current.
startAges();
if (page === "team") teamPage();
else if (page === "teams") teamListPage();
