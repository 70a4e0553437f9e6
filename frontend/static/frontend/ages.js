// Relative ages ("3 s ago", "stuck 2 min") with the exact time on hover.
//
// Any page element <time datetime="ISO" data-ago="TEMPLATE"> is kept current
// once a second: in TEMPLATE "{ago}" becomes "3 s ago" and "{age}" becomes
// "3 s" (so data-ago="stuck {age}" reads "stuck 2 min"). Its title is the exact
// local date and time. Build one with timeAgo(iso, template) in a module, or
// with {% age value "template" %} in a template (frontend/templatetags/ages.py);
// docs/dashboard.md, "Relative ages".

export function age(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) {
    const hours = Math.floor(s / 3600);
    const minutes = Math.floor((s % 3600) / 60);
    return minutes && hours < 10 ? `${hours} h ${minutes} min` : `${hours} h`;
  }
  return `${Math.floor(s / 86400)} d`;
}

export function ago(iso, now = Date.now()) {
  const seconds = (now - Date.parse(iso)) / 1000;
  return seconds < 1 ? "just now" : `${age(seconds)} ago`;
}

const pad = (n) => String(n).padStart(2, "0");

export function exact(iso) {
  const d = new Date(iso);
  const offset = -d.getTimezoneOffset();
  const zone = `UTC${offset >= 0 ? "+" : "−"}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${zone}`;
}

function render(el, now) {
  const iso = el.getAttribute("datetime");
  if (!iso) return;
  const seconds = (now - Date.parse(iso)) / 1000;
  const text = el.dataset.ago
    .replace("{ago}", seconds < 1 ? "just now" : `${age(seconds)} ago`)
    .replace("{age}", age(seconds));
  if (el.textContent !== text) el.textContent = text;
  const title = exact(iso);
  if (el.title !== title) el.title = title;
}

// <time datetime=iso title=exact data-ago=template>, current at once.
export function timeAgo(iso, template = "{ago}", attrs = {}) {
  if (!iso) return null;
  const el = document.createElement("time");
  for (const [key, value] of Object.entries(attrs)) if (value !== null && value !== undefined) el.setAttribute(key, value);
  el.setAttribute("datetime", iso);
  el.dataset.ago = template;
  render(el, Date.now());
  return el;
}

export function refreshAges(root = document) {
  const now = Date.now();
  for (const el of root.querySelectorAll("time[data-ago]")) render(el, now);
}

let started = false;
export function startAges() {
  if (started) return;
  started = true;
  refreshAges();
  setInterval(() => { if (!document.hidden) refreshAges(); }, 1000);
}
