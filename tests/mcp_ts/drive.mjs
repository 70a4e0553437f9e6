// The TypeScript MCP SDK (@modelcontextprotocol/sdk, the client most IDE agents share) against
// Steerboard's /mcp: list the tools, call each of the ten, a refused call per error code the
// tools can answer, read the resources, and a bad token. Driven by tests/e2e/test_mcp_typescript.py,
// which sets the team up; any surprise fails an assertion (exit 1). On success it prints a JSON
// summary of what it saw on stdout.
//
//   node drive.mjs '{"url": "http://127.0.0.1:8000/mcp", "lead": "sbm_...", "implementer": "sbm_...",
//                    "retired": "gone", "failed": "broken"}'
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const config = JSON.parse(process.argv[2]);
const summary = { tools: [], succeeded: [], refused: [], resources: [], unauthorized: null };

async function connect(token) {
  const transport = new StreamableHTTPClientTransport(new URL(config.url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "steerboard-ts-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

// A successful call: the SDK has validated structuredContent against the tool's outputSchema.
async function ok(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  assert.equal(result.isError ?? false, false, `${name}: ${JSON.stringify(result.content)}`);
  assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent, name);
  summary.succeeded.push(name);
  return result.structuredContent;
}

// A refused call reaches the caller as the server's code and message, not as a schema error.
async function refused(client, name, args, code) {
  const result = await client.callTool({ name, arguments: args });
  assert.equal(result.isError, true, `${name} should be refused with ${code}: ${JSON.stringify(result)}`);
  assert.equal(result.structuredContent, undefined, name);
  assert.match(result.content[0].text, new RegExp(`^${code}: \\S`), name);
  const body = JSON.parse(result.content[1].text);
  assert.equal(body.error.code, code, name);
  assert.equal(result.content[0].text, `${body.error.code}: ${body.error.message}`);
  summary.refused.push({ tool: name, code, text: result.content[0].text });
  return body;
}

const lead = await connect(config.lead);
const impl = await connect(config.implementer);
try {
  // The ten tools, with schemas the SDK compiles (it validates every result against them).
  const listed = await lead.listTools();
  summary.tools = listed.tools.map((t) => t.name);
  await impl.listTools();

  // Each of the ten, successfully.
  const spawned = await ok(lead, "spawn_teammate", { name: "reviewer", description: "reviews", prompt: "" });
  assert.equal(spawned.member.name, "reviewer");
  const sent = await ok(lead, "send_message", { target: "implementer", message: "Start on task-1.", idempotency_key: "go" });
  assert.equal(sent.status, "accepted"); // the implementer's session is connected (the test holds it)
  const agents = await ok(lead, "list_agents", {});
  assert.ok(agents.agents.some((a) => a.name === "implementer"));
  const interrupted = await ok(lead, "interrupt_agent", { target: "implementer" });
  assert.equal(typeof interrupted.previous_status, "string");
  const task1 = await ok(lead, "team_task_create", { subject: "Parser", description: "Write the parser." });
  const task2 = await ok(lead, "team_task_create", {
    subject: "Tests", description: "Test the parser.", blocked_by: [task1.task.id],
  });
  const task3 = await ok(lead, "team_task_create", { subject: "Docs", description: "Document it." });
  const board = await ok(lead, "team_task_list", {});
  assert.equal(board.tasks.length, 3);
  const got = await ok(impl, "team_task_get", { task_id: task1.task.id });
  const claimed = await ok(impl, "team_task_update", {
    task_id: task1.task.id, expected_revision: got.task.revision, action: "claim",
  });
  assert.equal(claimed.task.owner, "implementer");
  const asked = await ok(impl, "ask_human", { question: "Merge the parser?", kind: "approval" });
  assert.equal(asked.state, "pending");
  assert.match(asked.ask_id, /^ask-/);

  // wait_agent returns when mail reaches the caller; meanwhile a second wait is one too many
  // (whichever of the two the server sees second is refused at once).
  const wait = () => lead.callTool({ name: "wait_agent", arguments: { timeout_ms: 60000 } });
  const first = wait();
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const second = wait();
  const tagged = (promise, which) => promise.then((result) => ({ which, result }));
  const settled = await Promise.race([tagged(first, first), tagged(second, second)]);
  const tooMany = settled.result;
  assert.equal(tooMany.isError, true, JSON.stringify(tooMany));
  assert.equal(tooMany.structuredContent, undefined);
  assert.match(tooMany.content[0].text, /^TOO_MANY_WAITS: \S/);
  assert.equal(JSON.parse(tooMany.content[1].text).error.code, "TOO_MANY_WAITS");
  summary.refused.push({ tool: "wait_agent", code: "TOO_MANY_WAITS", text: tooMany.content[0].text });
  const waiting = settled.which === first ? second : first;
  await ok(impl, "send_message", { target: "lead", message: "task-1 claimed" });
  const woke = await waiting;
  assert.equal(woke.isError ?? false, false, JSON.stringify(woke.content));
  assert.deepEqual(woke.structuredContent, { timed_out: false, no_progress: null });
  summary.succeeded.push("wait_agent");

  // A refused call per error code the tools answer.
  await refused(lead, "send_message", { target: "nobody", message: "hi" }, "TEAM_UNKNOWN_TARGET");
  await refused(lead, "send_message", { target: "lead", message: "hi" }, "TEAM_SELF_MESSAGE");
  await refused(lead, "send_message", { target: config.retired, message: "hi" }, "TEAM_TARGET_RETIRED");
  await refused(lead, "send_message", { target: config.failed, message: "hi" }, "TEAM_TARGET_FAILED");
  await refused(lead, "send_message", { target: "implementer", message: "x".repeat(4096) }, "TEAM_MESSAGE_TOO_LARGE");
  const conflict = await refused(
    lead, "send_message", { target: "implementer", message: "Start on task-2.", idempotency_key: "go" },
    "IDEMPOTENCY_KEY_CONFLICT",
  );
  assert.equal(conflict.persisted, false);
  await refused(lead, "send_message", { target: "implementer", message: "hi", reply_to: "team-message-x" }, "NOT_FOUND");
  await refused(lead, "wait_agent", { timeout_ms: 5 }, "VALIDATION_ERROR");
  await refused(lead, "no_such_tool", {}, "NOT_FOUND");
  // The reviewer has no session yet: its mail waits, up to the mailbox's limit.
  let full = null;
  for (let i = 0; i < 10 && full === null; i++) {
    const result = await lead.callTool({ name: "send_message", arguments: { target: "reviewer", message: `m${i}` } });
    if (result.isError) {
      assert.match(result.content[0].text, /^TEAM_MAILBOX_FULL: /);
      full = result;
    } else {
      assert.equal(result.structuredContent.status, "queued");
    }
  }
  assert.ok(full, "the reviewer's mailbox never filled");
  summary.refused.push({ tool: "send_message", code: "TEAM_MAILBOX_FULL", text: full.content[0].text });

  await refused(impl, "spawn_teammate", { name: "another", description: "d", prompt: "" }, "LEAD_ONLY");
  await refused(lead, "spawn_teammate", { name: "implementer", description: "d", prompt: "" }, "TEAM_NAME_TAKEN");
  await refused(lead, "spawn_teammate", { name: "another", description: "d", prompt: "" }, "TEAM_ROSTER_FULL");

  await refused(lead, "team_task_create", { subject: "One more", description: "d" }, "TEAM_TASK_BOARD_FULL");
  await refused(lead, "team_task_get", { task_id: "task-99" }, "TASK_NOT_FOUND");
  await refused(impl, "team_task_update", {
    task_id: task1.task.id, expected_revision: got.task.revision, action: "release",
  }, "TASK_REVISION_CONFLICT");
  await refused(lead, "team_task_update", {
    task_id: task3.task.id, expected_revision: task3.task.revision, action: "reopen",
  }, "TASK_INVALID_ACTION");
  await refused(lead, "team_task_update", {
    task_id: task1.task.id, expected_revision: claimed.task.revision, action: "set_dependencies",
    blocked_by: [task2.task.id],
  }, "TASK_DEPENDENCY_CYCLE");
  await refused(lead, "team_task_update", {
    task_id: task1.task.id, expected_revision: claimed.task.revision, action: "delete",
  }, "TASK_HAS_DEPENDANTS");

  // The resources: the policy, and the inbox that takes the implementer's mail.
  const resources = await impl.listResources();
  summary.resources = resources.resources.map((r) => r.uri);
  const templates = await impl.listResourceTemplates();
  assert.deepEqual(templates.resourceTemplates.map((t) => t.uriTemplate), ["steerboard://inbox{?after_seq,limit}"]);
  const policy = await impl.readResource({ uri: "steerboard://policy" });
  assert.match(policy.contents[0].text, /never resend/);
  const inbox = JSON.parse((await impl.readResource({ uri: "steerboard://inbox?after_seq=0&limit=10" })).contents[0].text);
  assert.deepEqual(inbox.messages.map((m) => m.content), ["Start on task-1."]);
  assert.equal(inbox.next_cursor, null);
  summary.inbox = inbox.messages.map((m) => m.id);
} finally {
  await lead.close();
  await impl.close();
}

// A bad token: a plain 401 with the server's answer; the SDK starts no OAuth flow without an auth provider.
try {
  await connect("sbm_not-a-token");
  assert.fail("a bad token connected");
} catch (error) {
  assert.equal(error.code, 401, String(error));
  assert.match(error.message, /UNAUTHENTICATED/);
  summary.unauthorized = error.message;
}

console.log(JSON.stringify(summary));
