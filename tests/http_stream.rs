//! Event streams over HTTP against the real binary (docs/http.md, "Event streams"): delivery
//! in order with cursors as ids, resume by `Last-Event-ID` with no gap and no duplicate,
//! instance streams, a lagging reader, and a reload that removes the stream's token.

mod common;

use std::time::{Duration, Instant};

use common::http::{Event, Http, Sse};
use common::tokens::{http_required, token as token_entry, ALL_SCOPES};
use common::Server;
use serde_json::json;

fn stream(s: &Server, path: &str, headers: &[(&str, &str)]) -> Sse {
    let h = Http::connect(s.http_addr.unwrap());
    h.stream(path, headers)
        .unwrap_or_else(|r| panic!("{} {}", r.status, r.text()))
}

fn create(c: &mut common::Client, id: &str) {
    common::create_order(c, id, 0);
}

/// The next event that is not `subscribed`.
fn next_event(sse: &mut Sse) -> Event {
    loop {
        let ev = sse.next().expect("an event");
        if ev.event != "subscribed" {
            return ev;
        }
    }
}

#[test]
fn events_arrive_in_order_and_resume_by_last_event_id_without_gap_or_duplicate() {
    let (s, _d) = Server::start("[http]\nenabled = true\n[shards]\ncount = 2");
    let mut c = s.order_client();
    let mut sse = stream(&s, "/stream?machines=order&events=pay,cancel", &[]);
    let first = sse.next().unwrap();
    assert_eq!(first.event, "subscribed");
    assert!(first.id.as_deref().unwrap().starts_with("c1-"));
    let ids: Vec<String> = (0..10).map(|i| format!("i{i}")).collect();
    for id in &ids {
        create(&mut c, id);
        c.call(
            "APPLY_EVENT",
            json!({"instance_id": id, "event": "pay", "payload": {"amount": 0}}),
        )
        .unwrap();
    }
    let mut seen = Vec::new();
    let mut last_id = String::new();
    for _ in 0..6 {
        let ev = next_event(&mut sse);
        let v = ev.json();
        assert_eq!(v["type"], "event");
        assert_eq!(
            ev.id.as_deref(),
            v["cursor"].as_str(),
            "the id is the cursor"
        );
        assert_eq!(v["event"], "pay");
        seen.push(v["instance_id"].as_str().unwrap().to_string());
        last_id = ev.id.unwrap();
    }
    drop(sse);
    // Four were not read; four more are applied while no stream is open.
    for id in &ids[..4] {
        c.call("APPLY_EVENT", json!({"instance_id": id, "event": "cancel"}))
            .unwrap();
    }
    let mut again = stream(
        &s,
        "/stream?machines=order&events=pay,cancel",
        &[("Last-Event-ID", &last_id)],
    );
    let mut rest = Vec::new();
    for _ in 0..8 {
        let v = next_event(&mut again).json();
        rest.push((
            v["instance_id"].as_str().unwrap().to_string(),
            v["event"].as_str().unwrap().to_string(),
        ));
    }
    let mut pays: Vec<String> = seen.clone();
    pays.extend(
        rest.iter()
            .filter(|(_, e)| e == "pay")
            .map(|(i, _)| i.clone()),
    );
    pays.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(pays, want, "every pay exactly once across the two streams");
    let cancels: Vec<&String> = rest
        .iter()
        .filter(|(_, e)| e == "cancel")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(cancels.len(), 4);
    // `from_cursor=0` replays everything retained; Last-Event-ID wins over it.
    let mut all = stream(&s, "/stream?machines=order&events=pay&from_cursor=0", &[]);
    let replayed: Vec<String> = (0..10)
        .map(|_| {
            next_event(&mut all).json()["instance_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        replayed
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        10
    );
}

#[test]
fn an_instance_stream_resumes_from_its_shards_position() {
    let (s, _d) = Server::start("[http]\nenabled = true\n[shards]\ncount = 2");
    let mut c = s.order_client();
    create(&mut c, "one");
    create(&mut c, "other");
    let mut sse = stream(&s, "/stream?instance=one&include_context=true", &[]);
    sse.next().unwrap();
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "other", "event": "pay", "payload": {"amount": 0}}),
    )
    .unwrap();
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "one", "event": "pay", "payload": {"amount": 0}}),
    )
    .unwrap();
    let ev = next_event(&mut sse);
    let v = ev.json();
    assert_eq!(
        (v["instance_id"].clone(), v["to_state"].clone()),
        (json!("one"), json!("paid"))
    );
    assert_eq!(v["context"]["amount"], 0, "include_context");
    drop(sse);
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "one", "event": "ship"}),
    )
    .unwrap();
    let mut again = stream(
        &s,
        "/stream?instance=one",
        &[("Last-Event-ID", ev.id.as_deref().unwrap())],
    );
    let v = next_event(&mut again).json();
    assert_eq!(
        (v["event"].clone(), v["to_state"].clone()),
        (json!("ship"), json!("shipped"))
    );
    let bad = Http::connect(s.http_addr.unwrap()).stream("/stream?from_cursor=c9-x", &[]);
    let r = bad.err().expect("a bad cursor is refused");
    r.assert_error(400, "BAD_REQUEST");
    assert!(r.text().len() < 2000);
}

/// A reader that stops reading is told it lagged (once it reads again) and the stream ends.
#[test]
fn a_stream_that_falls_behind_gets_lagged_then_ends() {
    let (s, _d) = Server::start("[http]\nenabled = true\n[subscriptions]\nqueue_max = 8");
    let mut c = s.order_client();
    create(&mut c, "busy");
    let mut sse = stream(&s, "/stream?machines=order", &[]);
    sse.next().unwrap();
    let pad = "p".repeat(8 * 1024);
    // Far more than socket buffers hold, while this test reads nothing.
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "busy", "event": "pay", "payload": {"amount": 0}}),
    )
    .unwrap();
    for i in 0..1500 {
        let payload = json!({"pad": pad, "i": i});
        c.call(
            "APPLY_EVENT",
            json!({"instance_id": "busy", "event": "touch", "payload": payload}),
        )
        .unwrap();
    }
    let mut lagged = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(ev) = sse.next() {
        if ev.event == "lagged" {
            lagged = Some(ev);
            break;
        }
        assert!(Instant::now() < deadline);
    }
    let lagged = lagged.expect("an `event: lagged`");
    let v = lagged.json();
    assert_eq!(v["type"], "subscription_lagged");
    assert!(v["resume_cursor"].as_str().unwrap().starts_with("c1-"));
    assert!(sse.next().is_none(), "the stream ends after `lagged`");
}

#[test]
fn a_reload_that_removes_the_token_ends_its_streams() {
    let token = "stream-token-3f";
    let auth = |with: bool| {
        let mut tokens = vec![token_entry("admin", "admin-x", ALL_SCOPES)];
        if with {
            tokens.push(token_entry("dash", token, &["read"]));
        }
        http_required(&tokens)
    };
    let (mut s, _d) = Server::start(&auth(true));
    let h = Http::connect(s.http_addr.unwrap()).with_token(token);
    let mut sse = h
        .stream("/stream", &[])
        .unwrap_or_else(|r| panic!("{}", r.text()));
    assert_eq!(sse.next().unwrap().event, "subscribed");
    s.rewrite_config(&auth(false));
    s.signal(libc::SIGHUP);
    s.wait_for_log("SIGHUP: reloaded", 1);
    let started = Instant::now();
    assert!(sse.next().is_none(), "the stream ended");
    assert!(started.elapsed() < Duration::from_secs(5));
    let refused = Http::connect(s.http_addr.unwrap())
        .with_token(token)
        .stream("/stream", &[]);
    assert_eq!(refused.err().unwrap().status, 401);
}

/// A quiet stream gets a comment every 15 s; SIGTERM ends it and the server still exits 0.
#[test]
fn quiet_streams_get_keep_alive_comments_and_end_at_the_drain() {
    let (mut s, _d) = Server::start("[http]\nenabled = true");
    let mut sse = stream(&s, "/stream", &[]);
    assert_eq!(sse.next().unwrap().event, "subscribed");
    let started = Instant::now();
    let block = sse.next_block().expect("a comment");
    assert_eq!(block, ": keep-alive");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(14) && took < Duration::from_secs(20),
        "{took:?}"
    );
    let status = s.terminate();
    assert!(status.success(), "{status:?}");
    assert!(sse.next().is_none(), "the drain ended the stream");
}

/// A client that never reads again: once its subscription lagged and its socket took nothing
/// for `LAGGED_WRITE_GRACE`, the server closes the connection (its queue goes with it).
#[test]
fn a_reader_that_never_reads_is_closed_once_it_lagged() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let (s, _d) = Server::start("[http]\nenabled = true\n[subscriptions]\nqueue_max = 8");
    let mut c = s.order_client();
    create(&mut c, "busy");
    c.call(
        "APPLY_EVENT",
        json!({"instance_id": "busy", "event": "pay", "payload": {"amount": 0}}),
    )
    .unwrap();
    let mut stalled = std::net::TcpStream::connect(s.http_addr.unwrap()).unwrap();
    let small: libc::c_int = 4096;
    // SAFETY: an int socket option on a valid socket.
    unsafe {
        libc::setsockopt(
            stalled.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let req = format!(
        "GET /stream HTTP/1.1\r\nHost: {}\r\n\r\n",
        s.http_addr.unwrap()
    );
    stalled.write_all(req.as_bytes()).unwrap();
    let open = |c: &mut common::Client| {
        c.call("INFO", json!({})).unwrap()["connections"]["active"]
            .as_u64()
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while open(&mut c) < 2 {
        assert!(Instant::now() < deadline, "the stream never opened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pad = "p".repeat(16 * 1024);
    for i in 0..400 {
        c.call(
            "APPLY_EVENT",
            json!({"instance_id": "busy", "event": "touch", "payload": {"pad": pad, "i": i}}),
        )
        .unwrap();
    }
    let lagged_by = Instant::now();
    let deadline = lagged_by + Duration::from_secs(40);
    while open(&mut c) > 1 {
        assert!(
            Instant::now() < deadline,
            "the stalled stream is still open"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        lagged_by.elapsed() < Duration::from_secs(31),
        "{:?}",
        lagged_by.elapsed()
    );
    drop(stalled);
}
