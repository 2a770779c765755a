// smdb console: the cluster view, `#/cluster` (docs/cluster.md, "Ops"; docs/http.md, "Console").
// Shown only on a cluster member (INFO has `cluster`; app.js hides the nav entry otherwise).
// It reads `GET /cluster/shards` and `GET /cluster/info` every 2 s and redraws in place: the
// map's epoch and state, one bar of the 16384 slots coloured per group with a legend, each
// group's primary and members (role, health, lag), and the moves (running ones, then the
// newest 10 finished) with their state and age.
// Loaded before app.js, which calls window.smdbClusterView(main, ui) with its helpers; like
// app.js it builds the DOM with createElement/textContent only. Widths and colours are set
// through the CSSOM (element.style), which the console's CSP allows (no style attribute).
"use strict";

window.smdbClusterView = (() => {
  const SLOTS = 16384;
  const EVERY_MS = 2000;
  const FINISHED_SHOWN = 10;
  // Group colours, by the group's place in name order (wrapping past the last).
  const PALETTE = ["#2563eb", "#d97706", "#059669", "#9333ea", "#dc2626",
    "#0891b2", "#65a30d", "#db2777", "#4b5563", "#7c2d12"];

  const colour = (i) => PALETTE[i % PALETTE.length];
  const count = (lo, hi) => hi - lo + 1;
  const rangeText = (lo, hi) => (lo === hi ? String(lo) : `${lo}–${hi}`);

  // A time of the server's (ms since the epoch, or a date string) as ms, or null.
  function millis(t) {
    if (t === null || t === undefined) return null;
    const n = typeof t === "number" ? t : Date.parse(t);
    return Number.isFinite(n) ? n : null;
  }

  function age(ms) {
    if (ms === null || ms < 0) return "";
    const s = Math.floor(ms / 1000);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  // Every range of the map, by `lo`, with its group and that group's place in name order.
  function segments(shards) {
    const out = [];
    shards.forEach((g, i) => {
      for (const [lo, hi] of g.slots || []) out.push({ lo, hi, group: g.group, index: i });
    });
    return out.sort((a, b) => a.lo - b.lo);
  }

  function slotBar(ui, shards) {
    const { h } = ui;
    const bar = h("div", { class: "slot-bar", id: "slot-bar", role: "img",
      "aria-label": "the 16384 slots by group" });
    let next = 0;
    const piece = (cls, attrs, lo, hi, bg) => {
      const el = h("div", Object.assign({ class: cls, "data-lo": lo, "data-hi": hi,
        "data-count": count(lo, hi), title: `${rangeText(lo, hi)} (${count(lo, hi)} slots)` }, attrs));
      el.style.flexGrow = String(count(lo, hi));
      if (bg) el.style.backgroundColor = bg;
      bar.append(el);
    };
    for (const s of segments(shards)) {
      if (s.lo > next) piece("slot-gap", {}, next, s.lo - 1, null);
      piece("slot-seg", { "data-group": s.group }, s.lo, s.hi, colour(s.index));
      const el = bar.lastChild;
      el.title = `${s.group}: ${el.title}`;
      next = s.hi + 1;
    }
    if (next < SLOTS) piece("slot-gap", {}, next, SLOTS - 1, null);
    const ticks = h("div", { class: "slot-ticks muted" },
      [0, 4096, 8192, 12288, SLOTS - 1].map((t) => h("span", {}, String(t))));
    return [bar, ticks];
  }

  function legend(ui, shards) {
    const { h } = ui;
    return h("ul", { class: "slot-legend", id: "slot-legend" }, shards.map((g, i) => {
      const swatch = h("span", { class: "swatch" });
      swatch.style.backgroundColor = colour(i);
      const n = (g.slots || []).reduce((a, [lo, hi]) => a + count(lo, hi), 0);
      return h("li", { "data-group": g.group }, swatch, h("b", {}, g.group),
        ` ${n} slots`, (g.slots || []).length > 1 ? ` in ${g.slots.length} ranges` : "");
    }));
  }

  function summary(ui, shards, info) {
    const { h } = ui;
    const ok = info.state === "ok";
    const row = (k, v, id) => [h("dt", {}, k), h("dd", { id, class: "mono" }, v)];
    return h("dl", { class: "kv", id: "cluster-summary" },
      row("cluster", shards.cluster, "cluster-name"),
      row("state", h("span", { class: ok ? "ok" : "error" }, info.state), "cluster-state"),
      row("map epoch", String(shards.map_epoch), "cluster-epoch"),
      row("slots assigned", `${info.slots_assigned} (${info.slots_fail} without a primary)`, "cluster-assigned"),
      row("groups", String(shards.shards.length), "cluster-groups"),
      row("this member", `${info.my_node_id} (${info.my_role} of ${info.my_group})`, "cluster-me"));
  }

  function groupCard(ui, g, i) {
    const { h } = ui;
    const swatch = h("span", { class: "swatch" });
    swatch.style.backgroundColor = colour(i);
    const ranges = (g.slots || []).map(([lo, hi]) => rangeText(lo, hi)).join(", ") || "none";
    const nodes = (g.nodes || []).map((n) => h("tr", { "data-node": n.node_id },
      h("td", { class: "mono" }, n.node_id),
      h("td", {}, h("span", { class: n.role === "primary" ? "pill state-pill" : "pill" }, n.role)),
      h("td", { class: n.health === "online" ? "ok" : "error" }, n.health),
      h("td", { class: "count" }, String(n.lag_entries)),
      h("td", { class: "hide-narrow mono" }, n.addr || ""),
      h("td", { class: "hide-narrow mono" }, n.http_addr || "")));
    return h("div", { class: "card group-card", "data-group": g.group },
      h("h2", {}, swatch, g.group),
      h("dl", { class: "kv" },
        h("dt", {}, "primary"), h("dd", { class: g.primary ? "mono group-primary" : "error group-primary" }, g.primary || "none"),
        h("dt", {}, "epoch"), h("dd", { class: "mono" }, String(g.epoch)),
        h("dt", {}, "slots"), h("dd", { class: "mono" }, ranges)),
      nodes.length ? h("div", { class: "scroll" }, h("table", { class: "members" },
        h("tr", {}, h("th", {}, "node"), h("th", {}, "role"), h("th", {}, "health"), h("th", {}, "lag"),
          h("th", { class: "hide-narrow" }, "addr"), h("th", { class: "hide-narrow" }, "http")), nodes))
        : h("p", { class: "muted" }, "No live member."));
  }

  // Running moves first (oldest first), then the newest finished ones.
  function ordered(migrations) {
    const running = migrations.filter((m) => m.state === "running")
      .sort((a, b) => (millis(a.started_at) || 0) - (millis(b.started_at) || 0));
    const done = migrations.filter((m) => m.state !== "running")
      .sort((a, b) => (millis(b.finished_at) || 0) - (millis(a.finished_at) || 0))
      .slice(0, FINISHED_SHOWN);
    return running.concat(done);
  }

  function moves(ui, migrations, now) {
    const { h } = ui;
    const list = ordered(migrations || []);
    if (!list.length) return h("p", { class: "muted", id: "moves-none" }, "No move has run.");
    const rows = list.map((m) => {
      const [lo, hi] = m.slots;
      const started = millis(m.started_at);
      const finished = millis(m.finished_at);
      const took = started === null ? "" : age((finished === null ? now : finished) - started);
      const cls = m.state === "running" ? "pill" : m.state === "done" ? "ok" : "error";
      return h("tr", { "data-move": m.id, "data-state": m.state },
        h("td", { class: "mono" }, m.id),
        h("td", { class: "mono" }, `${rangeText(lo, hi)} (${count(lo, hi)})`),
        h("td", {}, `${m.from} → ${m.to}`),
        h("td", {}, h("span", { class: cls }, m.state), m.reason ? ` (${m.reason})` : ""),
        h("td", {}, m.state === "running" ? `running for ${took}` : `took ${took}`),
        h("td", { class: "hide-narrow muted" }, started === null ? "" : new Date(started).toLocaleString()));
    });
    return h("div", { class: "scroll" }, h("table", { id: "moves" },
      h("tr", {}, h("th", {}, "move"), h("th", {}, "slots"), h("th", {}, "from → to"), h("th", {}, "state"),
        h("th", {}, "age"), h("th", { class: "hide-narrow" }, "started")), rows));
  }

  function draw(ui, body, shards, info) {
    const { h } = ui;
    const noMap = !shards.map_epoch;
    body.replaceChildren(
      h("div", { class: "card" }, summary(ui, shards, info)),
      h("div", { class: "card", id: "slot-map" }, h("h2", {}, "Slots"),
        noMap ? h("p", { class: "muted", id: "no-map" }, "No slot map yet: CLUSTER_CREATE makes one (docs/cluster.md).")
          : [slotBar(ui, shards.shards), legend(ui, shards.shards)]),
      h("div", { class: "grid", id: "groups" }, shards.shards.map((g, i) => groupCard(ui, g, i))),
      h("div", { class: "card" }, h("h2", {}, "Moves"), moves(ui, shards.migrations, Date.now())));
  }

  return async function clusterView(main, ui) {
    const { h, api, banner, every } = ui;
    const body = h("div", { id: "cluster" });
    const load = async () => {
      const shards = (await api("GET", "/cluster/shards")).json;
      const info = (await api("GET", "/cluster/info")).json;
      return { shards, info };
    };
    let first;
    try {
      first = await load();
    } catch (e) {
      if (e.problem && e.problem.details && e.problem.details.cluster === false) {
        main.replaceChildren(h("h1", { id: "view-title" }, "Cluster"),
          h("p", { class: "muted", id: "not-cluster" }, "This server is not a cluster member."));
        return;
      }
      throw e;
    }
    main.replaceChildren(h("h1", { id: "view-title" }, "Cluster"),
      h("p", { class: "muted" }, "As this member's copy of the map shows it; refreshed every 2 s."), body);
    draw(ui, body, first.shards, first.info);
    every(EVERY_MS, async () => {
      try {
        const { shards, info } = await load();
        banner("");
        draw(ui, body, shards, info);
      } catch (e) { banner("cluster: " + e.message); }
    });
  };
})();
