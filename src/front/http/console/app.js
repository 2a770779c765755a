// smdb console: plain JavaScript, no framework and no build step (docs/http.md, "Console").
// Every request goes to this page's own origin with the token in the Authorization header;
// event streams are read with fetch(), which can send that header (EventSource cannot).
// The DOM is built with createElement/textContent only: no server value is ever parsed as HTML.
"use strict";

(() => {
  const TOKEN_KEY = "smdb.token";
  const FEED_ROWS_MAX = 500;
  const HISTORY_LIMIT = 200;
  const STATS_EVERY_MS = 2000;
  const SERVER_EVERY_MS = 5000;

  const app = {
    token: sessionStorage.getItem(TOKEN_KEY),
    scopes: [],
    // Per view: timers and streams to stop when the view changes.
    timers: [],
    streams: [],
  };

  const $ = (sel, root = document) => root.querySelector(sel);
  const enc = encodeURIComponent;

  // h("div", {class: "x", onclick: f}, child, ...): an element; strings become text nodes.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "class") el.className = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  const canWrite = () => app.scopes.includes("write");
  const canAdmin = () => app.scopes.includes("admin");

  class ApiError extends Error {
    constructor(status, problem) {
      super(problem && problem.detail ? problem.detail : "HTTP " + status);
      this.status = status;
      this.problem = problem || {};
    }
  }

  function headers(extra) {
    const hs = Object.assign({}, extra || {});
    if (app.token) hs.Authorization = "Bearer " + app.token;
    return hs;
  }

  async function api(method, path, body, extra) {
    const hs = headers(extra);
    if (body !== undefined) hs["Content-Type"] = "application/json";
    const r = await fetch(path, {
      method, headers: hs, cache: "no-store", credentials: "omit",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    let json = null;
    try { json = text && r.headers.get("content-type").includes("json") ? JSON.parse(text) : null; } catch (e) { json = null; }
    if (r.status === 401) {
      showSignin(json && json.detail);
      throw new ApiError(r.status, json);
    }
    if (!r.ok) throw new ApiError(r.status, json);
    return { json, text, headers: r.headers, status: r.status };
  }

  function banner(msg) {
    const b = $("#banner");
    b.textContent = msg || "";
    b.hidden = !msg;
  }

  // ---- event streams over fetch ----------------------------------------------------------
  function parseEvent(block) {
    const ev = { id: null, event: "message", data: "" };
    let any = false;
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      any = true;
      if (field === "id") ev.id = value;
      else if (field === "event") ev.event = value;
      else if (field === "data") ev.data += value;
    }
    return any && (ev.data || ev.event !== "message") ? ev : null;
  }

  // Opens `path` as an event stream; onEvent(ev) per event, onEnd(error|null) once.
  function openStream(path, lastId, onEvent, onEnd) {
    const ctrl = new AbortController();
    app.streams.push(ctrl);
    (async () => {
      try {
        const hs = headers({ Accept: "text/event-stream" });
        if (lastId) hs["Last-Event-ID"] = lastId;
        const r = await fetch(path, { headers: hs, signal: ctrl.signal, cache: "no-store", credentials: "omit" });
        if (!r.ok) {
          let p = null;
          try { p = await r.json(); } catch (e) { p = null; }
          if (r.status === 401) showSignin(p && p.detail);
          onEnd(new ApiError(r.status, p));
          return;
        }
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const ev = parseEvent(buf.slice(0, i));
            buf = buf.slice(i + 2);
            if (ev) onEvent(ev);
          }
        }
        onEnd(null);
      } catch (e) {
        if (e.name !== "AbortError") onEnd(e);
      }
    })();
    return ctrl;
  }

  // ---- sign-in and routing ----------------------------------------------------------------
  function showSignin(why) {
    $("#signin").hidden = false;
    $("#main").hidden = true;
    $("#signin-error").textContent = app.token ? (why || "This token was refused.") : "";
  }

  function whoami() {
    const who = $("#who");
    who.replaceChildren();
    const label = app.scopes.length ? "scopes: " + app.scopes.join(", ") : "";
    who.append(h("span", { id: "scopes" }, label));
    if (app.token) {
      who.append(h("button", { class: "secondary", onclick: () => {
        sessionStorage.removeItem(TOKEN_KEY);
        app.token = null;
        start();
      } }, "Sign out"));
    }
  }

  async function start() {
    try {
      const r = await api("GET", "/info");
      app.scopes = (r.headers.get("Smdb-Scopes") || "").split(" ").filter(Boolean);
      // The cluster view is offered only by a cluster member (INFO's `cluster`).
      $("#nav-cluster").hidden = !(r.json && r.json.cluster);
      $("#signin").hidden = true;
      $("#main").hidden = false;
      whoami();
      route();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) banner("Cannot reach the server: " + e.message);
    }
  }

  function stopView() {
    app.timers.forEach(clearInterval);
    app.streams.forEach((c) => c.abort());
    app.timers = [];
    app.streams = [];
  }

  function every(ms, f) {
    app.timers.push(setInterval(f, ms));
  }

  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [path, query] = raw.split("?");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    return { parts, query: new URLSearchParams(query || "") };
  }

  async function route() {
    stopView();
    banner("");
    const { parts, query } = parseHash();
    const view = parts[0] || "machines";
    for (const a of document.querySelectorAll("nav a")) {
      a.classList.toggle("active", a.dataset.view === view || ((view === "machine" || view === "migrate") && a.dataset.view === "machines")
        || (view === "instance" && a.dataset.view === "instances"));
    }
    const main = $("#main");
    main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
    try {
      if (view === "machines") await machinesView(main);
      else if (view === "machine") await machineView(main, parts[1], parts[2]);
      else if (view === "instances") await instancesView(main, query);
      else if (view === "instance") await instanceView(main, parts.slice(1).join("/"));
      else if (view === "migrate") await window.smdbMigrateView(main, parts[1], query, migrateUi);
      else if (view === "feed") feedView(main, query);
      else if (view === "server") await serverView(main);
      else if (view === "cluster") await window.smdbClusterView(main, clusterUi);
      else main.replaceChildren(h("p", {}, "No such view."));
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) {
        main.replaceChildren(h("p", { class: "error" }, e.message));
      }
    }
  }

  // What the migration view (migrate.js, its own file) uses of this one.
  const migrateUi = { h, api, banner, enc, isAdmin: canAdmin, onLeave: (ctrl) => app.streams.push(ctrl) };

  // What the cluster view (cluster.js) uses of this one.
  const clusterUi = { h, api, banner, every };

  // ---- diagrams ---------------------------------------------------------------------------
  // The server's SVG, parsed as XML (never as HTML) and adopted into the page.
  async function diagram(machine, version) {
    const r = await api("GET", `/machines/${enc(machine)}/versions/${version}/diagram?format=svg`);
    const doc = new DOMParser().parseFromString(r.text, "image/svg+xml");
    return document.importNode(doc.documentElement, true);
  }

  function setCounts(svg, states) {
    for (const t of svg.querySelectorAll("text.count")) {
      const n = states[t.getAttribute("data-count-for")] || 0;
      t.textContent = String(n);
      t.parentNode.classList.toggle("busy", n > 0);
    }
  }

  // Events a state accepts: from the state itself, a list holding it, or "*" (not final).
  function eventsFrom(def, state) {
    const finals = def.final || [];
    const out = [];
    for (const t of def.transitions || []) {
      const f = t.from;
      const covers = f === state || (Array.isArray(f) && f.includes(state)) || (f === "*" && !finals.includes(state));
      if (covers && !out.some((o) => o.event === t.event)) {
        out.push({ event: t.event, timed: t.after_ms !== undefined || t.at !== undefined, guard: t.guard });
      }
    }
    return out;
  }

  // ---- views ------------------------------------------------------------------------------
  async function machinesView(main) {
    const { json } = await api("GET", "/machines");
    const rows = json.machines.map((m) => h("tr", {},
      h("td", {}, h("a", { href: `#/machine/${enc(m.machine)}/${m.versions[m.versions.length - 1]}` }, m.machine)),
      h("td", {}, m.versions.map((v) => [h("a", { href: `#/machine/${enc(m.machine)}/${v}` }, "v" + v), " "])),
      h("td", {}, h("a", { href: `#/instances?machine=${enc(m.machine)}` }, "instances"),
        canAdmin() && m.versions.length > 1 ? [" · ", h("a", { class: "migrate-link", href: `#/migrate/${enc(m.machine)}` }, "migrate")] : null)));
    main.replaceChildren(
      h("h1", { id: "view-title" }, "Machines"),
      h("div", { class: "card scroll" }, rows.length
        ? h("table", { id: "machines" }, h("tr", {}, h("th", {}, "machine"), h("th", {}, "versions"), h("th", {}, "")), rows)
        : h("p", { class: "muted" }, "No machine yet: PUT /machines/{m}/versions/{v} (docs/http.md).")));
  }

  async function machineView(main, machine, version) {
    const path = version ? `/machines/${enc(machine)}/versions/${enc(version)}` : `/machines/${enc(machine)}`;
    const def = (await api("GET", path)).json;
    const svg = await diagram(machine, def.version);
    const statsTable = h("tbody", { id: "stats" });
    const refresh = async () => {
      try {
        const { json } = await api("GET", `/machines/${enc(machine)}/stats`);
        setCounts(svg, json.states);
        statsTable.replaceChildren(...Object.entries(json.states).map(([s, n]) => h("tr", {},
          h("td", {}, h("a", { href: `#/instances?machine=${enc(machine)}&state=${enc(s)}` }, s)),
          h("td", { class: "count", "data-state": s }, String(n)))));
      } catch (e) { banner("stats: " + e.message); }
    };
    for (const g of svg.querySelectorAll("g.state")) {
      g.addEventListener("click", () => {
        location.hash = `#/instances?machine=${enc(machine)}&state=${enc(g.getAttribute("data-state"))}`;
      });
    }
    main.replaceChildren(
      h("h1", { id: "view-title" }, `${def.machine} v${def.version}`),
      h("p", { class: "muted" }, "Live instance counts (all versions) on each state; click a state for its instances.",
        canAdmin() ? [" ", h("a", { id: "migrate-link", href: `#/migrate/${enc(machine)}?from=${def.version}` }, "Migrate instances to another version…")] : null),
      h("div", { class: "diagram", id: "diagram" }, svg),
      h("div", { class: "grid" },
        h("div", { class: "card" }, h("h2", {}, "Instances per state"), h("table", {}, statsTable)),
        canWrite() ? createForm(def) : null,
        h("div", { class: "card" }, h("h2", {}, "Definition"), h("pre", {}, JSON.stringify(def.definition, null, 2)))));
    await refresh();
    every(STATS_EVERY_MS, refresh);
  }

  function createForm(def) {
    const id = h("input", { id: "create-id", placeholder: "id", required: true });
    const ctx = h("textarea", { id: "create-context" }, "{}");
    const out = h("p", { id: "create-result" });
    const submit = async (e) => {
      e.preventDefault();
      try {
        const context = JSON.parse(ctx.value || "{}");
        const { json } = await api("POST", "/instances", { machine: def.machine, version: def.version, id: id.value, context });
        location.hash = `#/instance/${enc(json.id)}`;
      } catch (err) { out.className = "error"; out.textContent = err.message; }
    };
    return h("form", { class: "card", id: "create-form", onsubmit: submit },
      h("h2", {}, "Create an instance"), h("label", {}, "id", id), h("label", {}, "context (JSON)", ctx),
      h("button", { type: "submit" }, "Create"), out);
  }

  async function instancesView(main, query) {
    const machines = (await api("GET", "/machines")).json.machines;
    const machine = query.get("machine") || "";
    const state = query.get("state") || "";
    const cursor = query.get("cursor") || "";
    const q = new URLSearchParams({ limit: "50" });
    if (machine) q.set("machine", machine);
    if (state) q.set("state", state);
    if (cursor) q.set("cursor", cursor);
    // A search over a declared index (docs/queries.md): `where.<path>=V` makes it a FIND.
    const where = [...query.entries()].filter(([k]) => k.startsWith("where."));
    for (const [k, v] of where) q.set(k, v);
    const page = (await api("GET", "/instances?" + q)).json;
    const indexes = machine ? ((await api("GET", `/machines/${enc(machine)}`)).json.definition.indexes || []) : [];
    const mSel = h("select", { id: "filter-machine" }, h("option", { value: "" }, "any machine"),
      machines.map((m) => h("option", { value: m.machine, selected: m.machine === machine }, m.machine)));
    const sIn = h("input", { id: "filter-state", placeholder: "state", value: state });
    const idIn = h("input", { id: "find-id", placeholder: "instance id" });
    const filter = (e) => {
      e.preventDefault();
      const p = new URLSearchParams();
      if (mSel.value) p.set("machine", mSel.value);
      if (sIn.value) p.set("state", sIn.value);
      location.hash = "#/instances?" + p;
    };
    const search = searchForm(machine, indexes, where);
    const rows = page.instances.map((i) => h("tr", {},
      h("td", {}, h("a", { href: `#/instance/${enc(i.id)}` }, i.id)),
      h("td", {}, `${i.machine} v${i.version}`),
      h("td", {}, h("span", { class: "pill" }, i.state)),
      h("td", { class: "hide-narrow muted" }, i.updated_at || "")));
    const next = page.next_cursor;
    const more = new URLSearchParams(query);
    if (next) more.set("cursor", next);
    main.replaceChildren(
      h("h1", { id: "view-title" }, "Instances"),
      h("div", { class: "card" },
        h("form", { class: "inline", onsubmit: filter }, h("label", {}, "machine", mSel), h("label", {}, "state", sIn),
          h("button", { type: "submit" }, "Filter")),
        h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); if (idIn.value) location.hash = `#/instance/${enc(idIn.value)}`; } },
          h("label", {}, "open by id", idIn), h("button", { type: "submit", class: "secondary" }, "Open")),
        search),
      h("div", { class: "card scroll" },
        rows.length ? h("table", { id: "instances" },
          h("tr", {}, h("th", {}, "id"), h("th", {}, "machine"), h("th", {}, "state"), h("th", { class: "hide-narrow" }, "updated")), rows)
          : h("p", { class: "muted" }, "No instance matches."),
        h("p", {}, cursor ? h("button", { type: "button", class: "secondary", onclick: () => history.back() }, "← previous") : null, " ",
          next ? h("a", { id: "next-page", href: "#/instances?" + more }, "next →") : null)));
  }

  // The search box: a declared index of the machine's latest version and a value (JSON when it
  // reads as a number, true, false, null or a quoted string, else the text, as the HTTP API
  // reads it). Without a declared index it says how to declare one.
  function searchForm(machine, indexes, where) {
    if (!machine) return null;
    if (!indexes.length) {
      return h("p", { class: "muted", id: "search-none" },
        `No declared index on ${machine}: add "indexes": ["ctx.<field>"] to a version to search it.`);
    }
    const [active] = where;
    const sel = h("select", { id: "search-index" },
      indexes.map((p) => h("option", { value: p, selected: active && active[0] === `where.${p}` }, p)));
    const val = h("input", { id: "search-value", placeholder: "value", value: active ? active[1] : "" });
    const submit = (e) => {
      e.preventDefault();
      const p = new URLSearchParams({ machine });
      if (val.value) p.set(`where.${sel.value}`, val.value);
      location.hash = "#/instances?" + p;
    };
    return h("form", { class: "inline", id: "search-form", onsubmit: submit },
      h("label", {}, "search", sel), h("label", {}, "equals", val),
      h("button", { type: "submit", class: "secondary" }, "Search"));
  }

  async function instanceView(main, id) {
    const r = await api("GET", `/instances/${enc(id)}`);
    const inst = r.json;
    const etag = r.headers.get("ETag");
    const mach = (await api("GET", `/machines/${enc(inst.machine)}/versions/${inst.version}`)).json;
    const svg = await diagram(inst.machine, inst.version);
    for (const g of svg.querySelectorAll("g.state")) {
      g.classList.toggle("current", g.getAttribute("data-state") === inst.state);
    }
    const hist = (await api("GET", `/instances/${enc(id)}/events?limit=${HISTORY_LIMIT}`)).json;
    const items = (hist.events || []).map((e) => h("li", {},
      h("div", {}, h("b", {}, e.event), ` ${e.from_state} → ${e.to_state}`),
      h("div", { class: "when" }, `#${e.seq} · ${e.at} · wal ${e.wal_offset}`),
      Object.keys(e.payload || {}).length ? h("code", {}, JSON.stringify(e.payload)) : null));
    const facts = h("dl", { class: "kv" },
      h("dt", {}, "state"), h("dd", {}, h("span", { class: "pill state-pill", id: "inst-state" }, inst.state)),
      h("dt", {}, "machine"), h("dd", {}, h("a", { href: `#/machine/${enc(inst.machine)}/${inst.version}` }, `${inst.machine} v${inst.version}`)),
      h("dt", {}, "events"), h("dd", {}, String(inst.event_count)),
      h("dt", {}, "created"), h("dd", {}, inst.created_at),
      h("dt", {}, "updated"), h("dd", {}, inst.updated_at),
      h("dt", {}, "version"), h("dd", { class: "mono" }, etag || String(inst.wal_offset)),
      h("dt", {}, "timer"), h("dd", { id: "inst-timer" }, inst.timer ? `${inst.timer.event} at ${inst.timer.due_at}` : "none"));
    main.replaceChildren(
      h("h1", { id: "view-title" }, inst.id),
      h("div", { class: "diagram", id: "diagram" }, svg),
      h("div", { class: "grid" },
        h("div", { class: "card" }, h("h2", {}, "Instance"), facts, h("h2", {}, "Context"), h("pre", { id: "inst-context" }, JSON.stringify(inst.context, null, 2)),
          canWrite() ? h("button", { class: "secondary", id: "delete", onclick: async () => {
            if (!confirm(`Delete ${inst.id}?`)) return;
            try { await api("DELETE", `/instances/${enc(id)}`); location.hash = "#/instances"; } catch (e) { banner(e.message); }
          } }, "Delete") : null),
        canWrite() ? applyForm(id, mach.definition, inst.state, etag) : null,
        h("div", { class: "card" }, h("h2", {}, `History (${hist.events ? hist.events.length : 0})`), h("ul", { class: "timeline", id: "history" }, items))));
    // Live: another client's event on this instance redraws the view.
    let again = null;
    openStream(`/stream?instance=${enc(id)}`, null, (ev) => {
      if (ev.event !== "message" || again) return;
      again = setTimeout(() => { if (parseHash().parts[0] === "instance") route(); }, 100);
    }, () => {});
  }

  function applyForm(id, def, state, etag) {
    const options = eventsFrom(def, state);
    const sel = h("select", { id: "apply-event" }, options.map((o) =>
      h("option", { value: o.event }, o.event + (o.guard ? " [guarded]" : "") + (o.timed ? " (timed)" : ""))));
    const payload = h("textarea", { id: "apply-payload" }, "{}");
    const guard = h("input", { type: "checkbox", id: "apply-if-match", checked: true });
    const out = h("p", { id: "apply-result" });
    const submit = async (e) => {
      e.preventDefault();
      out.className = "";
      out.textContent = "…";
      try {
        const body = { event: sel.value, payload: JSON.parse(payload.value || "{}") };
        const extra = guard.checked && etag ? { "If-Match": etag } : {};
        const { json } = await api("POST", `/instances/${enc(id)}/events`, body, extra);
        out.className = "ok";
        out.textContent = `${json.from_state} → ${json.to_state}`;
        setTimeout(route, 300);
      } catch (err) {
        out.className = "error";
        out.textContent = (err.problem.code ? err.problem.code + ": " : "") + err.message;
      }
    };
    if (!options.length) {
      return h("div", { class: "card", id: "apply-form" }, h("h2", {}, "Apply an event"), h("p", { class: "muted" }, `No event leaves ${state}.`));
    }
    return h("form", { class: "card", id: "apply-form", onsubmit: submit },
      h("h2", {}, "Apply an event"), h("label", {}, "event", sel), h("label", {}, "payload (JSON)", payload),
      h("label", { class: "inline" }, h("span", {}, guard, " only if unchanged since shown (If-Match)")),
      h("button", { type: "submit", id: "apply-submit" }, "Apply"), out);
  }

  function feedView(main, query) {
    const inputs = {
      machines: h("input", { id: "feed-machines", placeholder: "machines (a,b)", value: query.get("machines") || "" }),
      events: h("input", { id: "feed-events", placeholder: "events", value: query.get("events") || "" }),
      to_states: h("input", { id: "feed-to-states", placeholder: "to states", value: query.get("to_states") || "" }),
    };
    const rows = h("tbody", { id: "feed-rows" });
    const status = h("span", { id: "feed-status", class: "muted" }, "connecting…");
    const pause = h("button", { type: "button", id: "feed-pause" }, "Pause");
    let ctrl = null;
    let last = null;
    let paused = false;
    const path = () => {
      const q = new URLSearchParams();
      for (const [k, el] of Object.entries(inputs)) if (el.value.trim()) q.set(k, el.value.trim());
      return "/stream?" + q;
    };
    const add = (v) => {
      for (const old of rows.querySelectorAll(".fresh")) old.classList.remove("fresh");
      rows.prepend(h("tr", { class: "feed-row fresh", "data-instance": v.instance_id },
        h("td", { class: "hide-narrow muted" }, new Date().toLocaleTimeString()),
        h("td", {}, v.machine),
        h("td", {}, h("a", { href: `#/instance/${enc(v.instance_id)}` }, v.instance_id)),
        h("td", {}, h("b", {}, v.event)),
        h("td", {}, `${v.from_state} → ${v.to_state}`),
        h("td", { class: "hide-narrow mono" }, `${v.shard}:${v.wal_offset}`)));
      while (rows.children.length > FEED_ROWS_MAX) rows.lastChild.remove();
    };
    const connect = () => {
      status.textContent = "live";
      ctrl = openStream(path(), last, (ev) => {
        if (ev.id) last = ev.id;
        if (ev.event === "message") add(JSON.parse(ev.data));
        else if (ev.event === "lagged") {
          // Fell behind: resume from the cursor the server names, nothing skipped.
          last = JSON.parse(ev.data).resume_cursor;
          status.textContent = "caught up after falling behind";
        }
      }, (err) => {
        if (paused) return;
        status.textContent = err ? "disconnected: " + err.message + " (retrying)" : "reconnecting…";
        setTimeout(() => { if (!paused && ctrl && !ctrl.signal.aborted) connect(); }, 1000);
      });
    };
    pause.addEventListener("click", () => {
      paused = !paused;
      pause.textContent = paused ? "Resume" : "Pause";
      if (paused) { ctrl.abort(); status.textContent = "paused (resumes where it stopped)"; } else connect();
    });
    const apply = (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      for (const [k, el] of Object.entries(inputs)) if (el.value.trim()) q.set(k, el.value.trim());
      location.hash = "#/feed?" + q;
    };
    main.replaceChildren(
      h("h1", { id: "view-title" }, "Live feed"),
      h("div", { class: "card" }, h("form", { class: "inline", onsubmit: apply },
        h("label", {}, "machines", inputs.machines), h("label", {}, "events", inputs.events),
        h("label", {}, "to states", inputs.to_states), h("button", { type: "submit" }, "Filter"), pause, status)),
      h("div", { class: "card scroll" }, h("table", {},
        h("tr", {}, h("th", { class: "hide-narrow" }, "seen"), h("th", {}, "machine"), h("th", {}, "instance"),
          h("th", {}, "event"), h("th", {}, "move"), h("th", { class: "hide-narrow" }, "shard:offset")), rows)));
    connect();
  }

  async function serverView(main) {
    const info = (await api("GET", "/info")).json;
    const repl = (await api("GET", "/replication")).json;
    const table = (list) => {
      if (!Array.isArray(list) || !list.length) return h("p", { class: "muted" }, "none");
      const keys = Object.keys(list[0]);
      return h("div", { class: "scroll" }, h("table", {}, h("tr", {}, keys.map((k) => h("th", {}, k))),
        list.map((row) => h("tr", {}, keys.map((k) => h("td", { class: "mono" },
          typeof row[k] === "object" ? JSON.stringify(row[k]) : String(row[k])))))));
    };
    const kv = (obj) => h("dl", { class: "kv" }, Object.entries(obj).filter(([, v]) => typeof v !== "object" || v === null)
      .map(([k, v]) => [h("dt", {}, k), h("dd", { class: "mono" }, String(v))]));
    const members = repl.replicas || (repl.ha && repl.ha.members) || [];
    main.replaceChildren(
      h("h1", { id: "view-title" }, "Server"),
      h("div", { class: "grid" },
        h("div", { class: "card", id: "server-info" }, h("h2", {}, "Server"), kv(info), h("h2", {}, "Log"), kv(info.wal || {}),
          h("h2", {}, "Limits"), kv(info.limits || {}), h("h2", {}, "Connections"), kv(info.connections || {})),
        h("div", { class: "card", id: "replication" }, h("h2", {}, "Replication"), kv(repl),
          h("h2", {}, "Members"), table(members), repl.ha ? [h("h2", {}, "HA"), kv(repl.ha)] : null)),
      h("div", { class: "card" }, h("h2", {}, "Shards"), table(info.shard_details)));
    every(SERVER_EVERY_MS, () => { if (parseHash().parts[0] === "server") route(); });
  }

  // ---- start ------------------------------------------------------------------------------
  $("#signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    app.token = $("#token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, app.token);
    $("#token").value = "";
    start();
  });
  window.addEventListener("hashchange", route);
  start();
})();
