//! The web console in a real headless Chromium (docs/http.md, "Console"), driven over the
//! DevTools protocol against the real binary: the diagram with a node per state and the live
//! counts, an instance's page with its state and history, an event applied from the form, the
//! live feed showing another client's event within 2 s, a read-only token seeing no write
//! control, and no request to any other origin. Screenshots go to `target/tmp/console/`
//! (`docs/console/update-screenshots.sh` copies them into docs/).
//!
//! Without Chromium this test fails with the line that installs it: it never passes silently.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::cdp::Browser;
use common::http::Http;
use common::tokens::{http_required, token, ALL_SCOPES};
use common::{lifecycle, put_order_machine, Client, Server};
use serde_json::json;

const ADMIN: &str = "console-admin-0c4e";
const READER: &str = "console-reader-9b21";
const WAIT: Duration = Duration::from_secs(15);

fn config() -> String {
    http_required(&[
        token("admin", ADMIN, ALL_SCOPES),
        token("dashboard", READER, &["read"]),
    ])
}

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console")
}

fn admin_client(s: &Server) -> Client {
    let mut c = s.client();
    c.call("AUTH", json!({"method": "bearer", "token": ADMIN}))
        .unwrap();
    c
}

/// A few orders in every state but shipped.
fn fill(c: &mut Client) {
    put_order_machine(c);
    for (id, total) in [("o1", 10), ("o2", 10), ("o3", 10), ("o4", 10), ("o5", 10)] {
        c.call(
            "CREATE_INSTANCE",
            json!({"machine": "order", "version": 1, "id": id, "context": {"total": total}}),
        )
        .unwrap();
    }
    for id in ["o2", "o3"] {
        c.call(
            "APPLY_EVENT",
            json!({"instance_id": id, "event": "pay", "payload": {"amount": 10}}),
        )
        .unwrap();
    }
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "o3", "event": "touch", "payload": {"note": "gift wrap"}}),
    )
    .unwrap();
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "o4", "event": "cancel"}),
    )
    .unwrap();
}

/// A server with the console on (and Chromium found), its HTTP origin and an admin client.
fn console_server() -> (Server, common::TestDir, String, Client) {
    if let Err(e) = common::cdp::chromium() {
        panic!("the console's browser test needs Chromium: {e}");
    }
    let (s, d) = Server::start(&config());
    let origin = format!("http://{}", s.http_addr.expect("the HTTP listener"));
    let c = admin_client(&s);
    (s, d, origin, c)
}

fn sign_in(b: &mut Browser, origin: &str, token: &str) {
    b.navigate(&format!("{origin}/#/machines"));
    b.wait_for("!document.querySelector('#signin').hidden", WAIT);
    b.eval(&format!(
        "document.querySelector('#token').value = {}; document.querySelector('#signin-form').requestSubmit()",
        json!(token)
    ));
    b.wait_for(
        "document.querySelector('#view-title')?.textContent === 'Machines'",
        WAIT,
    );
}

#[test]
fn the_console_in_a_real_browser() {
    let (s, _d, origin, mut c) = console_server();
    fill(&mut c);
    let mut b = Browser::launch();
    sign_in(&mut b, &origin, ADMIN);
    b.screenshot(&shots().join("machines.png"));

    // The diagram: a node per state, each with the live count the server reports.
    b.navigate(&format!("{origin}/#/machine/order/1"));
    b.wait_for(
        "document.querySelectorAll('#diagram svg g.state').length === 4",
        WAIT,
    );
    let mut h = Http::connect(s.http_addr.unwrap()).with_token(ADMIN);
    let stats = h.get("/machines/order/stats").json()["states"].clone();
    assert_eq!(
        stats,
        json!({"new": 2, "paid": 2, "cancelled": 1, "shipped": 0})
    );
    for (state, n) in stats.as_object().unwrap() {
        let expr = format!(
            "document.querySelector('#diagram text.count[data-count-for=\"{state}\"]')?.textContent === '{n}'"
        );
        b.wait_for(&expr, WAIT);
    }
    // Counts move with the data (polled from the shards' counters).
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "o5", "event": "pay", "payload": {"amount": 10}}),
    )
    .unwrap();
    b.wait_for("document.querySelector('#diagram text.count[data-count-for=\"paid\"]')?.textContent === '3'", WAIT);
    b.screenshot(&shots().join("machine.png"));

    b.navigate(&format!("{origin}/#/instances?machine=order"));
    b.wait_for(
        "document.querySelectorAll('#instances tr').length === 6",
        WAIT,
    );
    b.screenshot(&shots().join("instances.png"));

    // An instance: its state (highlighted on the diagram) and its history.
    b.navigate(&format!("{origin}/#/instance/o3"));
    b.wait_for(
        "document.querySelector('#inst-state')?.textContent === 'paid'",
        WAIT,
    );
    let current =
        b.eval("document.querySelector('#diagram g.state.current')?.getAttribute('data-state')");
    assert_eq!(current, json!("paid"));
    let history = b.eval("[...document.querySelectorAll('#history li b')].map(e => e.textContent)");
    assert_eq!(history, json!(["pay", "touch"]));
    b.screenshot(&shots().join("instance.png"));

    // An event applied from the form moves the instance.
    let events = b.eval("[...document.querySelectorAll('#apply-event option')].map(o => o.value)");
    assert_eq!(
        events,
        json!(["ship", "cancel", "touch"]),
        "the events valid from `paid`"
    );
    b.eval("document.querySelector('#apply-event').value = 'ship'; document.querySelector('#apply-form').requestSubmit()");
    b.wait_for(
        "document.querySelector('#inst-state')?.textContent === 'shipped'",
        WAIT,
    );
    let over_rcp1 = c.call("GET_INSTANCE", json!({"id": "o3"})).unwrap();
    assert_eq!(over_rcp1["state"], "shipped");

    // The live feed shows another client's event within 2 s.
    b.navigate(&format!("{origin}/#/feed?machines=order"));
    b.wait_for(
        "document.querySelector('#feed-status')?.textContent === 'live'",
        WAIT,
    );
    std::thread::sleep(Duration::from_millis(500)); // the stream's subscription is registered
    let sent = Instant::now();
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "o1", "event": "cancel"}),
    )
    .unwrap();
    b.wait_for(
        "document.querySelector('#feed-rows tr[data-instance=\"o1\"]')",
        Duration::from_secs(2),
    );
    let took = sent.elapsed();
    assert!(took <= Duration::from_secs(2), "{took:?}");
    b.screenshot(&shots().join("feed.png"));

    b.navigate(&format!("{origin}/#/server"));
    b.wait_for("document.querySelector('#server-info dd') !== null", WAIT);
    b.screenshot(&shots().join("server.png"));

    // A read-only token sees no write control (and the server refuses its writes anyway).
    b.eval("document.querySelector('#who button').click()");
    sign_in(&mut b, &origin, READER);
    b.navigate(&format!("{origin}/#/instance/o2"));
    b.wait_for(
        "document.querySelector('#inst-state')?.textContent === 'paid'",
        WAIT,
    );
    let writes =
        "['#apply-form', '#delete', '#create-form'].filter(s => document.querySelector(s))";
    assert_eq!(b.eval(writes), json!([]));
    assert_eq!(
        b.eval("document.querySelector('#scopes').textContent"),
        json!("scopes: read")
    );
    b.navigate(&format!("{origin}/#/machine/order/1"));
    b.wait_for(
        "document.querySelectorAll('#diagram svg g.state').length === 4",
        WAIT,
    );
    assert_eq!(b.eval(writes), json!([]));
    b.screenshot(&shots().join("readonly.png"));

    // Nothing was asked of any other origin.
    let urls = b.requested_urls();
    assert!(
        urls.iter().any(|u| u.ends_with("/assets/app.js")),
        "{urls:?}"
    );
    let foreign: Vec<&String> = urls
        .iter()
        .filter(|u| !u.starts_with(&format!("{origin}/")) && u.as_str() != "about:blank")
        .collect();
    assert!(foreign.is_empty(), "requests to other origins: {foreign:?}");
    // The token never appeared in a URL.
    assert!(urls
        .iter()
        .all(|u| !u.contains(ADMIN) && !u.contains(READER)));
}

/// The instances page's search box: the declared indexes of the machine's latest version, a
/// value, and the FIND it runs (docs/queries.md); a machine without one says how to declare it.
#[test]
fn the_console_searches_a_declared_index() {
    let (_s, _d, origin, mut c) = console_server();
    put_order_machine(&mut c);
    let accounts = json!({"states": ["open"], "initial": "open", "transitions": [],
                          "indexes": ["ctx.customer", "ctx.total"]});
    c.call(
        "PUT_MACHINE",
        json!({"machine": "acct", "version": 1, "definition": accounts}),
    )
    .unwrap();
    for (id, customer, total) in [("a1", "c-9", 5), ("a2", "c-1", 7), ("a3", "c-9", 7)] {
        let ctx = json!({"customer": customer, "total": total});
        c.call(
            "CREATE_INSTANCE",
            json!({"machine": "acct", "version": 1, "id": id, "context": ctx}),
        )
        .unwrap();
    }
    let mut b = Browser::launch();
    sign_in(&mut b, &origin, ADMIN);
    b.navigate(&format!("{origin}/#/instances?machine=acct"));
    b.wait_for("document.querySelector('#search-index') !== null", WAIT);
    let offered =
        b.eval("[...document.querySelectorAll('#search-index option')].map(o => o.value)");
    assert_eq!(offered, json!(["ctx.customer", "ctx.total"]));
    let ids =
        "[...document.querySelectorAll('#instances tr td:first-child')].map(e => e.textContent)";
    b.eval("document.querySelector('#search-value').value = 'c-9'; document.querySelector('#search-form').requestSubmit()");
    b.wait_for("location.hash.includes('where.ctx.customer=c-9')", WAIT);
    b.wait_for(
        &format!("JSON.stringify({ids}) === '[\"a1\",\"a3\"]'"),
        WAIT,
    );
    // A number reads as a number.
    b.eval("document.querySelector('#search-index').value = 'ctx.total'; document.querySelector('#search-value').value = '7'; document.querySelector('#search-form').requestSubmit()");
    b.wait_for("location.hash.includes('where.ctx.total=7')", WAIT);
    b.wait_for(
        &format!("JSON.stringify({ids}) === '[\"a2\",\"a3\"]'"),
        WAIT,
    );
    b.screenshot(&shots().join("search.png"));
    b.navigate(&format!("{origin}/#/instances?machine=order"));
    b.wait_for("document.querySelector('#search-none') !== null", WAIT);
}

/// Picks `target` for `state` in the migration view's mapping (as a user's change does).
fn map_state(b: &mut Browser, state: &str, target: &str) {
    b.eval(&format!(
        "{{ const s = document.querySelector('#migrate-map select[data-state=\"{state}\"]'); \
         s.value = '{target}'; s.dispatchEvent(new Event('change')); }}"
    ));
}

/// The migration view (`#/migrate/job`): a mapping row for each state of v1 that v2 lacks, the
/// migrate button disabled until a dry run (and again once the plan changes), the dry run's
/// counts, then the migration driven by cursor with its counts and summary; over RCP1 the
/// instances moved and the skipped ones stayed.
#[test]
fn the_console_migrates_instances_after_a_dry_run() {
    let (_s, _d, origin, mut c) = console_server();
    lifecycle::put_job(&mut c, json!([]));
    // 4 new, 3 open, 2 paused, 1 done.
    lifecycle::place(
        &mut c,
        &[
            ("n", 4, &[]),
            ("o", 3, &["go"]),
            ("p", 2, &["go", "pause"]),
            ("d", 1, &["finish"]),
        ],
    );
    let mut b = Browser::launch();
    sign_in(&mut b, &origin, ADMIN);
    b.navigate(&format!("{origin}/#/machine/job/2"));
    b.wait_for("document.querySelector('#migrate-link') !== null", WAIT);
    b.eval("document.querySelector('#migrate-link').click()");
    b.wait_for("document.querySelector('#migrate-map') !== null", WAIT);
    assert_eq!(
        b.eval("[document.querySelector('#migrate-from').value, document.querySelector('#migrate-to').value]"),
        json!(["1", "2"])
    );
    let rows =
        "[...document.querySelectorAll('#migrate-map tr[data-state]')].map(r => r.dataset.state)";
    assert_eq!(b.eval(rows), json!(["open", "paused"]));
    let run_disabled = "document.querySelector('#migrate-run').disabled";
    assert_eq!(
        b.eval(run_disabled),
        json!(true),
        "no migrating before a dry run"
    );

    // The server's refusal (the same version twice) shows in the banner.
    let pick_to = |v: u32| {
        format!(
            "{{ const s = document.querySelector('#migrate-to'); s.value = '{v}'; \
             s.dispatchEvent(new Event('change')); }}"
        )
    };
    b.eval(&pick_to(1));
    b.wait_for("document.querySelector('#migrate-map') === null", WAIT);
    b.eval("document.querySelector('#migrate-dry-run').click()");
    b.wait_for(
        "!document.querySelector('#banner').hidden && \
         document.querySelector('#banner').textContent.includes('BAD_REQUEST')",
        WAIT,
    );
    assert_eq!(b.eval(run_disabled), json!(true));
    b.eval(&pick_to(2));
    b.wait_for("document.querySelector('#migrate-map') !== null", WAIT);

    // open → active; paused stays skipped. 4 examined per call, so it takes several.
    map_state(&mut b, "open", "active");
    b.eval("document.querySelector('#migrate-limit').value = '4'");
    b.eval("document.querySelector('#migrate-dry-run').click()");
    b.wait_for("document.querySelector('#migrate-would') !== null", WAIT);
    let counts = |b: &mut Browser, table: &str, key: &str| {
        b.eval(&format!(
            "Object.fromEntries([...document.querySelectorAll('#{table} tr[{key}]')]\
             .map(r => [r.getAttribute('{key}'), r.querySelector('td.count').textContent]))"
        ))
    };
    assert_eq!(
        counts(&mut b, "migrate-would", "data-state"),
        json!({"new": "4", "open": "3", "done": "1"})
    );
    assert_eq!(
        counts(&mut b, "migrate-skipped", "data-reason"),
        json!({"no_state": "2"})
    );
    assert_eq!(b.eval(run_disabled), json!(false));
    assert_eq!(
        c.call("GET_INSTANCE", json!({"id": "o00"})).unwrap()["version"],
        1,
        "a dry run moves nothing"
    );
    b.screenshot(&shots().join("migrate-dry-run.png"));

    // A changed plan needs another dry run.
    map_state(&mut b, "paused", "done");
    assert_eq!(b.eval(run_disabled), json!(true));
    map_state(&mut b, "paused", "");
    assert_eq!(b.eval(run_disabled), json!(true));
    b.eval("document.querySelector('#migrate-dry-run').click()");
    b.wait_for(&format!("!{run_disabled}"), WAIT);

    b.eval("document.querySelector('#migrate-run').click()");
    b.wait_for(
        "document.querySelector('#migrate-summary')?.textContent.startsWith('Done')",
        WAIT,
    );
    let text =
        |b: &mut Browser, id: &str| b.eval(&format!("document.querySelector('#{id}').textContent"));
    assert_eq!(text(&mut b, "migrate-migrated"), json!("8"));
    assert_eq!(text(&mut b, "migrate-skipped-so-far"), json!("no_state: 2"));
    assert_eq!(text(&mut b, "migrate-examined"), json!("10"));
    assert_eq!(text(&mut b, "migrate-remaining"), json!("0"));
    let calls: u64 = text(&mut b, "migrate-calls")
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(calls >= 3, "{calls} calls of 4 for 10 instances");
    assert_eq!(
        b.eval(run_disabled),
        json!(true),
        "done: nothing left to run"
    );
    b.screenshot(&shots().join("migrate.png"));

    // Over the wire protocol: moved (and renamed), or skipped and left on v1.
    let mut at = |id: &str| lifecycle::version_state(&mut c, id);
    for i in 0..4 {
        assert_eq!(at(&format!("n{i:02}")), (2, "new".into()));
    }
    for i in 0..3 {
        assert_eq!(at(&format!("o{i:02}")), (2, "active".into()));
    }
    assert_eq!(at("d00"), (2, "done".into()));
    for i in 0..2 {
        assert_eq!(at(&format!("p{i:02}")), (1, "paused".into()));
    }

    // A read-only token gets no migrate link and no controls.
    b.eval("document.querySelector('#who button').click()");
    sign_in(&mut b, &origin, READER);
    assert_eq!(
        b.eval("document.querySelector('.migrate-link')"),
        json!(null)
    );
    b.navigate(&format!("{origin}/#/migrate/job"));
    b.wait_for(
        "document.querySelector('#migrate-needs-admin') !== null",
        WAIT,
    );
    assert_eq!(
        b.eval("document.querySelector('#migrate-run')"),
        json!(null)
    );
}
