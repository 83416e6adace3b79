// The page's Trace view: the current tree as a waterfall (GET /v1/runs/{id}/trace, built from
// the stored events), fetched again as the tree's events arrive (app.js announces each one with
// an `otherone:event` DOM event) and redrawn every second while bars are open, so they grow.
// Clicking a model or tool bar shows its request and response (its `detail` path). It runs
// after app.js (both `defer`) and uses its `api`, `$` and `state`.
"use strict";

const TRACE_FETCH_DELAY_MS = 300;
const TRACE_TICK_MS = 1000;
const trace = { root: null, data: null, fetchedAt: 0, timer: null, selected: null };

function refreshTraceSoon() {
  clearTimeout(trace.timer);
  trace.timer = setTimeout(refreshTrace, TRACE_FETCH_DELAY_MS);
}

async function refreshTrace() {
  const root = state.root;
  if (!root) {
    trace.root = null;
    trace.data = null;
    return renderTrace();
  }
  try {
    const answer = await api(`/v1/runs/${root}/trace`);
    if (state.root !== root) return; // the page moved on to another run meanwhile
    Object.assign(trace, { root, data: answer, fetchedAt: Date.now() });
    $("#trace-note").textContent = "";
    renderTrace();
  } catch (error) {
    if (state.root === root) $("#trace-note").textContent = `trace: ${error.message}`;
  }
}

// Server time now: the trace's `now` plus what passed here since it came (no clock skew).
function traceNow() {
  return Date.parse(trace.data.now) + (Date.now() - trace.fetchedAt);
}

function renderTrace() {
  const box = $("#trace-bars");
  box.replaceChildren();
  const data = trace.data;
  if (!data || !data.bars.length) {
    const none = document.createElement("p");
    none.className = "muted none";
    none.textContent = state.root ? "no events yet" : "no run";
    box.append(none);
    return;
  }
  const start = Date.parse(data.start);
  const end = data.end ? Date.parse(data.end) : traceNow();
  const span = Math.max(end - start, 1);
  $("#trace-span").textContent = `${((end - start) / 1000).toFixed(1)} s · ${data.events} events`;
  for (const bar of data.bars) box.append(traceRow(bar, start, span));
}

function traceRow(bar, start, span) {
  const row = document.createElement("div");
  row.className = `trace-row kind-${bar.kind} status-${bar.status.replace(/[^a-z_]/g, "_")}`;
  row.dataset.barId = bar.id;
  row.dataset.kind = bar.kind;
  if (bar.retried) row.classList.add("retried");
  if (bar.superseded) row.classList.add("superseded");
  if (!bar.end) row.classList.add("open");
  const label = document.createElement("span");
  label.className = "trace-label";
  label.style.paddingLeft = `${bar.depth * 0.9}rem`;
  label.textContent = bar.name + (bar.attempt && (bar.attempt > 1 || bar.retried) ? ` #${bar.attempt}` : "");
  label.title = bar.error ? `${bar.name}: ${bar.error}` : bar.name;
  const track = document.createElement("span");
  track.className = "trace-track";
  const shape = document.createElement("span");
  shape.className = "trace-bar";
  const from = bar.start ? Date.parse(bar.start) : start;
  const to = bar.end ? Date.parse(bar.end) : traceNow();
  shape.style.left = `${Math.min(((from - start) / span) * 100, 99.5)}%`;
  shape.style.width = `${Math.max(((to - from) / span) * 100, 0.5)}%`;
  track.append(shape);
  const facts = document.createElement("span");
  facts.className = "trace-facts";
  const seconds = ((to - from) / 1000).toFixed(2);
  const tokens = bar.total_tokens != null ? ` · ${bar.total_tokens} tok` : "";
  const cost = bar.cost ? ` · $${bar.cost}` : "";
  const marks = bar.superseded ? "superseded" : bar.retried ? "retried" : bar.status.replace(/_/g, " ");
  facts.textContent = `${seconds} s${tokens}${cost} · ${marks}`;
  row.append(label, track, facts);
  if (bar.detail) {
    row.classList.add("has-detail");
    row.tabIndex = 0;
    row.addEventListener("click", () => showCallDetail(bar));
    row.addEventListener("keydown", (event) => { if (event.key === "Enter") showCallDetail(bar); });
  }
  if (trace.selected === bar.id) row.classList.add("selected");
  return row;
}

async function showCallDetail(bar) {
  trace.selected = bar.id;
  document.querySelectorAll(".trace-row.selected").forEach((row) => row.classList.remove("selected"));
  const row = document.querySelector(`.trace-row[data-bar-id="${CSS.escape(bar.id)}"]`);
  if (row) row.classList.add("selected");
  const pane = $("#trace-detail");
  pane.hidden = false;
  pane.replaceChildren(detailHeading(`${bar.name} · ${bar.agent_id}`));
  try {
    const detail = await api(bar.detail);
    if (trace.selected !== bar.id) return;
    pane.append(...(bar.kind === "model" ? modelDetail(detail) : toolDetail(detail)));
  } catch (error) {
    pane.append(detailText("error", error.message));
  }
}

function detailHeading(text) {
  const heading = document.createElement("h3");
  heading.textContent = text;
  return heading;
}

function detailText(role, text, className = "") {
  const block = document.createElement("div");
  block.className = `detail-msg role-${role} ${className}`.trim();
  const who = document.createElement("span");
  who.className = "detail-role";
  who.textContent = role;
  const body = document.createElement("pre");
  body.textContent = text;
  block.append(who, body);
  return block;
}

function messageBlock(message, className) {
  let text = message.content || "";
  for (const call of message.tool_calls || []) {
    const fn = call.function || call;
    text += `${text ? "\n" : ""}→ ${fn.name}(${fn.arguments || ""})`;
  }
  const role = message.tool_name ? `${message.role} (${message.tool_name})` : message.role;
  return detailText(role, text, className);
}

function modelDetail(detail) {
  const parts = [detailHeading(`Request (${detail.request.length} messages)`)];
  if (detail.earlier_messages) parts.push(detailText("…", `${detail.earlier_messages} earlier messages`));
  for (const message of detail.request) parts.push(messageBlock(message, "request"));
  parts.push(detailHeading("Response"));
  if (detail.response) parts.push(messageBlock(detail.response, "response"));
  else if (detail.streamed_text != null) parts.push(detailText("streamed (not kept)", detail.streamed_text, "response"));
  else parts.push(detailText("—", "no answer stored (yet)", "response"));
  if (detail.usage) parts.push(detailText("usage", JSON.stringify(detail.usage)));
  return parts;
}

function toolDetail(detail) {
  return [
    detailHeading("Arguments"),
    detailText(detail.tool_name || "tool", detail.arguments || "", "arguments"),
    detailHeading(detail.error_kind ? `Result (error: ${detail.error_kind})` : "Result"),
    detailText("result", detail.result == null ? "no result (yet)" : detail.result, "result"),
  ];
}

// Streamed text changes no bar (an open bar grows with the tick below): a tree that streams
// does not re-read its trace for every delta.
const TRACE_QUIET_EVENTS = new Set(["model_delta", "thinking_delta", "tool_progress"]);
document.addEventListener("otherone:event", (event) => {
  if (!TRACE_QUIET_EVENTS.has(event.detail.event.type)) refreshTraceSoon();
});
setInterval(() => {
  if (state.root !== trace.root) {
    trace.selected = null;
    $("#trace-detail").hidden = true;
    refreshTrace();
  } else if (trace.data && !trace.data.end) {
    renderTrace(); // open bars grow with the time
  }
}, TRACE_TICK_MS);
