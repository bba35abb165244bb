(function () {
  "use strict";
  const main = document.querySelector("main[data-events]");
  if (!main) return;
  const connection = document.getElementById("connection");
  const seen = new Set();
  let offset = 0; // server clock minus this browser's, seconds
  let live = JSON.parse(document.getElementById("initial-live").textContent);
  const text = (value) => (value === null || value === undefined ? "" : String(value));
  const now = () => Date.now() / 1000 + offset;
  const seconds = (s) => (s < 60 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s");

  function cell(row, value, cls) {
    const td = row.insertCell();
    td.textContent = text(value);
    if (cls) td.className = cls;
    return td;
  }

  function showChart(progress) {
    const names = new Set(progress ? progress.active.map((step) => step.name) : []);
    document.querySelectorAll("svg.sfc g.step, svg.sfc g.branch").forEach((g) => {
      const name = g.getAttribute("data-step") ?? g.getAttribute("data-branch");
      g.classList.toggle("active", names.has(name));
    });
  }

  function showState(state) {
    const el = document.getElementById("state");
    el.textContent = text(state);
    el.className = "state " + text(state).split(".")[0];
  }

  function showActive(progress) {
    const body = document.querySelector("#active tbody");
    body.replaceChildren();
    for (const step of progress ? progress.active : []) {
      const row = body.insertRow();
      row.dataset.step = step.name;
      cell(row, step.name + (step.branch ? " (branch)" : ""));
      cell(row, "", "num since").dataset.since = step.entered_at;
    }
  }

  function showActions(progress) {
    const body = document.querySelector("#actions tbody");
    body.replaceChildren();
    for (const action of progress ? progress.actions : []) {
      const row = body.insertRow();
      row.dataset.action = action.name;
      cell(row, action.name);
      cell(row, action.step);
      cell(row, action.phase, "phase-" + action.phase);
      cell(row, action.tries + " / " + action.max_attempts, "num");
      const timeout = cell(row, action.deadline ? "" : "–", "num");
      if (action.deadline) timeout.dataset.deadline = action.deadline;
      cell(row, action.error ? action.error : action.result === null ? "" : JSON.stringify(action.result),
        action.error ? "phase-failed mono" : "mono");
    }
  }

  function showResults(response) {
    const body = document.querySelector("#results tbody");
    body.replaceChildren();
    for (const entry of (response && response.JobResponseData) || []) {
      const row = body.insertRow();
      row.dataset.id = entry.ID;
      cell(row, entry.ID);
      cell(row, typeof entry.Value === "string" ? entry.Value : JSON.stringify(entry.Value), "mono");
    }
    const description = response && response.Description ? response.Description.Text : "";
    const error = (live.progress && live.progress.error) || description;
    for (const [id, field] of [["started", "StartTime"], ["ended", "EndTime"]]) {
      if (response && response[field]) document.getElementById(id).textContent = response[field];
    }
    const box = document.getElementById("error");
    box.textContent = text(error);
    box.hidden = !error;
  }

  function tick() {
    document.querySelectorAll("[data-since]").forEach((td) => {
      td.textContent = seconds(Math.max(0, now() - Number(td.dataset.since)));
    });
    document.querySelectorAll("[data-deadline]").forEach((td) => {
      const left = Number(td.dataset.deadline) - now();
      td.textContent = left >= 0 ? seconds(left) + " left" : "timed out " + seconds(-left) + " ago";
      td.classList.toggle("late", left < 0);
    });
    document.querySelectorAll("[data-stored]").forEach((td) => {
      const stored = Date.parse(td.dataset.stored) / 1000;
      if (!Number.isNaN(stored)) td.textContent = seconds(Math.max(0, now() - stored));
    });
  }

  function apply(update) {
    live = update;
    offset = update.server_time - Date.now() / 1000;
    showState(update.state);
    showChart(update.progress);
    showActive(update.progress);
    showActions(update.progress);
    showResults(update.response);
    tick();
  }

  function describe(entry) {
    switch (entry.kind) {
      case "step": return (entry.active ? "entered " : "left ") + entry.step;
      case "state": return entry.method + ": " + entry.previous + " → " + entry.current;
      case "method": return entry.method + " by " + entry.requested_by + ": " + entry.status +
        (entry.message ? " (" + entry.message + ")" : "");
      case "command": return entry.type + " → " + text(entry.equipment || "equipment") + " [" +
        entry.correlation_id + "]" + (entry.error ? " not delivered: " + entry.error : "");
      case "reply": return "reply [" + entry.correlation_id + "] " +
        (entry.error ? "error: " + entry.error : JSON.stringify(entry.data));
      case "event": return entry.type + " from " + text(entry.equipment) + " " + JSON.stringify(entry.data);
      default: return JSON.stringify(entry);
    }
  }

  function addTrace(entry) {
    if (seen.has(entry.id)) return;
    seen.add(entry.id);
    const body = document.querySelector("#trace tbody");
    const row = body.insertRow();
    row.dataset.id = entry.id;
    row.dataset.kind = entry.kind;
    row.className = "kind-" + entry.kind;
    if (entry.kind === "step") {
      row.dataset.step = entry.step;
      row.dataset.active = String(entry.active);
    }
    cell(row, new Date(entry.ts * 1000).toISOString().slice(11, 23), "mono");
    cell(row, entry.kind, "kind");
    cell(row, describe(entry));
    cell(row, entry.latency_ms === undefined ? "" : entry.latency_ms + " ms", "num");
  }

  JSON.parse(document.getElementById("initial-trace").textContent).forEach(addTrace);
  apply(live);
  setInterval(tick, 500);

  const url = main.dataset.events + "?after=" + encodeURIComponent(main.dataset.cursor);
  const source = new EventSource(url);
  source.addEventListener("open", () => { connection.textContent = "live"; connection.className = "live"; });
  source.addEventListener("error", () => {
    connection.textContent = "reconnecting…";
    connection.className = "reconnecting";
  });
  source.addEventListener("live", (event) => apply(JSON.parse(event.data)));
  source.addEventListener("state", (event) => showState(JSON.parse(event.data).state));
  source.addEventListener("trace", (event) => addTrace(JSON.parse(event.data)));
})();

(function () {
  "use strict";
  const table = document.querySelector("table[data-scope-events]");
  if (!table) return;
  const connection = document.getElementById("connection");
  const body = table.querySelector("tbody");
  const text = (value) => (value === null || value === undefined ? "" : String(value));
  const seconds = (s) => (s < 60 ? s.toFixed(0) + " s" : s < 3600 ? Math.floor(s / 60) + " min" :
    Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min");

  function tick() {
    body.querySelectorAll("[data-stored]").forEach((td) => {
      const stored = Date.parse(td.dataset.stored) / 1000;
      if (!Number.isNaN(stored)) td.textContent = seconds(Math.max(0, Date.now() / 1000 - stored));
    });
  }

  async function reload() {
    const response = await fetch(table.dataset.jobsUrl, { headers: { Accept: "application/json" } });
    if (!response.ok) return;
    const jobs = await response.json();
    body.replaceChildren();
    for (const job of jobs) {
      const row = body.insertRow();
      row.dataset.job = job.job_order_id;
      const link = document.createElement("a");
      link.href = table.dataset.jobBase + encodeURIComponent(job.job_order_id);
      link.textContent = job.job_order_id;
      row.insertCell().append(link);
      const state = row.insertCell();
      state.textContent = job.state;
      state.className = "state " + job.state.split(".")[0];
      const priority = row.insertCell();
      priority.textContent = text(job.priority);
      priority.className = "num";
      const age = row.insertCell();
      age.className = "num";
      if (job.stored_at) age.dataset.stored = job.stored_at;
      row.insertCell().textContent = text(job.work_master_id);
      const version = row.insertCell();
      version.textContent = text(job.recipe_version).slice(0, 19);
      version.className = "mono";
    }
    tick();
  }

  tick();
  setInterval(tick, 1000);
  const source = new EventSource(table.dataset.scopeEvents + "?after=" + encodeURIComponent(table.dataset.cursor));
  source.addEventListener("open", () => { connection.textContent = "live"; connection.className = "live"; });
  source.addEventListener("error", () => {
    connection.textContent = "reconnecting…";
    connection.className = "reconnecting";
  });
  source.addEventListener("change", () => { reload(); });
})();

(function () {
  "use strict";
  // The scope page's queue: re-rendered from the JSON API (same structure as the server's).
  const section = document.querySelector("section[data-queue-url]");
  if (!section) return;
  const cell = (row, value, className) => {
    const td = row.insertCell();
    td.textContent = value === null || value === undefined ? "" : String(value);
    if (className) td.className = className;
    return td;
  };
  const link = (row, job) => {
    const a = document.createElement("a");
    a.href = section.dataset.jobBase + encodeURIComponent(job);
    a.textContent = job;
    row.insertCell().append(a);
  };

  async function reload() {
    const response = await fetch(section.dataset.queueUrl, { headers: { Accept: "application/json" } });
    if (!response.ok) return;
    const queue = await response.json();
    const state = document.getElementById("queue-state");
    const label = document.createElement("span");
    label.className = queue.online ? "online" : "offline";
    label.textContent = queue.online ? "online" : "offline" + (queue.reason ? ": " + queue.reason : "");
    state.replaceChildren("Scope ", label, (queue.online ? "" : " (no queued job starts)") +
      "; runs " + (queue.capacity || "unlimited") + " job(s) at once.");
    const body = section.querySelector("tbody");
    body.replaceChildren();
    for (const job of queue.running) {
      const row = body.insertRow();
      cell(row, "running");
      link(row, job.job_order_id);
      cell(row, "");
      cell(row, "");
      cell(row, job.equipment.join(", "));
    }
    for (const job of queue.waiting) {
      const row = body.insertRow();
      cell(row, job.position, "num");
      link(row, job.job_order_id);
      cell(row, job.priority, "num");
      cell(row, job.start_time);
      cell(row, job.equipment.join(", "));
    }
    if (!body.rows.length) {
      const row = body.insertRow();
      const td = cell(row, "Nothing running or waiting.", "muted");
      td.colSpan = 5;
    }
  }

  setInterval(reload, 2000);
})();
