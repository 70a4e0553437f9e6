// The operator console: "Needs attention" on the team page, and the live team
// messages page with its filters (docs/dashboard.md, "Needs attention" and
// "Team messages"). The message cards are the team page's own (messageItem in
// dashboard.js); the trace page is server-rendered and needs nothing here.

import { timeAgo } from "./ages.js";
import { coalesced, getJson, h, liveSocket, messageItem, operatorPost } from "./dashboard.js";

const body = document.body;
const team = body.dataset.team;

const teamPath = (...parts) => `/teams/${[team, ...parts].map(encodeURIComponent).join("/")}/`;
const apiPath = (...parts) => `/api/v1/teams/${[team, ...parts].map(encodeURIComponent).join("/")}`;

// <time datetime title data-ago>: ages.js (started by dashboard.js) keeps it current.
const since = (iso, template) => timeAgo(iso, template);

// ---------------------------------------------------------------- needs attention
async function retry(button, url) {
  button.disabled = true;
  try {
    const answer = await operatorPost(url);
    button.textContent = "retried";
    button.dataset.retried = answer.retried ?? "";
  } catch (error) {
    button.textContent = "refused";
    button.title = error.message;
  } finally {
    setTimeout(() => { button.disabled = false; }, 1000);
  }
}

// An operator's answer to an ask_human: a decision (one of its options) or words; the first answer
// wins, a later one is refused (409 ASK_NOT_PENDING) and says so in place.
async function answerAsk(control, askId, payload) {
  const item = control.closest("[data-attention]");
  const status = item && item.querySelector("[data-ask-status]");
  for (const el of item ? item.querySelectorAll("button, input") : []) el.disabled = true;
  try {
    const answer = await operatorPost(apiPath("asks", askId, "answer"), payload);
    if (status) { status.textContent = `answered${answer.ask.decision ? `: ${answer.ask.decision}` : ""}`; status.dataset.answered = "true"; }
  } catch (error) {
    if (status) { status.textContent = `refused: ${error.message}`; status.dataset.answered = "false"; }
    for (const el of item ? item.querySelectorAll("button, input") : []) el.disabled = false;
  }
}

function askAnswerControls(item) {
  const buttons = item.options.map((option) => h("button", { type: "button", class: "small", "data-action": "answer",
    "data-decision": option, "aria-label": `Answer ${item.member}'s ask: ${option}`,
    onclick: (ev) => answerAsk(ev.currentTarget, item.ask_id, { decision: option }) }, option));
  const words = h("input", { type: "text", name: "answer", required: true, maxlength: 16000, placeholder: "answer in words",
    "aria-label": `Answer ${item.member}'s ask in words` });
  const form = h("form", { class: "ask-answer", "data-action": "answer", onsubmit: (ev) => {
    ev.preventDefault();
    answerAsk(ev.currentTarget, item.ask_id, { answer: words.value });
  } }, words, h("button", { type: "submit", class: "small" }, "answer"));
  return [...buttons, form, h("span", { class: "small", role: "status", "data-ask-status": "" })];
}

function askWhat(item) {
  const context = item.context_html ? h("details", { class: "ask-context small" }, h("summary", {}, "context")) : null;
  if (context) {
    const body = h("div", { class: "md" });
    body.innerHTML = item.context_html; // rendered from Markdown and sanitised by the server (markdown-it-py + nh3)
    context.append(body);
  }
  return [h("b", {}, item.member), item.ask_kind === "approval" ? " asks for approval: " : " asks: ",
    h("q", { class: "ask-question", "data-ask-question": "" }, item.question), " ", since(item.since, "waiting {age}"),
    item.expires_at ? h("span", { class: "muted small", "data-ask-expires": item.expires_at },
      ` · expires at ${new Date(item.expires_at).toLocaleTimeString()}`) : null, context];
}

function attentionItem(item, canAct) {
  // Where to look next: a message's trace; for a prompt, its member's lane, which lists the prompts waiting.
  let link = null;
  if (item.message_id) {
    link = h("a", { href: teamPath("messages", item.message_id), class: "small", "data-trace-link": item.message_id }, "open trace");
  } else if (item.kind === "prompt" || item.kind === "stalled") {
    link = h("a", { href: `#lane-${item.member}`, class: "small", "data-lane-link": item.member,
      "aria-label": item.kind === "prompt" ? `Show ${item.member}'s lane and its prompts` : `Show ${item.member}'s lane` }, "show in lane");
  }
  let what;
  let action = null;
  if (item.kind === "message") {
    what = [h("b", {}, `#${item.seq}`), ` from ${item.sender} to `, h("b", {}, item.member), ` ${item.state}, `,
      since(item.since, `stuck {age}`)];
    if (canAct) {
      action = h("button", { type: "button", class: "small", "data-action": "retry", "data-retry-message": item.message_id,
        "aria-label": `Retry message #${item.seq} to ${item.member}`,
        onclick: (ev) => retry(ev.currentTarget, apiPath("messages", item.message_id, "retry")) }, "retry");
    }
  } else if (item.kind === "member") {
    what = [h("b", {}, item.member), ` ${item.reason}, `, since(item.since, `for {age}`)];
    if (canAct) {
      action = h("button", { type: "button", class: "small", "data-action": "retry-member", "data-member-ref": item.member,
        "aria-label": `Retry ${item.member}`, onclick: (ev) => retry(ev.currentTarget, apiPath("members", item.member, "retry")) }, "retry");
    }
  } else if (item.kind === "ask") {
    what = askWhat(item);
    if (canAct) action = askAnswerControls(item);
  } else if (item.kind === "stalled") {
    what = [h("b", {}, item.member), " stalled: turn open, nothing recorded ", since(item.since, "for {age}")];
  } else if (item.kind === "budget") {
    what = [h("b", {}, "token budget used up"), `: ${item.used} of ${item.tokens} tokens, `, since(item.since, `since {age}`)];
    if (canAct) {
      link = h("a", { href: "#budget-tokens", class: "small", "data-budget-link": "" }, "raise the budget");
    }
  } else {
    what = [`prompt from ${item.author} to `, h("b", {}, item.member), " waiting, ", since(item.since, `for {age}`)];
  }
  return h("li", {
    class: `attention-item attention-${item.kind}`, "data-attention": item.kind,
    // Not data-member: on this page [data-member="<name>"] is that member's lane, one element
    // per member (docs/dashboard.md), and tests and scripts select the lane by it alone.
    "data-message-id": item.message_id || null,
    "data-attention-member": item.kind === "member" || item.kind === "stalled" ? item.member : null,
    "data-target": item.kind === "member" || item.kind === "stalled" ? null : item.member, "data-prompt-id": item.prompt_id || null,
    "data-ask-id": item.ask_id || null,
  },
  h("span", { class: "attention-what" }, what),
  item.error ? h("div", { class: "last-error small", role: "note", "data-last-error": "" }, item.error) : null,
  h("span", { class: "attention-actions" }, action, link));
}

let attentionKey = "";
let dueTimer = null;

function renderAttention(snap) {
  const panel = document.querySelector("[data-attention-panel]");
  const attention = snap.attention;
  if (!panel || !attention) return;
  const canAct = snap.me.can_act;
  const key = JSON.stringify([attention.items.map((i) => [i.kind, i.message_id, i.member, i.prompt_id, i.ask_id, i.state, i.error, i.since]), canAct]);
  panel.dataset.attentionCount = attention.count;
  panel.querySelector("[data-attention-count]").textContent = attention.count;
  if (key !== attentionKey) {
    attentionKey = key;
    const list = panel.querySelector("[data-attention-list]");
    list.replaceChildren(...attention.items.map((item) => attentionItem(item, canAct)));
    const empty = panel.querySelector("[data-attention-empty]");
    if (empty) empty.hidden = attention.items.length > 0;
    const retryAll = panel.querySelector('[data-action="retry-team"]');
    if (retryAll) retryAll.hidden = !attention.items.some((i) => i.kind === "message");
  }
  // Nothing rings when a message merely waits: read again when the next one crosses the threshold.
  clearTimeout(dueTimer);
  if (attention.due_at) {
    const wait = Math.max(250, Date.parse(attention.due_at) - Date.parse(snap.generated_at) + 250);
    dueTimer = setTimeout(() => document.dispatchEvent(new CustomEvent("dashboard:refresh")), wait);
  }
}

function attentionPanel() {
  const initial = document.getElementById("snapshot");
  if (initial) renderAttention(JSON.parse(initial.textContent));
  document.addEventListener("dashboard:rendered", (event) => renderAttention(event.detail));
  const retryAll = document.querySelector('[data-action="retry-team"]');
  if (retryAll) {
    retryAll.addEventListener("click", async () => {
      retryAll.disabled = true;
      const status = document.querySelector("[data-retry-team-status]");
      try {
        const answer = await operatorPost(apiPath("retry"));
        status.textContent = `retried ${answer.retried}`;
        status.dataset.retried = answer.retried;
      } catch (error) {
        status.textContent = `refused: ${error.message}`;
      } finally {
        retryAll.disabled = false;
      }
    });
  }
}

// ---------------------------------------------------------------- team messages
function renderMessages(data) {
  const list = document.querySelector("[data-team-messages]");
  const items = data.messages.map((m) => messageItem(team, m, data.me.can_act, { withTarget: true }));
  list.replaceChildren(...(items.length ? items : [h("li", { class: "muted", "data-empty": "" }, "No messages match.")]));
  list.dataset.count = data.messages.length;
  body.dataset.syncedAt = new Date().toISOString();
}

function messagesPage() {
  const initial = document.getElementById("messages-data");
  const data = initial ? JSON.parse(initial.textContent) : null;
  if (data) renderMessages(data);
  if (data && Object.keys(data.errors || {}).length) return; // a bad filter: nothing to follow
  const refresh = coalesced(async () => {
    try {
      renderMessages(await getJson(`${teamPath().replace(/\/$/, "")}/messages.json${location.search}`));
      delete body.dataset.syncError;
    } catch (error) {
      body.dataset.syncError = error.message;
    }
  });
  liveSocket(`/ws/dashboard/${encodeURIComponent(team)}/`, refresh);
  const retrySelection = document.querySelector('[data-action="retry-selection"]');
  if (retrySelection) {
    retrySelection.addEventListener("click", async () => {
      const status = document.querySelector("[data-retry-selection-status]");
      const filters = Object.fromEntries([...new URLSearchParams(location.search)].filter(([k, v]) => k !== "cursor" && v));
      try {
        const answer = await operatorPost(apiPath("retry"), filters);
        status.textContent = `retried ${answer.retried}`;
        status.dataset.retried = answer.retried;
      } catch (error) {
        status.textContent = `refused: ${error.message}`;
      }
    });
  }
}

if (body.dataset.page === "team") attentionPanel();
else if (body.dataset.page === "messages") messagesPage();
