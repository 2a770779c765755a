// smdb console: the migration view, `#/migrate/{machine}?from=&to=` (docs/http.md, "Console").
// MIGRATE_INSTANCES over `POST /machines/{m}/migrate`: pick two stored versions, map each state
// of the old one that the new one lacks (or skip it), run a dry run, and only then migrate,
// a bounded call at a time, each resuming from the last one's cursor.
// Loaded before app.js, which calls window.smdbMigrateView(main, machine, query, ui) with its
// helpers; like app.js it builds the DOM with createElement/textContent only.
"use strict";

window.smdbMigrateView = (() => {
  // Instances examined per call (the server allows 1..=10000).
  const LIMIT_DEFAULT = 1000;

  const sum = (counts) => Object.values(counts || {}).reduce((a, n) => a + n, 0);
  const add = (into, counts) => {
    for (const [k, n] of Object.entries(counts || {})) into[k] = (into[k] || 0) + n;
  };
  const describe = (counts) => {
    const parts = Object.entries(counts).filter(([, n]) => n > 0).map(([k, n]) => `${k}: ${n}`);
    return parts.length ? parts.join(", ") : "none";
  };
  const problem = (e) => (e.problem && e.problem.code ? e.problem.code + ": " : "") + e.message;

  // The default pair: the newest version as the target, the one before it (or `from=`) as the source.
  function versionsOf(versions, query) {
    const want = (name) => {
      const v = Number(query.get(name));
      return versions.includes(v) ? v : null;
    };
    const to = want("to") || versions[versions.length - 1];
    let from = want("from");
    if (from === null || from === to) from = [...versions].reverse().find((v) => v !== to);
    return { from, to };
  }

  return async function migrateView(main, machine, query, ui) {
    const { h, api, banner, enc } = ui;
    const listed = (await api("GET", "/machines")).json.machines.find((m) => m.machine === machine);
    if (!listed) throw new Error(`No machine ${machine}.`);
    const versions = listed.versions;
    const title = h("h1", { id: "view-title" }, `Migrate ${machine}`);
    const back = h("p", {}, h("a", { href: `#/machine/${enc(machine)}/${versions[versions.length - 1]}` }, `← ${machine}`));
    if (!ui.isAdmin()) {
      main.replaceChildren(title, back, h("p", { class: "muted", id: "migrate-needs-admin" },
        "Migrating instances needs a token with the admin scope."));
      return;
    }
    if (versions.length < 2) {
      main.replaceChildren(title, back, h("p", { class: "muted", id: "migrate-one-version" },
        `${machine} has one version: put another (PUT /machines/${machine}/versions/{v}) to migrate to.`));
      return;
    }
    const defs = new Map();
    const definition = async (v) => {
      if (!defs.has(v)) defs.set(v, (await api("GET", `/machines/${enc(machine)}/versions/${v}`)).json.definition);
      return defs.get(v);
    };
    const picked = versionsOf(versions, query);
    const versionSelect = (id, chosen) => h("select", { id },
      versions.map((v) => h("option", { value: v, selected: v === chosen }, "v" + v)));
    const fromSel = versionSelect("migrate-from", picked.from);
    const toSel = versionSelect("migrate-to", picked.to);
    const onlySel = h("select", { id: "migrate-only-state" });
    const limitIn = h("input", { id: "migrate-limit", type: "number", min: 1, max: 10000, value: LIMIT_DEFAULT });
    const mapping = h("div", { id: "migrate-mapping" });
    const dryBtn = h("button", { type: "button", id: "migrate-dry-run", class: "secondary" }, "Dry run");
    const runBtn = h("button", { type: "button", id: "migrate-run", disabled: true }, "Migrate");
    const stopBtn = h("button", { type: "button", id: "migrate-stop", class: "secondary", hidden: true }, "Stop");
    const dryOut = h("div", { id: "migrate-dry" }, h("p", { class: "muted" }, "Run a dry run to see what would move; migrating is enabled after it."));
    const progress = h("div", { id: "migrate-progress", hidden: true });
    const summary = h("p", { id: "migrate-summary" });

    // What the plan is now; a dry run checks exactly this, and any change needs another.
    let selects = [];
    let checked = null;
    let cursor = null;
    let running = false;
    let total = null; // the counts so far, kept over a stop and its resume
    const plan = () => {
      const states = {};
      for (const s of selects) if (s.value) states[s.dataset.state] = s.value;
      const body = { from_version: Number(fromSel.value), to_version: Number(toSel.value), states };
      if (onlySel.value) body.state = onlySel.value;
      return body;
    };
    const reset = () => {
      checked = null;
      cursor = null;
      runBtn.disabled = true;
      runBtn.textContent = "Migrate";
      dryOut.replaceChildren(h("p", { class: "muted" }, "The plan changed: run the dry run again."));
      progress.hidden = true;
      summary.textContent = "";
    };

    // The mapping rows: each state of `from` that `to` lacks, to one of `to`'s states or skipped.
    const build = async () => {
      const [from, to] = [await definition(Number(fromSel.value)), await definition(Number(toSel.value))];
      const lacking = from.states.filter((s) => !to.states.includes(s));
      const kept = from.states.filter((s) => to.states.includes(s));
      selects = lacking.map((s) => h("select", { "data-state": s, class: "migrate-target" },
        h("option", { value: "" }, "skip (stays on v" + fromSel.value + ")"),
        to.states.map((t) => h("option", { value: t }, t))));
      onlySel.replaceChildren(h("option", { value: "" }, "every state"),
        from.states.map((s) => h("option", { value: s }, s)));
      for (const s of selects) s.addEventListener("change", reset);
      mapping.replaceChildren(
        h("p", { class: "muted" }, kept.length ? `Kept by name: ${kept.join(", ")}.` : "No state is kept by name."),
        lacking.length
          ? h("table", { id: "migrate-map" }, h("tr", {}, h("th", {}, `state of v${fromSel.value}`), h("th", {}, `becomes, in v${toSel.value}`)),
            lacking.map((s, i) => h("tr", { "data-state": s }, h("td", {}, s), h("td", {}, selects[i]))))
          : h("p", { class: "muted" }, `v${toSel.value} has every state of v${fromSel.value}.`));
      reset();
      dryOut.replaceChildren(h("p", { class: "muted" }, "Run a dry run to see what would move; migrating is enabled after it."));
    };

    const countsTable = (id, head, counts, key, cell) => h("table", { id },
      h("tr", {}, h("th", {}, head[0]), h("th", {}, head[1]), head[2] ? h("th", {}, head[2]) : null),
      Object.entries(counts).map(([k, n]) => h("tr", { [key]: k }, h("td", {}, k), h("td", { class: "count" }, String(n)), cell ? h("td", {}, cell(k)) : null)));

    const dryRun = async () => {
      banner("");
      const body = plan();
      try {
        const { json } = await api("POST", `/machines/${enc(machine)}/migrate`, Object.assign({ dry_run: true }, body));
        const targets = Object.fromEntries(selects.map((s) => [s.dataset.state, s.value]));
        const would = sum(json.would_migrate);
        dryOut.replaceChildren(
          h("h2", {}, "Dry run"),
          h("p", { id: "migrate-dry-total" }, `${would} of ${json.examined} examined would move to v${body.to_version}; ${sum(json.skipped)} would be skipped.`),
          Object.keys(json.would_migrate).length
            ? countsTable("migrate-would", ["state", "would migrate", "to"], json.would_migrate, "data-state", (s) => targets[s] || s)
            : null,
          Object.keys(json.skipped).length
            ? countsTable("migrate-skipped", ["skipped because", "instances"], json.skipped, "data-reason")
            : null);
        checked = JSON.stringify(body);
        cursor = null;
        runBtn.disabled = would === 0;
        runBtn.textContent = would ? `Migrate ${would} instance${would === 1 ? "" : "s"}` : "Nothing to migrate";
        progress.hidden = true;
        summary.textContent = "";
      } catch (e) {
        banner("Dry run: " + problem(e));
      }
    };

    // Drives the op by cursor until it answers none, the user stops, or the view is left.
    const run = async () => {
      const body = plan();
      if (JSON.stringify(body) !== checked) return reset();
      const limit = Math.min(10000, Math.max(1, Number(limitIn.value) || LIMIT_DEFAULT));
      const ctrl = new AbortController();
      ui.onLeave(ctrl);
      if (!cursor) total = { migrated: 0, examined: 0, calls: 0, skipped: {}, remaining: null };
      const cells = {
        migrated: h("dd", { id: "migrate-migrated" }, String(total.migrated)),
        skipped: h("dd", { id: "migrate-skipped-so-far" }, describe(total.skipped)),
        examined: h("dd", { id: "migrate-examined" }, String(total.examined)),
        remaining: h("dd", { id: "migrate-remaining" }, total.remaining === null ? "…" : String(total.remaining)),
        calls: h("dd", { id: "migrate-calls" }, String(total.calls)),
      };
      const bar = h("progress", { max: 1, value: 0 });
      progress.replaceChildren(h("h2", {}, "Migrating"), bar, h("dl", { class: "kv" },
        Object.entries(cells).map(([k, dd]) => [h("dt", {}, k), dd])));
      progress.hidden = false;
      summary.textContent = "";
      let failed = null;
      running = true;
      const inputs = [fromSel, toSel, onlySel, limitIn, dryBtn, runBtn, ...selects];
      inputs.forEach((el) => { el.disabled = true; });
      stopBtn.hidden = false;
      stopBtn.disabled = false;
      stopBtn.onclick = () => { ctrl.abort(); stopBtn.disabled = true; };
      banner("");
      do {
        try {
          const call = Object.assign({ limit }, body, cursor ? { cursor } : {});
          const { json } = await api("POST", `/machines/${enc(machine)}/migrate`, call);
          cursor = json.cursor;
          total.calls += 1;
          total.migrated += json.migrated;
          total.examined += json.examined;
          total.remaining = json.remaining;
          add(total.skipped, json.skipped);
        } catch (e) {
          failed = e;
          break;
        }
        cells.migrated.textContent = String(total.migrated);
        cells.skipped.textContent = describe(total.skipped);
        cells.examined.textContent = String(total.examined);
        cells.remaining.textContent = String(cursor ? total.remaining : 0);
        cells.calls.textContent = String(total.calls);
        bar.value = cursor ? total.examined / Math.max(1, total.examined + total.remaining) : 1;
      } while (cursor && !ctrl.signal.aborted);
      running = false;
      stopBtn.hidden = true;
      inputs.forEach((el) => { el.disabled = false; });
      const skipped = sum(total.skipped);
      const done = `migrated ${total.migrated} to v${body.to_version}, skipped ${skipped}` +
        (skipped ? ` (${describe(total.skipped)})` : "") + `, examined ${total.examined} in ${total.calls} call${total.calls === 1 ? "" : "s"}`;
      if (failed && progress.isConnected) banner("Migrate: " + problem(failed));
      if (cursor) {
        // Stopped or failed part way: the cursor is kept, so it resumes where it stopped.
        summary.className = failed ? "error" : "muted";
        summary.textContent = `${failed ? "Failed" : "Stopped"} after: ${done}. About ${total.remaining} left.`;
        runBtn.textContent = "Resume";
      } else {
        summary.className = "ok";
        summary.textContent = `Done: ${done}.`;
        runBtn.disabled = true;
        runBtn.textContent = "Migrated";
        checked = null;
      }
    };

    dryBtn.addEventListener("click", dryRun);
    runBtn.addEventListener("click", () => { if (!running) run(); });
    for (const el of [fromSel, toSel]) el.addEventListener("change", () => build().catch((e) => banner(problem(e))));
    onlySel.addEventListener("change", reset);
    await build();
    main.replaceChildren(
      title, back,
      h("p", { class: "muted" }, "Moves instances of one version to another, keeping their context and history. " +
        "A state the new version lacks is mapped to one of its states, or skipped (those instances stay where they are)."),
      h("div", { class: "card", id: "migrate-form" },
        h("div", { class: "row" }, h("label", {}, "from version", fromSel), h("label", {}, "to version", toSel),
          h("label", {}, "only instances in", onlySel), h("label", {}, "instances per call", limitIn)),
        h("h2", {}, "States"), mapping,
        h("p", { class: "row" }, dryBtn, " ", runBtn, " ", stopBtn)),
      h("div", { class: "card", id: "migrate-results" }, dryOut, progress, summary));
  };
})();
