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
    const failed = (progress ? progress.actions : []).filter((action) => action.phase === "failed");
    const failedSteps = new Set(failed.map((action) => action.step));
    const failedActions = new Set(failed.map((action) => action.name));
    // Every format's drawing marks its nodes g.step[data-step] (or g.branch[data-branch]) and
    // its actions g.action[data-action] (docs/recipe-formats.md).
    document.querySelectorAll("#chart g.step, #chart g.branch").forEach((g) => {
      const name = g.getAttribute("data-step") ?? g.getAttribute("data-branch");
      g.classList.toggle("active", names.has(name));
      g.classList.toggle("failed", failedSteps.has(name));
    });
    document.querySelectorAll("#chart g.action").forEach((g) => {
      g.classList.toggle("failed", failedActions.has(g.getAttribute("data-action")));
    });
  }

  // A result as people read it: a text as it is, an object as a key/value table.
  function valueNode(value, depth) {
    if (value === null || value === undefined) return document.createTextNode("");
    if (typeof value !== "object") return document.createTextNode(String(value));
    if (Array.isArray(value) && value.every((item) => item === null || typeof item !== "object")) {
      return document.createTextNode(value.join(", "));
    }
    if (depth > 1) return document.createTextNode(JSON.stringify(value));
    const list = document.createElement("dl");
    list.className = "kv";
    for (const [key, item] of Object.entries(value)) {
      const name = document.createElement("dt");
      name.textContent = key;
      const entry = document.createElement("dd");
      entry.append(valueNode(item, depth + 1));
      list.append(name, entry);
    }
    return list;
  }

  function valueCell(row, value, cls) {
    const td = row.insertCell();
    td.className = cls || "";
    td.append(valueNode(value, 0));
    return td;
  }

  function showState(state) {
    const el = document.getElementById("state");
    const top = text(state).split(".")[0];
    el.textContent = text(state);
    el.className = "state " + top;
    const operator = document.getElementById("operator");
    if (!operator) return;
    if (["Ended", "Aborted", "EndState"].includes(top)) {
      operator.remove(); // an ended job takes no action any more
      return;
    }
    operator.querySelectorAll("form[data-states]").forEach((form) => {
      form.hidden = !form.dataset.states.split(" ").includes(top);
    });
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

  // Where a delegated command runs (a station's job): its label, a link when it has an http(s)
  // URL, opened in a new tab that gets no hold on this page.
  function linkCell(row, link) {
    const td = row.insertCell();
    td.className = "delegated";
    if (!link) return td;
    if (link.url && /^https?:\/\//i.test(link.url)) {
      const a = document.createElement("a");
      a.href = link.url;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      a.textContent = link.label;
      td.append(a);
    } else {
      td.textContent = text(link.label);
    }
    return td;
  }

  function showActions(progress) {
    const body = document.querySelector("#actions tbody");
    body.replaceChildren();
    let group = null; // the fan-out member whose runs the rows are showing
    let banded = false;
    for (const action of progress ? progress.actions : []) {
      const row = body.insertRow();
      row.dataset.action = action.name;
      if (action.member) {
        // A fan-out's member runs follow it member by member: each member a band of its own.
        const key = action.fan_out + "@" + action.member;
        if (key !== group) {
          group = key;
          banded = !banded;
          row.classList.add("member-first");
        }
        row.classList.add("member", banded ? "member-banded" : "member-plain");
        row.dataset.fanOut = action.fan_out;
        row.dataset.member = action.member;
      } else {
        group = null;
        banded = false;
      }
      cell(row, action.name);
      cell(row, action.step);
      cell(row, action.phase, "phase-" + action.phase);
      cell(row, action.tries + " / " + action.max_attempts, "num");
      const timeout = cell(row, action.deadline ? "" : "–", "num");
      if (action.deadline) timeout.dataset.deadline = action.deadline;
      linkCell(row, action.link);
      if (action.error) cell(row, action.error, "phase-failed text");
      else valueCell(row, action.result, "value");
    }
  }

  function showBreakpoint(progress) {
    const box = document.getElementById("breakpoint");
    const step = progress && progress.paused_before;
    box.textContent = step ? "Paused at a breakpoint before step " + step : "";
    box.hidden = !step;
  }

  function showResults(response) {
    const body = document.querySelector("#results tbody");
    body.replaceChildren();
    for (const entry of (response && response.JobResponseData) || []) {
      const row = body.insertRow();
      row.dataset.id = entry.ID;
      cell(row, entry.ID);
      valueCell(row, entry.Value, "value");
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
    showBreakpoint(update.progress);
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
    const groups = { Running: 0, Interrupted: 0, AllowedToStart: 1, NotAllowedToStart: 1 };
    const group = (job) => groups[job.state.split(".")[0]] ?? 2;
    // As the server orders them: running, waiting (highest priority first), ended (newest first).
    const jobs = (await response.json()).sort((a, b) => group(a) - group(b) ||
      (group(a) < 2 ? b.priority - a.priority : String(b.end_time || "").localeCompare(String(a.end_time || ""))));
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

(function () {
  "use strict";
  // The station dashboard: the server sends its sections, rendered, whenever they change.
  const station = document.getElementById("station");
  if (!station) return;
  const connection = document.getElementById("connection");
  let offset = 0; // server clock minus this browser's, seconds
  const span = (s) => (s < 60 ? Math.floor(s) + " s" : s < 3600 ? Math.floor(s / 60) + " min " +
    Math.floor(s % 60) + " s" : Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min");

  function tick() {
    const now = Date.now() / 1000 + offset;
    station.querySelectorAll("[data-since]").forEach((el) => {
      const text = span(Math.max(0, now - Number(el.dataset.since)));
      el.textContent = el.classList.contains("ago") ? text + " ago" : text;
    });
  }

  tick();
  setInterval(tick, 1000);
  const source = new EventSource(station.dataset.events);
  source.addEventListener("open", () => { connection.textContent = "live"; connection.className = "live"; });
  source.addEventListener("error", () => {
    connection.textContent = "reconnecting…";
    connection.className = "reconnecting";
  });
  source.addEventListener("dashboard", (event) => {
    const update = JSON.parse(event.data);
    offset = update.server_time - Date.now() / 1000;
    station.innerHTML = update.html; // rendered and escaped by the server
    tick();
  });
})();

(function () {
  "use strict";
  // The timeline: a click on a bar shows its facts.
  const chart = document.querySelector("svg.timeline");
  const details = document.getElementById("bar-details");
  if (!chart || !details) return;
  const clock = (s) => new Date(Number(s) * 1000).toISOString().slice(11, 23);
  const took = (s) => (s === "" ? "still open" : Number(s) < 1 ? (Number(s) * 1000).toFixed(0) + " ms" :
    Number(s).toFixed(2) + " s");
  chart.addEventListener("click", (event) => {
    const bar = event.target.closest(".bar");
    if (!bar) return;
    chart.querySelectorAll(".bar.selected").forEach((el) => el.classList.remove("selected"));
    bar.classList.add("selected");
    const d = bar.dataset;
    const facts = [];
    if (d.action) facts.push(["Action", d.action], ["Equipment", d.equipment], ["Outcome", d.outcome]);
    if (d.state) facts.push(["State", d.state]);
    if (d.step) facts.push(["Step", d.step]);
    facts.push(["Job", d.job], ["From (UTC)", clock(d.start)], ["Took", took(d.seconds)]);
    if (d.correlation) facts.push(["Correlation id", d.correlation]);
    if (d.error) facts.push(["Error", d.error]);
    const list = document.createElement("dl");
    list.className = "facts";
    for (const [name, value] of facts) {
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      dd.textContent = value;
      list.append(dt, dd);
    }
    details.className = "details";
    details.replaceChildren(list);
  });
})();
