// The Otherone page: pick an agent, chat, watch the run tree live. Plain JavaScript, no build.
// Events are read with fetch() (not EventSource) so the bearer token travels in a header; the
// stream resumes after a network error with Last-Event-ID, so nothing is missed.
"use strict";

const $ = (selector) => document.querySelector(selector);
const TERMINAL = new Set(["run_completed", "run_failed", "run_cancelled"]);
// Finish reasons of an answer the model ended itself (anything else: it was cut or filtered).
const NORMAL_FINISH = new Set(["stop", "end_turn", "stop_sequence", "tool_calls", "tool_use", "function_call"]);
const ACTIVE = new Set(["pending", "running", "waiting_for_child", "waiting_for_approval", "sleeping"]);
// Events after which a run's record (status, usage) may read differently. The tree's numbers
// come from the records alone: a record already counts a call the model made before its
// events arrive, so adding events to it would count some calls twice.
const TREE_CHANGES = new Set(["run_started", "model_completed", "tool_started", "tool_denied",
  "agent_call_started", "agent_call_completed", "run_completed", "run_failed", "run_cancelled",
  "sleep_started", "sleep_ended"]);

const state = {
  info: null,
  token: sessionStorage.getItem("otherone-token") || "",
  sessionId: null,
  root: null, // root run id of the current run
  running: false,
  cursor: 0, // last event sequence seen
  runs: new Map(), // run id -> {agent, depth, parent, status, model, tools, agents, tokens, cost, live}
  // (model, tools, agents and tokens as the run's record says: `refreshTree`)
  bubbles: new Map(), // "turn.attempt" of the root -> assistant message element
  stream: null, // AbortController of the event stream
};

function newId(prefix) {
  const random = crypto.randomUUID ? crypto.randomUUID()
    : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
  return `${prefix}-${random}`;
}

async function api(path, options = {}) {
  const headers = Object.assign({ "Content-Type": "application/json" }, options.headers || {});
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    let code = null;
    try {
      const problem = await response.json();
      detail = `${problem.code}: ${problem.detail}`;
      code = problem.code;
    } catch (_) { /* not a problem document */ }
    const error = new Error(detail);
    error.code = code;
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

function showError(error) {
  const box = $("#error");
  box.textContent = error ? String(error.message || error) : "";
  box.hidden = !error;
}

function addMessage(role, text) {
  const element = document.createElement("div");
  element.className = `msg ${role}`;
  element.textContent = text;
  $("#transcript").append(element);
  element.scrollIntoView({ block: "end" });
  return element;
}

function note(text) {
  const item = document.createElement("li");
  item.textContent = text;
  $("#activity").append(item);
  item.scrollIntoView({ block: "end" });
}

function uiLink(runId) {
  if (!state.info || !state.info.ui_url) return null;
  return `${state.info.ui_url}/namespaces/${encodeURIComponent(state.info.namespace)}/workflows/${encodeURIComponent(runId)}`;
}

// ------------------------------------------------------------------ the run tree

function run(runId) {
  if (!state.runs.has(runId)) {
    state.runs.set(runId, { agent: "", depth: 0, parent: null, status: "running", model: 0,
      tools: 0, agents: 0, tokens: 0, cost: "", live: "" });
  }
  return state.runs.get(runId);
}

function orderedRuns() {
  const children = new Map();
  for (const [id, info] of state.runs) {
    const key = info.parent || "";
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(id);
  }
  const ordered = [];
  const visit = (id) => {
    ordered.push(id);
    for (const child of children.get(id) || []) visit(child);
  };
  if (state.root) visit(state.root);
  for (const id of state.runs.keys()) if (!ordered.includes(id)) ordered.push(id);
  return ordered;
}

// ------------------------------------------------------------------ approvals

let approvalsTimer = null;
function refreshApprovalsSoon() {
  clearTimeout(approvalsTimer);
  approvalsTimer = setTimeout(refreshApprovals, 200);
}

async function refreshApprovals() {
  if (!state.root) return;
  try {
    renderApprovals(await api(`/v1/runs/${state.root}/approvals`));
  } catch (error) {
    note(`approvals: ${error.message}`);
  }
}

function button(label, className, onClick) {
  const element = document.createElement("button");
  element.type = "button";
  element.textContent = label;
  element.className = className;
  element.addEventListener("click", onClick);
  return element;
}

function renderApprovals(requests) {
  const list = $("#approvals");
  list.replaceChildren();
  if (!requests.length) {
    const none = document.createElement("li");
    none.className = "muted none";
    none.textContent = "nothing";
    list.append(none);
    return;
  }
  for (const request of requests) {
    const item = document.createElement("li");
    item.className = "approval";
    item.dataset.callId = request.call_id;
    const what = document.createElement("div");
    what.className = "call";
    what.textContent = request.kind === "question"
      ? `${request.agent_id} asks: ${request.question}`
      : `${request.agent_id}: ${request.tool_name}(${request.arguments})`;
    const input = document.createElement("input");
    input.placeholder = request.kind === "question" ? "your answer" : "reason to deny";
    const row = document.createElement("div");
    row.className = "row";
    const decide = (body) => async () => {
      // Said before it is sent: the run's `approval_decided` event may arrive on the stream
      // before the answer to the request does, and it comes of this decision.
      note(`${body.decision}: ${request.tool_name}`);
      try {
        await api(`/v1/runs/${request.run_id}/approvals/${encodeURIComponent(request.call_id)}`, {
          method: "POST", body: JSON.stringify(body),
        });
      } catch (error) {
        note(`not decided: ${request.tool_name}`);
        showError(error);
      }
      refreshApprovals();
    };
    if (request.kind === "question") {
      row.append(input, button("Answer", "answer", () => decide({ decision: "answer", text: input.value })()));
    } else {
      row.append(
        button("Approve", "approve", decide({ decision: "approve" })),
        input,
        button("Deny", "deny", () => decide({ decision: "deny", reason: input.value || "denied from the page" })()),
      );
    }
    item.append(what, row);
    list.append(item);
  }
}

function renderTree() {
  const body = $("#tree tbody");
  body.replaceChildren();
  for (const id of orderedRuns()) {
    const info = state.runs.get(id);
    const row = document.createElement("tr");
    row.dataset.runId = id;
    const agent = document.createElement("td");
    agent.className = "agent";
    agent.style.paddingLeft = `${0.3 + info.depth * 1.2}rem`;
    agent.textContent = info.agent || id;
    if (info.live) {
      const live = document.createElement("span");
      live.className = "live";
      live.textContent = info.live.slice(-160);
      agent.append(live);
    }
    const status = document.createElement("td");
    status.className = `status status-${info.status}`;
    status.textContent = info.status;
    row.append(agent, status);
    // The cost comes as an exact decimal string (US dollars), shown as it is.
    const cost = info.cost ? `$${info.cost}` : "–";
    for (const value of [info.model, info.tools, info.agents, info.tokens, cost]) {
      const cell = document.createElement("td");
      cell.textContent = String(value);
      row.append(cell);
    }
    const link = document.createElement("td");
    const url = uiLink(id);
    if (url) {
      const anchor = document.createElement("a");
      anchor.href = url;
      anchor.target = "_blank";
      anchor.rel = "noopener";
      anchor.textContent = "Web UI";
      anchor.className = "ui-link";
      link.append(anchor);
    }
    row.append(link);
    body.append(row);
  }
}

let treeTimer = null;
function refreshTreeSoon() {
  clearTimeout(treeTimer);
  treeTimer = setTimeout(refreshTree, 300);
}

async function refreshTree() {
  const root = state.root;
  if (!root) return;
  try {
    const records = await api(`/v1/runs/${root}/tree`);
    // The page may have moved on to another run while this answer travelled: a late answer
    // for the previous tree must not put its runs back into the new one's.
    if (state.root !== root) return;
    for (const record of records) {
      const info = run(record.run_id);
      info.agent = record.agent_id;
      info.depth = record.depth;
      info.parent = record.parent_run_id;
      info.status = record.status;
      info.model = record.usage.model_calls;
      info.tools = record.usage.tool_calls;
      info.agents = record.usage.agent_calls;
      info.tokens = record.usage.total_tokens || 0;
      info.cost = record.usage.cost || "";
    }
    renderTree();
  } catch (error) {
    if (state.root === root) note(`tree: ${error.message}`);
  }
}

// ------------------------------------------------------------------ events

function apply(envelope) {
  const event = envelope.event;
  state.lastProgress = Date.now();
  if (state.noWorker) {
    state.noWorker = false;
    $("#worker-warning").hidden = true;
  }
  const info = run(envelope.run_id);
  info.agent = envelope.agent_id;
  info.depth = envelope.depth;
  info.parent = envelope.parent_run_id;
  const isRoot = envelope.run_id === state.root;
  const turnKey = `${event.turn}.${event.attempt}`;
  switch (event.type) {
    case "run_started":
      info.status = "running";
      if (!isRoot) note(`${envelope.agent_id} started`);
      break;
    case "model_started":
      info.live = "";
      if (isRoot) {
        if (event.supersedes_attempt) {
          const old = state.bubbles.get(`${event.turn}.${event.supersedes_attempt}`);
          if (old) old.remove();
        }
        state.bubbles.set(turnKey, null);
      }
      break;
    case "model_delta":
      if (isRoot) {
        let bubble = state.bubbles.get(turnKey);
        if (!bubble) {
          bubble = addMessage("assistant streaming", "");
          state.bubbles.set(turnKey, bubble);
        }
        bubble.textContent += event.content;
        bubble.scrollIntoView({ block: "end" });
      } else {
        info.live += event.content;
      }
      break;
    case "model_completed": {
      const bubble = isRoot && state.bubbles.get(turnKey);
      if (bubble) bubble.classList.remove("streaming");
      if (isRoot && event.finish_reason && !NORMAL_FINISH.has(event.finish_reason)) {
        addMessage("system", event.finish_reason === "length"
          ? "the answer was cut at the model's max_tokens"
          : `the model ended its answer: ${event.finish_reason}`);
      }
      break;
    }
    case "tool_started":
      note(`${envelope.agent_id}: ${event.tool_name}(${event.arguments || ""})`);
      break;
    case "tool_completed":
      if (event.error) note(`${envelope.agent_id}: ${event.tool_name} failed: ${event.error}`);
      // The start of what it returned (one line, at most 200 characters; older workers: none).
      else if (event.result !== undefined) note(`${envelope.agent_id}: ${event.tool_name} → ${event.result}`);
      break;
    case "tool_denied": // never started: a person denied it, or nobody decided in time
      note(`${envelope.agent_id}: ${event.tool_name} ${event.decision === "timed_out"
        ? "not decided in time" : "denied"}: nothing was executed`);
      break;
    case "agent_call_started":
      note(`${envelope.agent_id} → ${event.target}`);
      break;
    case "agent_call_completed":
      note(`${event.target} → ${envelope.agent_id}: ${event.outcome}`);
      break;
    case "mcp_unavailable": { // its agent lacks the tools of a server it was granted
      const text = `MCP server '${event.server}' offered no tools: ${event.reason}`;
      note(`${envelope.agent_id}: ${text}`);
      if (isRoot) addMessage("system", text);
      break;
    }
    case "guardrail_tripped": // what stopped the run (or refused a tool call), and why
    case "guardrail_failed": {
      const where = `${event.kind} guardrail '${event.guardrail}'${event.tool ? ` on ${event.tool}` : ""}`;
      const text = event.type === "guardrail_tripped"
        ? `${where} tripped: ${event.reason}` : `${where} failed: ${event.error}`;
      note(`${envelope.agent_id}: ${text}`);
      if (isRoot) addMessage("system", text);
      break;
    }
    case "hook_refused":
    case "hook_failed": {
      const text = event.type === "hook_refused"
        ? `hook '${event.hook}' (${event.stage}) refused: ${event.reason}`
        : `hook failed (${event.stage}): ${event.error}`;
      note(`${envelope.agent_id}: ${text}`);
      if (isRoot) addMessage("system", text);
      break;
    }
    case "model_waiting": // no fleet permit yet: the run waits in its workflow
    case "tool_waiting":
      note(`${envelope.agent_id}: ${event.type === "model_waiting" ? "model call"
        : event.tool_name} waits for capacity (${event.scope}: ${event.reason})`);
      break;
    case "sleep_started": // the run waits on a timer; a message wakes it
      info.status = "sleeping";
      note(`${envelope.agent_id} sleeps until ${event.until}`);
      break;
    case "sleep_ended":
      if (info.status === "sleeping") info.status = "running";
      note(`${envelope.agent_id} woke (${event.reason})`);
      break;
    case "user_message_queued":
      note(`${event.count} message(s) taken`);
      break;
    case "run_completed":
    case "run_cancelled":
    case "run_failed":
      info.status = event.type === "run_completed" ? "completed"
        : event.type === "run_cancelled" ? "cancelled" : (event.status || "failed");
      info.live = "";
      if (!isRoot) note(`${envelope.agent_id} ${info.status}`);
      break;
    default:
      break;
  }
  if (TREE_CHANGES.has(event.type)) refreshTreeSoon();
  if (event.type === "approval_requested" || event.type === "approval_decided") {
    note(event.type === "approval_requested"
      ? `${envelope.agent_id} waits for you: ${event.tool_name}` : `decided: ${event.tool_name}`);
    refreshApprovalsSoon();
    refreshTreeSoon();
  }
  renderTree();
  if (isRoot && TERMINAL.has(event.type)) finishRun(info.status, event);
  // For the other panels (trace.js): the tree changed.
  document.dispatchEvent(new CustomEvent("otherone:event", { detail: envelope }));
}

function finishRun(status, event) {
  state.running = false;
  $("#cancel").disabled = true;
  $("#run-status").textContent = `run ${status}`;
  document.querySelectorAll(".msg.streaming").forEach((bubble) => bubble.classList.remove("streaming"));
  if (event.failure && event.failure.message) addMessage("system", `${status}: ${event.failure.message}`);
  else if (status !== "completed") addMessage("system", `run ${status}`);
  refreshTree();
  renderApprovals([]);
  refreshTurns();
}

// The turns of the current root run (its session's conversation up to it), each with a
// "Fork from here" button: a new run in a new session sharing the turns before it
// (POST /v1/runs/{id}/fork), which the page then follows instead.
async function refreshTurns() {
  const root = state.root;
  if (!root) return renderTurns(null, []);
  try {
    renderTurns(root, await api(`/v1/runs/${root}/turns`));
  } catch (error) {
    renderTurns(root, []); // not stored yet, or no store: nothing to fork from
  }
}

function renderTurns(root, turns) {
  const list = $("#turns");
  list.replaceChildren();
  if (!turns.length) {
    const none = document.createElement("li");
    none.className = "muted none";
    none.textContent = root ? "none stored" : "no run";
    list.append(none);
    return;
  }
  for (const turn of turns) {
    const item = document.createElement("li");
    item.className = "turn";
    item.value = turn.number;
    item.dataset.turn = String(turn.number);
    const message = document.createElement("span");
    message.className = "message";
    message.textContent = turn.message.length > 160 ? `${turn.message.slice(0, 160)}…` : turn.message;
    item.append(message, button("Fork from here", "fork", () => forkAt(root, turn)));
    list.append(item);
  }
}

async function forkAt(root, turn) {
  showError(null);
  let forked;
  try {
    forked = await api(`/v1/runs/${root}/fork`, {
      method: "POST", body: JSON.stringify({ at_turn: turn.number }),
    });
  } catch (error) {
    return showError(error);
  }
  const agent = (state.runs.get(root) || {}).agent || $("#agent").value;
  if (state.stream) state.stream.abort();
  state.sessionId = forked.session_id;
  $("#transcript").replaceChildren();
  $("#activity").replaceChildren();
  addMessage("system", `fork of ${root} at turn ${turn.number} (the turns before it are shared)`);
  note(`forked ${root} at turn ${turn.number}: run ${forked.run_id}`);
  followNew(forked.run_id, agent, uiLink(forked.run_id), turn.message);
}

// Server-Sent Events over fetch: frames are separated by a blank line.
async function follow(root) {
  const controller = new AbortController();
  state.stream = controller;
  let failures = 0;
  while (state.root === root && state.running && !controller.signal.aborted) {
    try {
      const headers = { Accept: "text/event-stream" };
      if (state.token) headers.Authorization = `Bearer ${state.token}`;
      if (state.cursor) headers["Last-Event-ID"] = String(state.cursor);
      const response = await fetch(`/v1/runs/${root}/events`, { headers, signal: controller.signal });
      if (response.status === 204) break;
      if (!response.ok) throw new Error(`events: ${response.status}`);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          handleFrame(frame);
        }
      }
      failures = 0;
    } catch (error) {
      if (controller.signal.aborted) return;
      failures += 1;
      note(`stream interrupted (${error.message}); resuming after event ${state.cursor}`);
      await new Promise((resolve) => setTimeout(resolve, Math.min(5000, 250 * 2 ** failures)));
    }
  }
}

function handleFrame(frame) {
  let data = "";
  for (const line of frame.split("\n")) {
    if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (!data) return; // a heartbeat comment
  const envelope = JSON.parse(data);
  if (envelope.sequence <= state.cursor) return;
  state.cursor = envelope.sequence;
  apply(envelope);
}

// A run that shows no progress for a while may have no worker to take it (none started, or
// all stopped): Temporal knows who polls the task queue. Said on the page, cleared by the next
// event. A run waiting for a person or a slow tool is not flagged while a worker polls.
const QUIET_MS = 15000;

async function checkWorkers() {
  if (!state.running || Date.now() - (state.lastProgress || 0) < QUIET_MS) return;
  try {
    const workers = await api("/v1/workers");
    const none = workers.live_workflow_pollers === 0 || workers.live_activity_pollers === 0;
    state.noWorker = none;
    const warning = $("#worker-warning");
    warning.textContent = none
      ? `No worker is taking task queue "${workers.task_queue}": the run waits until one starts (otherone worker).`
      : "";
    warning.hidden = !none;
  } catch (error) {
    // Temporal unreachable, or no token yet: the stream's own errors say so.
  }
}

// ------------------------------------------------------------------ actions

function startFresh() {
  if (state.stream) state.stream.abort();
  Object.assign(state, { sessionId: newId("web"), root: null, running: false, cursor: 0 });
  state.runs.clear();
  state.bubbles.clear();
  $("#transcript").replaceChildren();
  $("#activity").replaceChildren();
  $("#run-link").replaceChildren();
  $("#run-status").textContent = "no run";
  $("#cancel").disabled = true;
  renderApprovals([]);
  renderTree();
  renderTurns(null, []);
  remember();
}

// The tab's conversation (session, current run, agent) survives a reload: the page follows
// the run again (its events replayed), so it can still be watched, approved and cancelled.
const SAVED = "otherone-page";

function remember() {
  const saved = { sessionId: state.sessionId, root: state.root, agent: $("#agent").value };
  sessionStorage.setItem(SAVED, JSON.stringify(saved));
}

function saved() {
  try {
    return JSON.parse(sessionStorage.getItem(SAVED) || "null");
  } catch (error) {
    return null;
  }
}

function showUiLink(url) {
  const link = $("#run-link");
  link.replaceChildren();
  if (!url) return;
  const anchor = document.createElement("a");
  anchor.href = url;
  anchor.target = "_blank";
  anchor.rel = "noopener";
  anchor.textContent = "open the run in the Temporal Web UI";
  link.append(anchor);
}

async function resume(previous) {
  if (!previous || !previous.sessionId) return;
  state.sessionId = previous.sessionId;
  if (previous.agent && [...$("#agent").options].some((option) => option.value === previous.agent)) {
    $("#agent").value = previous.agent;
    $("#agent").onchange();
  }
  if (!previous.root) return remember();
  let record = null;
  try {
    record = await api(`/v1/runs/${previous.root}`);
  } catch (error) {
    // Gone (retention) or not this token's: the conversation goes on without it. Any other
    // answer (no worker to ask, Temporal away) says nothing of the run: follow it anyway.
    if (error.code === "run_not_found") return remember();
  }
  Object.assign(state, { root: previous.root, running: true, cursor: 0, lastProgress: Date.now() });
  const status = record ? record.status : "running";
  if (record) run(previous.root).agent = record.agent_id;
  $("#cancel").disabled = !ACTIVE.has(status);
  $("#run-status").textContent = `run ${previous.root} ${status}`;
  showUiLink(uiLink(previous.root));
  note(`page reloaded: following run ${previous.root} again (earlier messages are in the session)`);
  remember();
  renderTree();
  refreshTree();
  refreshApprovals();
  refreshTurns();
  follow(previous.root);
}

async function send(text) {
  showError(null);
  if (state.running) {
    try {
      await api(`/v1/runs/${state.root}/messages`, { method: "POST", body: JSON.stringify({ messages: [text] }) });
      addMessage("user", text);
      return;
    } catch (error) {
      if (error.code !== "run_not_active") throw error;
      state.running = false; // it ended meanwhile: the message starts the next run instead
    }
  }
  const body = { entry_agent: $("#agent").value, input: text, session: { session_id: state.sessionId } };
  const started = await api("/v1/runs", {
    method: "POST", body: JSON.stringify(body), headers: { "Idempotency-Key": newId("page") },
  });
  if (state.stream) state.stream.abort();
  followNew(started.run_id, body.entry_agent, started.ui_url, text);
}

// Show ``text`` as the user's and follow the new root run ``runId`` of ``agent``.
function followNew(runId, agent, uiUrl, text) {
  addMessage("user", text);
  Object.assign(state, { root: runId, running: true, cursor: 0, lastProgress: Date.now() });
  state.runs.clear();
  state.bubbles.clear();
  run(runId).agent = agent;
  $("#cancel").disabled = false;
  $("#run-status").textContent = `run ${runId} running`;
  showUiLink(uiUrl);
  remember();
  renderTree();
  renderTurns(runId, []);
  follow(runId);
}

async function loadAgents() {
  const agents = await api("/v1/agents");
  const select = $("#agent");
  select.replaceChildren();
  for (const agent of agents) {
    const option = document.createElement("option");
    option.value = agent.id;
    option.textContent = agent.callable_agents.length ? `${agent.id} (team)` : agent.id;
    option.dataset.description = agent.description;
    select.append(option);
  }
  const describe = () => {
    const chosen = select.selectedOptions[0];
    $("#agent-description").textContent = chosen ? chosen.dataset.description : "";
  };
  select.onchange = describe;
  describe();
}

async function connect() {
  try {
    const me = await api("/v1/whoami");
    $("#whoami").textContent = me.partition_key ? `partition ${me.partition_key}` : "";
    await loadAgents();
    showError(null);
  } catch (error) {
    showError(error);
  }
}

async function main() {
  state.info = await api("/v1/info");
  const tokenField = $("#token-field");
  tokenField.hidden = !state.info.auth_required;
  $("#token").value = state.token;
  $("#token").addEventListener("change", (event) => {
    state.token = event.target.value.trim();
    sessionStorage.setItem("otherone-token", state.token);
    connect();
  });
  $("#composer").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("#message").value.trim();
    if (!text) return;
    $("#send").disabled = true;
    try {
      await send(text);
      $("#message").value = "";
    } catch (error) {
      showError(error);
    } finally {
      $("#send").disabled = false;
    }
  });
  $("#message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("#composer").requestSubmit();
    }
  });
  $("#cancel").addEventListener("click", async () => {
    try {
      await api(`/v1/runs/${state.root}/cancel`, { method: "POST" });
      $("#run-status").textContent = "cancelling…";
    } catch (error) {
      showError(error);
    }
  });
  $("#new-chat").addEventListener("click", startFresh);
  setInterval(checkWorkers, 5000);
  const previous = saved();
  startFresh();
  if (!state.info.auth_required || state.token) {
    await connect();
    await resume(previous);
  }
}

main().catch(showError);
