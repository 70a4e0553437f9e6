// The team page's charts (docs/dashboard.md, "Charts").
//
// Windowed charts: delivered msg/min, pending depth and send→delivered p50/p95
// over 15 min / 1 h / 24 h, per member (in its lane) and for the team. The
// server reads them from the database and draws them as SVG
// (/teams/<team>/charts.json?window=, frontend/charts.py); this module asks for
// them when the team changes (at most every 2 s) and every 15 s (time moves on
// even when nothing happens), and puts them with their numbers on the page.
//
// Recent deliveries: the scatter of the snapshot's last deliveries per target,
// drawn here with real ticks, outliers clipped and marked.
//
// A member's colour is its place in the roster (class c0…c7) everywhere.

import { exact } from "./ages.js";

const SVG = "http://www.w3.org/2000/svg";
const WINDOWS = ["15m", "1h", "24h"];
const WINDOW_NAMES = { "15m": "15 min", "1h": "1 h", "24h": "24 h" };
const REFRESH_EVERY = 15000;
const AT_MOST_EVERY = 2000;

function el(ns, tag, attrs = {}, ...children) {
  const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
const h = (tag, attrs, ...children) => el(null, tag, attrs, ...children);
const s = (tag, attrs, ...children) => el(SVG, tag, attrs, ...children);

export function seconds(value) {
  if (value === null || value === undefined) return "—";
  if (value === 0) return "0";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 120) return `${+value.toFixed(1)} s`;
  return `${+(value / 60).toFixed(1)} min`;
}

const perMinute = (value) => (value >= 10 ? value.toFixed(0) : String(+value.toFixed(2)));

// 0 and round steps (1, 2, 2.5, 5 × 10ⁿ) up to at least top.
export function niceTicks(top, count = 4) {
  if (!(top > 0)) return [0, 1];
  const raw = top / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((v) => v >= raw);
  const ticks = [0];
  while (ticks[ticks.length - 1] < top - 1e-9) ticks.push(+(ticks[ticks.length - 1] + step).toFixed(10));
  return ticks;
}

// The top of the scale: the largest value unless a few lie far above the rest.
function clipTop(values) {
  if (!values.length) return 0;
  const top = Math.max(...values);
  const sorted = values.filter((v) => v > 0).sort((a, b) => a - b);
  const p90 = sorted.length ? sorted[Math.max(0, Math.ceil(0.9 * sorted.length) - 1)] : 0;
  return values.length >= 5 && p90 > 0 && top > 2.5 * p90 ? p90 * 1.5 : top;
}

const pad = (n) => String(n).padStart(2, "0");
const clockOf = (ms, withSeconds) => {
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}${withSeconds ? `:${pad(d.getSeconds())}` : ""}`;
};
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].map((v) => v * 1000);

// ------------------------------------------------------------- recent deliveries
export function latencyChart(points, { width = 320, height = 160, colors = null } = {}) {
  const svg = s("svg", { class: "latency", viewBox: `0 0 ${width} ${height}`, role: "img", "data-points": points.length });
  if (!points.length) {
    svg.append(s("title", {}, "No delivered messages yet"));
    svg.append(s("text", { x: width / 2, y: height / 2, class: "axis", "text-anchor": "middle" }, "no deliveries yet"));
    return svg;
  }
  const times = points.map((p) => Date.parse(p.delivered_at));
  let t0 = Math.min(...times);
  let t1 = Math.max(...times);
  if (t1 - t0 < 10000) { const mid = (t0 + t1) / 2; t0 = mid - 5000; t1 = mid + 5000; }
  const values = points.map((p) => p.seconds);
  const ticks = niceTicks(clipTop(values));
  const yMax = ticks[ticks.length - 1];
  const left = 46, right = 10, top = 10, bottom = 22;
  const plotW = width - left - right, plotH = height - top - bottom;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * plotW;
  const y = (v) => top + (1 - Math.min(v, yMax) / yMax) * plotH;
  svg.append(s("title", {}, `send → delivered, last ${points.length} deliveries, slowest ${seconds(Math.max(...values))}`));
  for (const t of ticks) {
    svg.append(s("g", { class: "tick y-tick", "data-tick": t },
      s("line", { class: "grid", x1: left, x2: width - right, y1: y(t).toFixed(1), y2: y(t).toFixed(1) }),
      s("text", { class: "axis", x: left - 4, y: (y(t) + 3.5).toFixed(1), "text-anchor": "end" }, seconds(t))));
  }
  const step = TIME_STEPS.find((v) => (t1 - t0) / v <= 4) || 86400000;
  const offset = new Date(t0).getTimezoneOffset() * 60000; // round ticks in local time
  for (let t = Math.ceil((t0 - offset) / step) * step + offset; t <= t1; t += step) {
    svg.append(s("g", { class: "tick x-tick", "data-tick": new Date(t).toISOString() },
      s("line", { class: "axis-line", x1: x(t).toFixed(1), x2: x(t).toFixed(1), y1: top + plotH, y2: top + plotH + 4 }),
      s("text", { class: "axis", x: x(t).toFixed(1), y: height - 6, "text-anchor": "middle" }, clockOf(t, step < 60000))));
  }
  svg.append(s("line", { class: "axis-line", x1: left, x2: width - right, y1: top + plotH, y2: top + plotH }));
  const byTarget = new Map();
  points.forEach((p, i) => {
    if (!byTarget.has(p.target)) byTarget.set(p.target, []);
    byTarget.get(p.target).push([x(times[i]), y(p.seconds), p]);
  });
  for (const [target, pts] of byTarget) {
    const cls = `series c${colors && colors.has(target) ? colors.get(target) % 8 : 0}`;
    pts.sort((a, b) => a[0] - b[0]);
    if (pts.length > 1) svg.append(s("polyline", { class: `${cls} line`, points: pts.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(" ") }));
    for (const [px, py, p] of pts) {
      const clipped = p.seconds > yMax;
      const tip = s("title", {}, `${p.target}: ${seconds(p.seconds)}${clipped ? " (above the scale)" : ""}, delivered ${exact(p.delivered_at)}`);
      svg.append(s("circle", { cx: px.toFixed(1), cy: py.toFixed(1), r: 2.4, class: `${cls}${clipped ? " clipped" : ""}`, "data-message-ref": p.message_id, "data-clipped": clipped ? p.seconds : null }, tip));
      if (clipped) svg.append(s("path", { class: `${cls} clipped`, d: `M${(px - 4).toFixed(1)},${top + 6} L${px.toFixed(1)},${top - 1} L${(px + 4).toFixed(1)},${top + 6} Z` }));
    }
  }
  return svg;
}

// ------------------------------------------------------------- windowed charts
function numbers(scope, n, windowKey) {
  return h("dl", { class: "chart-numbers", "data-chart-numbers": scope },
    h("div", {}, h("dt", {}, "pending now"), h("dd", { "data-number": "depth" }, n.depth)),
    h("div", {}, h("dt", {}, `delivered (${WINDOW_NAMES[windowKey]})`), h("dd", { "data-number": "delivered" }, n.delivered)),
    n.cancelled ? h("div", {}, h("dt", {}, `cancelled (${WINDOW_NAMES[windowKey]})`), h("dd", { "data-number": "cancelled" }, n.cancelled)) : null,
    h("div", {}, h("dt", {}, "msg/min"), h("dd", { "data-number": "rate" }, perMinute(n.rate))),
    h("div", {}, h("dt", {}, "p50"), h("dd", { "data-number": "p50" }, seconds(n.p50))),
    h("div", {}, h("dt", {}, "p95"), h("dd", { "data-number": "p95" }, seconds(n.p95))));
}

function figure(name, svgText) {
  const holder = h("figure", { class: "chart-figure" }, h("figcaption", { class: "small muted" }, name));
  holder.insertAdjacentHTML("beforeend", svgText); // drawn by the server (frontend/charts.py), every string escaped there
  return holder;
}

// A chart needs a history to be worth its height: traffic (a delivery, or a message pending) in
// at least MIN_ACTIVE_BUCKETS of the window's buckets. A short run (a 40 s demo is one or two
// 1-min buckets) would draw one spike at "now": it gets its numbers and a line saying so.
const MIN_ACTIVE_BUCKETS = 3;
const BUCKET_NAMES = { "15m": "1-min", "1h": "2-min", "24h": "30-min" };

export function activeBuckets(data) {
  return data.rate.filter((rate, i) => rate > 0 || data.depth[i] > 0).length;
}

function chartSet(scope, data, windowKey) {
  const active = activeBuckets(data);
  if (active < MIN_ACTIVE_BUCKETS) {
    return [numbers(scope, data.numbers, windowKey),
      h("p", { class: "small muted no-history", "data-no-history": active },
        active ? `Charts once traffic spans ${MIN_ACTIVE_BUCKETS} ${BUCKET_NAMES[windowKey]} buckets of the last ${WINDOW_NAMES[windowKey]} (now ${active}).`
          : `No traffic in the last ${WINDOW_NAMES[windowKey]}.`)];
  }
  return [numbers(scope, data.numbers, windowKey),
    h("div", { class: "chart-row" },
      figure("delivered msg/min", data.svg.rate),
      figure("pending depth", data.svg.depth),
      figure("send → delivered p50 — p95 - -", data.svg.latency))];
}

let current = null;

function fillLane(slot) {
  const member = current && current.members.find((m) => m.name === slot.dataset.laneCharts);
  if (!member) return;
  if (slot.dataset.filledFrom === current.generated_at) return;
  slot.replaceChildren(...chartSet(member.name, member, current.window));
  slot.dataset.filledFrom = current.generated_at;
  slot.dataset.window = current.window;
  slot.dataset.history = String(activeBuckets(member) >= MIN_ACTIVE_BUCKETS);
}

function fillLanes() {
  for (const slot of document.querySelectorAll("[data-lane-charts]")) fillLane(slot);
}

function render(data) {
  current = data;
  const panel = document.getElementById("team-charts");
  if (panel) {
    const legend = h("ul", { class: "legend small", "aria-label": "Colours" }, data.members.map((m) =>
      h("li", { class: `c${m.color}`, "data-legend": m.name }, m.name)));
    panel.replaceChildren(...chartSet("team", data.totals, data.window), legend);
    if (data.sampled) panel.append(h("p", { class: "small muted" }, "Percentiles from the newest 5000 deliveries of the window."));
    panel.dataset.window = data.window;
    panel.dataset.history = String(activeBuckets(data.totals) >= MIN_ACTIVE_BUCKETS);
  }
  fillLanes();
  document.body.dataset.chartsWindow = data.window;
}

function chosenWindow() {
  const fromUrl = new URLSearchParams(location.search).get("window");
  if (WINDOWS.includes(fromUrl)) return fromUrl;
  try {
    const saved = localStorage.getItem("steerboard.chartsWindow");
    if (WINDOWS.includes(saved)) return saved;
  } catch (error) { /* storage may be off */ }
  return "15m";
}

export function startCharts(team, { announce = () => {} } = {}) {
  const panel = document.getElementById("team-charts");
  if (!panel) return () => {};
  let windowKey = chosenWindow();
  let last = 0;
  let timer = null;
  let inFlight = false;
  let again = false;

  const load = async () => {
    if (inFlight) { again = true; return; }
    inFlight = true;
    try {
      do {
        again = false;
        last = Date.now();
        const response = await fetch(`/teams/${encodeURIComponent(team)}/charts.json?window=${windowKey}`,
          { headers: { Accept: "application/json" }, cache: "no-store" });
        if (response.ok) {
          const data = await response.json();
          if (data.window === windowKey) render(data);
        }
      } while (again);
    } catch (error) {
      // The next doorbell or the timer asks again.
    } finally {
      inFlight = false;
    }
  };
  // On a doorbell: at once if the last read is old enough, else once when it is.
  const changed = () => {
    const wait = AT_MOST_EVERY - (Date.now() - last);
    if (wait <= 0) load();
    else if (!timer) timer = setTimeout(() => { timer = null; load(); }, wait);
  };

  const switcher = document.querySelector("[data-chart-window]");
  if (switcher) {
    const buttons = WINDOWS.map((key) => h("button", {
      type: "button", class: "small window-choice", "data-window-choice": key, "aria-pressed": String(key === windowKey),
      onclick: () => {
        windowKey = key;
        for (const b of buttons) b.setAttribute("aria-pressed", String(b.dataset.windowChoice === key));
        try { localStorage.setItem("steerboard.chartsWindow", key); } catch (error) { /* storage may be off */ }
        const url = new URL(location.href);
        url.searchParams.set("window", key);
        history.replaceState(null, "", url);
        announce(`Charts now show the last ${WINDOW_NAMES[key]}.`);
        load();
      },
    }, WINDOW_NAMES[key]));
    switcher.replaceChildren(h("span", { class: "small muted", id: "window-label" }, "Window"), ...buttons);
    switcher.setAttribute("aria-labelledby", "window-label");
  }
  document.addEventListener("dashboard:rendered", fillLanes);
  setInterval(() => { if (!document.hidden) load(); }, REFRESH_EVERY);
  load();
  return changed;
}
