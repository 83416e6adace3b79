// The page's schedules panel: list the partition's schedules (GET /v1/schedules), create one,
// pause, resume, fire now and delete. It runs after app.js (both `defer`) and uses its `api`,
// `$` and `showError`. Temporal's list is eventually consistent, so after a change the panel
// shows the answer of that change at once and lists again a moment later.
"use strict";

const SCHEDULE_REFRESH_MS = 1500;
// "90s", "15m", "2h", "1d" (or a plain number of seconds) -> seconds, as the API's `every` takes.
const EVERY_UNITS = { s: 1, m: 60, h: 3600, d: 86400 };

function everySeconds(text) {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$/i.exec(text);
  if (!match) throw new Error(`every: not a duration like 90s, 15m, 2h or 1d: ${JSON.stringify(text)}`);
  return Number(match[1]) * EVERY_UNITS[(match[2] || "s").toLowerCase()];
}

function describeTiming(schedule) {
  if (schedule.cron.length) return `cron ${schedule.cron.join(" | ")}`;
  return `every ${schedule.every}`; // ISO 8601 as the API gives it, e.g. PT1H
}

function scheduleButton(label, action) {
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = label;
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await action();
      showError(null);
    } catch (error) {
      showError(error);
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

function scheduleItem(schedule) {
  const item = document.createElement("li");
  item.className = "schedule";
  item.dataset.name = schedule.name;
  const title = document.createElement("div");
  const name = document.createElement("strong");
  name.textContent = schedule.name;
  const state = document.createElement("span");
  state.className = schedule.paused ? "paused" : "active";
  state.textContent = schedule.paused ? " paused" : " active";
  title.append(name, ` → ${schedule.entry_agent}`, state);
  const when = document.createElement("div");
  when.className = "muted";
  const next = schedule.next_runs.length ? new Date(schedule.next_runs[0]).toLocaleString() : "none";
  when.textContent = `${describeTiming(schedule)}; next: ${schedule.paused ? "(paused)" : next}`;
  const path = `/v1/schedules/${encodeURIComponent(schedule.name)}`;
  const buttons = document.createElement("div");
  buttons.className = "row";
  buttons.append(
    schedule.paused
      ? scheduleButton("Resume", () => changeSchedule(schedule.name, `${path}/unpause`, "POST"))
      : scheduleButton("Pause", () => changeSchedule(schedule.name, `${path}/pause`, "POST")),
    scheduleButton("Run now", () => changeSchedule(schedule.name, `${path}/trigger`, "POST")),
    scheduleButton("Delete", async () => {
      if (!window.confirm(`Delete schedule ${schedule.name}? Runs it started go on.`)) return;
      await changeSchedule(schedule.name, path, "DELETE");
    }),
  );
  item.append(title, when, buttons);
  if (schedule.note) {
    const noteLine = document.createElement("div");
    noteLine.className = "muted";
    noteLine.textContent = schedule.note;
    item.append(noteLine);
  }
  return item;
}

function renderSchedules(schedules) {
  const list = $("#schedule-list");
  if (!schedules.length) {
    const none = document.createElement("li");
    none.className = "muted none";
    none.textContent = "no schedules";
    list.replaceChildren(none);
    return;
  }
  list.replaceChildren(...schedules.map(scheduleItem));
}

// The latest known state of each schedule: a change's own answer wins over a list that may
// not have caught up with it yet.
const scheduleOverrides = new Map();

async function refreshSchedules() {
  const listed = await api("/v1/schedules");
  const byName = new Map(listed.map((schedule) => [schedule.name, schedule]));
  for (const [name, known] of scheduleOverrides) {
    if (known === null) byName.delete(name);
    else byName.set(name, known);
  }
  renderSchedules([...byName.values()].sort((a, b) => a.name.localeCompare(b.name)));
}

async function changeSchedule(name, path, method, body) {
  const options = { method };
  if (body !== undefined) options.body = JSON.stringify(body);
  const answer = await api(path, options);
  scheduleOverrides.set(name, method === "DELETE" ? null : answer);
  await refreshSchedules();
  // Once the list has caught up, it is the truth again (a change from elsewhere shows too).
  setTimeout(() => {
    scheduleOverrides.delete(name);
    refreshSchedules().catch(showError);
  }, SCHEDULE_REFRESH_MS);
}

function newScheduleBody() {
  const name = $("#schedule-name").value.trim();
  const message = $("#schedule-message").value.trim();
  const timing = $("#schedule-timing").value.trim();
  if (!name) throw new Error("name: give the schedule a name");
  if (!message) throw new Error("message: what each firing asks the agent");
  if (!timing) throw new Error("when: a cron expression (e.g. 0 9 * * 1-5) or an interval (e.g. 1h)");
  const request = { entry_agent: $("#agent").value, input: message };
  if ($("#schedule-session").checked) request.session = { session_id: newId("schedule") };
  const body = { name, request };
  if ($("#schedule-kind").value === "cron") body.cron = [timing];
  else body.every = everySeconds(timing);
  return body;
}

function setUpSchedules() {
  const panel = $("#schedules");
  panel.addEventListener("toggle", () => {
    if (panel.open) refreshSchedules().catch(showError);
  });
  $("#schedule-refresh").addEventListener("click", () => refreshSchedules().catch(showError));
  $("#schedule-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const submit = $("#schedule-create");
    submit.disabled = true;
    try {
      const body = newScheduleBody();
      await changeSchedule(body.name, "/v1/schedules", "POST", body);
      $("#schedule-form").reset();
      showError(null);
    } catch (error) {
      showError(error);
    } finally {
      submit.disabled = false;
    }
  });
}

setUpSchedules();
