// Screen-reader announcements of what changed on the team page (docs/dashboard.md,
// "Keyboard and screen readers"): one polite live region ([data-announcer]) says
// when a member's status changes, when a message is delivered and when a prompt
// sent from this page starts and completes. The prompt form's own status line
// follows its prompt the same way ("queued for lead" → "lead is running it" →
// "lead completed it").

let region = null;
let lastStatuses = null;
let lastDelivered = null;

export function announce(text) {
  if (!region) region = document.querySelector("[data-announcer]");
  if (!region || !text) return;
  // A fresh text node per announcement: screen readers read additions to the region.
  region.replaceChildren(document.createTextNode(text));
}

function promptProgress(snap) {
  const status = document.querySelector("[data-prompt-status][data-prompt-ref]");
  if (!status) return;
  const id = status.dataset.promptRef;
  const target = status.dataset.promptTarget;
  const member = snap.members.find((m) => m.name === target);
  if (!member) return;
  const prompt = member.prompts.find((p) => p.id === id);
  // A snapshot requested before the prompt was answered may have been read before it was made:
  // its absence there says nothing.
  if (!prompt && !(snap.requestedAt > Number(status.dataset.promptAnsweredAt))) return;
  // The snapshot lists prompts still waiting or running: one no longer there has completed.
  const state = prompt ? prompt.state : "completed";
  if (status.dataset.promptState === state) return;
  status.dataset.promptState = state;
  status.textContent = {
    queued: `queued for ${target}`,
    started: `${target} is running it`,
    completed: `${target} completed it`,
  }[state] || state;
  if (state !== "queued") announce(`Prompt to ${target}: ${status.textContent}.`);
  if (state === "completed") delete status.dataset.promptRef;
}

export function followSnapshot(snap) {
  const statuses = new Map(snap.members.map((m) => [m.name, m.status]));
  const delivered = new Map(snap.members.map((m) => [m.name, m.counts.delivered]));
  if (lastStatuses) {
    const said = [];
    for (const [name, status] of statuses) {
      const before = lastStatuses.get(name);
      if (before === undefined) said.push(`${name} joined the team, ${status}.`);
      else if (before !== status) said.push(`${name} is now ${status}.`);
      const more = delivered.get(name) - (lastDelivered.get(name) || 0);
      if (more > 0) said.push(`${more} message${more === 1 ? "" : "s"} delivered to ${name}.`);
    }
    if (said.length) announce(said.join(" "));
  }
  lastStatuses = statuses;
  lastDelivered = delivered;
  promptProgress(snap);
}
