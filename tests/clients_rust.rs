//! The `smdb-client` crate (blocking and tokio) against the real server binary: every op, a
//! pipelined burst of 10,000, a subscription that resumes across a SIGKILL and restart, retry
//! of a retryable refusal, clear errors on malformed and truncated frames from a fake server,
//! auth and mutual TLS, and the crate's two quick-start examples.

mod common;

// The examples' own code, run against a server this test starts.
#[path = "../clients/rust/examples/blocking_quickstart.rs"]
mod blocking_example;
#[path = "../clients/rust/examples/tokio_quickstart.rs"]
mod tokio_example;

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

use common::{order_definition, Server};
use serde_json::{json, Value};
use smdb::auth::table::{hex, sha256};
use smdb_client::asyncio;
use smdb_client::{
    ops, ApplyOptions, BatchMode, Client, ClientTlsOptions, ConnectOptions, CreateOptions, Error,
    ListFilter, RetryPolicy, WatchAllFilter, WatchOptions,
};

fn opts() -> ConnectOptions {
    ConnectOptions {
        client_name: "clients-rust-test".into(),
        ..ConnectOptions::default()
    }
}

fn connect(s: &Server) -> Client {
    Client::connect_with(&s.addr.to_string(), &opts()).expect("connect_with")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A machine whose one event loops on its state, merging the payload into the context.
fn tick_definition() -> Value {
    json!({"states": ["s"], "initial": "s", "transitions": [{"from": "s", "event": "tick", "to": "s"}]})
}

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("clients/testdata")
        .join(name)
}

#[test]
fn every_op_through_the_blocking_client() {
    let (s, _d) = Server::start("");
    let mut c = connect(&s);
    assert_eq!(c.hello_result().unwrap()["server_name"], "smdb");
    assert!(c.ping().unwrap().pong);
    let info = c.info().unwrap();
    assert!(info.shards >= 1 && info.role == "standalone", "{info:?}");
    let put = c.put_machine("order", 1, &order_definition()).unwrap();
    assert!(put.created && put.version == 1);
    assert!(
        !c.put_machine("order", 1, &order_definition())
            .unwrap()
            .created
    );
    let m = c.get_machine("order", None).unwrap();
    assert_eq!((m.version, m.checksum.as_str()), (1, put.checksum.as_str()));
    assert_eq!(c.list_machines().unwrap().machines[0].versions, [1]);

    let mut watcher = connect(&s);
    let w = watcher
        .watch_instance("o-1", &WatchOptions::default())
        .unwrap();
    let all = watcher.watch_all(&WatchAllFilter::default()).unwrap();

    let created = c.create_instance("o-1", 1, "o-1", &json!({})).unwrap_err();
    assert_eq!(created.code(), Some("MACHINE_NOT_FOUND"), "{created}");
    let created = c
        .create_instance("order", 1, "o-1", &json!({"total": 30}))
        .unwrap();
    assert_eq!((created.state.as_str(), created.applied), ("new", true));
    let keyed = CreateOptions {
        idempotency_key: Some("k1".into()),
    };
    c.create_instance_with("order", 1, "o-2", &json!({"total": 5}), &keyed)
        .unwrap();
    let again = c
        .create_instance_with("order", 1, "o-2", &json!({"total": 5}), &keyed)
        .unwrap();
    assert!(
        !again.applied,
        "the idempotency key answers the first result"
    );

    let e = c
        .apply_event("o-1", "pay", Some(&json!({"amount": 10})))
        .unwrap_err();
    assert_eq!(e.code(), Some("GUARD_FAILED"));
    assert!(!e.is_retryable());
    assert_eq!(e.details()["state"], "new");
    let paid = c
        .apply_event("o-1", "pay", Some(&json!({"amount": 30})))
        .unwrap();
    assert_eq!(
        (paid.from_state.as_str(), paid.to_state.as_str()),
        ("new", "paid")
    );
    let expect = ApplyOptions {
        expected_state: Some("new".into()),
        ..ApplyOptions::default()
    };
    let conflict = c
        .apply_event_with("o-1", "ship", None, &expect)
        .unwrap_err();
    assert_eq!(conflict.code(), Some("CONFLICT"));

    let got = c.get_instance("o-1").unwrap();
    assert_eq!(
        (got.state.as_str(), got.context["amount"].as_u64()),
        ("paid", Some(30))
    );
    let page = c
        .list_instances(&ListFilter {
            machine: Some("order".into()),
            ..ListFilter::default()
        })
        .unwrap();
    assert_eq!(page.instances.len(), 2);
    let h = c.history("o-1", None, None).unwrap();
    assert_eq!(h.events.len(), 1);
    assert_eq!(h.events[0].event, "pay");

    let b = c
        .batch(
            BatchMode::BestEffort,
            &[
                ops::get_instance("o-1").into(),
                ops::get_instance("nope").into(),
            ],
        )
        .unwrap();
    assert!(b.results[0].clone().into_result().is_ok());
    let missing = b.results[1].clone().into_result().unwrap_err();
    assert_eq!(missing.code(), Some("INSTANCE_NOT_FOUND"));
    let del = c.delete_instance("o-2").unwrap();
    assert!(del.deleted);

    // The watcher saw the one applied event on both subscriptions.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let p = watcher
            .next_push(Some(Duration::from_secs(10)))
            .unwrap()
            .expect("a push");
        seen.push(p["subscription_id"].clone());
    }
    seen.sort_by_key(|v| v.as_u64());
    assert_eq!(
        seen,
        [w.subscription_id.clone(), all.subscription_id.clone()]
    );
    assert!(watcher.unwatch(&w.subscription_id).unwrap().removed);

    // Replication ops: typed calls; a standalone server built before replication answers
    // UNKNOWN_OPERATION, one with replication reports its role.
    match c.replication_status() {
        Ok(st) => assert!(!st.role.is_empty()),
        Err(e) => assert_eq!(e.code(), Some("UNKNOWN_OPERATION"), "{e}"),
    }
    match c.promote() {
        Ok(v) => assert!(v.is_object()),
        Err(e) => assert!(e.code().is_some(), "{e}"),
    }
    c.bye().unwrap();
}

#[test]
fn every_op_through_the_async_client() {
    let (s, _d) = Server::start("");
    let addr = s.addr.to_string();
    rt().block_on(async {
        let c = asyncio::Client::connect(&addr, opts()).await.unwrap();
        assert_eq!(c.hello_result().unwrap().server_name, "smdb");
        assert!(c.ping().await.unwrap().pong);
        assert!(c.info().await.unwrap().shards >= 1);
        c.put_machine("order", 1, &order_definition())
            .await
            .unwrap();
        assert_eq!(c.get_machine("order", Some(1)).await.unwrap().version, 1);
        assert_eq!(c.list_machines().await.unwrap().machines.len(), 1);
        let mut sub = c.subscribe_all(WatchAllFilter::default()).await.unwrap();
        let none = CreateOptions::default();
        c.create_instance("order", 1, "a-1", &json!({"total": 1}), &none)
            .await
            .unwrap();
        let dup = c
            .create_instance("order", 1, "a-1", &json!({}), &none)
            .await;
        assert_eq!(dup.unwrap_err().code(), Some("INSTANCE_EXISTS"));
        let a = ApplyOptions::default();
        let paid = c
            .apply_event("a-1", "pay", Some(&json!({"amount": 1})), &a)
            .await
            .unwrap();
        assert_eq!(paid.to_state, "paid");
        let ev = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!((ev.instance_id.as_str(), ev.event.as_str()), ("a-1", "pay"));
        assert_eq!(sub.cursor().as_deref(), Some(ev.cursor.as_str()));
        assert_eq!(c.get_instance("a-1").await.unwrap().state, "paid");
        let page = c.list_instances(&ListFilter::default()).await.unwrap();
        assert_eq!(page.instances.len(), 1);
        assert_eq!(
            c.history("a-1", Some(1), Some(10))
                .await
                .unwrap()
                .events
                .len(),
            1
        );
        let b = c
            .batch(BatchMode::Atomic, &[ops::get_instance("a-1").into()])
            .await
            .unwrap();
        assert_eq!(b.results.len(), 1);
        assert!(c.delete_instance("a-1").await.unwrap().deleted);
        let w = c.call("WATCH_ALL", json!({})).await.unwrap();
        let un = c.unwatch(&w["subscription_id"]).await.unwrap();
        assert!(un.removed);
        match c.replication_status().await {
            Ok(st) => assert!(!st.role.is_empty()),
            Err(e) => assert_eq!(e.code(), Some("UNKNOWN_OPERATION"), "{e}"),
        }
        match c.promote().await {
            Ok(v) => assert!(v.is_object()),
            Err(e) => assert!(e.code().is_some(), "{e}"),
        }
        c.bye().await.unwrap();
        // BYE closed the connection; the next call opens a new one.
        assert!(c.ping().await.unwrap().pong);
    });
}

/// 10,000 APPLY_EVENTs pipelined on one connection: every answer arrives, in request order
/// (each carries its own payload back in the context, and offsets rise).
fn check_burst(results: Vec<Result<smdb_client::Applied, Error>>) {
    assert_eq!(results.len(), 10_000);
    let mut last = 0;
    for (i, r) in results.into_iter().enumerate() {
        let r = r.unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(r.context["n"], i, "answer {i} is for request {i}");
        assert!(r.wal_offset > last, "offsets rise in order");
        last = r.wal_offset;
    }
}

fn burst_requests() -> Vec<ops::Request<smdb_client::Applied>> {
    (0..10_000)
        .map(|i| {
            ops::apply_event(
                "p-1",
                "tick",
                Some(&json!({"n": i})),
                &ApplyOptions::default(),
            )
        })
        .collect()
}

#[test]
fn a_pipelined_burst_of_ten_thousand_answers_in_order() {
    let (s, _d) = Server::start("[storage]\nfsync = \"never\"\n");
    let mut c = connect(&s);
    c.put_machine("tick", 1, &tick_definition()).unwrap();
    c.create_instance("tick", 1, "p-1", &json!({})).unwrap();
    check_burst(c.pipeline(&burst_requests()).unwrap());

    let addr = s.addr.to_string();
    rt().block_on(async {
        let c = asyncio::Client::connect(&addr, opts()).await.unwrap();
        check_burst(c.pipeline(&burst_requests()).await.unwrap());
    });
}

/// A server on a fixed port (so a restart comes back at the same address).
fn fixed_port_server() -> (Server, common::TestDir) {
    Server::start(&common::fixed_port(""))
}

fn ticks(addr: &str, from: u64, to: u64) {
    let mut c = Client::connect_with(addr, &opts()).unwrap();
    for n in from..to {
        c.apply_event("r-1", "tick", Some(&json!({"n": n})))
            .unwrap();
    }
}

#[test]
fn a_subscription_resumes_across_a_server_restart_without_gap_or_duplicate() {
    let (mut s, _d) = fixed_port_server();
    let addr = s.addr.to_string();
    let mut c = connect(&s);
    c.put_machine("tick", 1, &tick_definition()).unwrap();
    c.create_instance("tick", 1, "r-1", &json!({})).unwrap();
    let mut sub = connect(&s)
        .subscribe_all(WatchAllFilter::default())
        .unwrap();
    let mut inst = connect(&s)
        .subscribe_instance("r-1", WatchOptions::default())
        .unwrap();
    ticks(&addr, 0, 5);
    let mut got = Vec::new();
    let mut got_inst = Vec::new();
    for _ in 0..3 {
        got.push(sub.next().unwrap().unwrap().payload["n"].as_u64().unwrap());
        got_inst.push(inst.next().unwrap().unwrap().payload["n"].as_u64().unwrap());
    }
    // Two events were sent but not taken; they die with the connection and come back from
    // the log.
    s.restart_after_kill();
    assert_eq!(s.addr.to_string(), addr);
    ticks(&addr, 5, 10);
    while got.len() < 10 {
        let e = sub
            .next_timeout(Duration::from_secs(20))
            .unwrap()
            .expect("an event");
        got.push(e.payload["n"].as_u64().unwrap());
    }
    while got_inst.len() < 10 {
        let e = inst
            .next_timeout(Duration::from_secs(20))
            .unwrap()
            .expect("an event");
        got_inst.push(e.payload["n"].as_u64().unwrap());
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    assert_eq!(got_inst, (0..10).collect::<Vec<_>>());
    assert!(sub.reconnects >= 1 && inst.reconnects >= 1);
    assert!(
        sub.next_timeout(Duration::from_millis(300))
            .unwrap()
            .is_none(),
        "no duplicate"
    );
}

#[test]
fn an_async_subscription_resumes_across_a_server_restart() {
    let (mut s, _d) = fixed_port_server();
    let addr = s.addr.to_string();
    let mut c = connect(&s);
    c.put_machine("tick", 1, &tick_definition()).unwrap();
    c.create_instance("tick", 1, "r-1", &json!({})).unwrap();
    let rt = rt();
    let client = rt
        .block_on(asyncio::Client::connect(&addr, opts()))
        .unwrap();
    let mut sub = rt
        .block_on(client.subscribe_all(WatchAllFilter::default()))
        .unwrap();
    ticks(&addr, 0, 5);
    let next = |sub: &mut asyncio::Subscription| {
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), sub.next()).await })
            .expect("an event in time")
            .expect("stream open")
            .expect("an event")
            .payload["n"]
            .as_u64()
            .unwrap()
    };
    let mut got: Vec<u64> = (0..3).map(|_| next(&mut sub)).collect();
    s.restart_after_kill();
    ticks(&addr, 5, 10);
    while got.len() < 10 {
        got.push(next(&mut sub));
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[test]
fn a_retryable_refusal_is_retried_with_backoff() {
    // One connection allowed: the second is refused CONNECTION_LIMIT (retryable) until the
    // first goes away.
    let (s, _d) = Server::start("[network]\nmax_connections = 1\n");
    let addr = s.addr.to_string();
    let first = connect(&s);
    let no_retry = ConnectOptions {
        retry: RetryPolicy::none(),
        ..opts()
    };
    let e = Client::connect_with(&addr, &no_retry)
        .err()
        .expect("refused");
    assert_eq!(e.code(), Some("CONNECTION_LIMIT"));
    assert!(e.is_retryable());
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(first);
    });
    let started = std::time::Instant::now();
    let mut c = Client::connect_with(&addr, &opts()).expect("retried until admitted");
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(c.ping().unwrap().pong);
    release.join().unwrap();
    drop(c);

    // A lost connection: a read is retried on a new connection; a write without an
    // idempotency key that finds its connection closed before it is written goes on a new
    // one, once (a write lost after sending is reported: retry.rs's unit tests and
    // tests/ha_clients.rs).
    let mut c = connect(&s);
    c.put_machine("tick", 1, &tick_definition()).unwrap();
    c.create_instance("tick", 1, "t-1", &json!({})).unwrap();
    c.stream().shutdown(std::net::Shutdown::Both).unwrap();
    c.apply_event("t-1", "tick", None).unwrap();
    assert_eq!(c.get_instance("t-1").unwrap().event_count, 1, "sent once");
    c.stream().shutdown(std::net::Shutdown::Both).unwrap();
    assert_eq!(
        c.get_instance("t-1").unwrap().id,
        "t-1",
        "a read is retried"
    );
    assert!(c.retries() >= 1 && c.connects() >= 3);
}

/// A fake server that answers every connection with `bytes`, then closes.
fn fake_server(bytes: Vec<u8>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            // Read the HELLO first, so closing sends FIN rather than RST.
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = std::io::Read::read(&mut s, &mut [0u8; 65536]);
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(std::net::Shutdown::Write);
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    addr
}

fn vector(name: &str) -> Vec<u8> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("frames.json")).unwrap()).unwrap();
    let f = v["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap();
    let h = f["hex"].as_str().unwrap();
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

/// A fake server speaking frames: answers HELLO with `{}` and each PING with a pong, holding
/// back the answer to the first PING for `hold`. Counts the connections it accepted.
fn slow_first_pong_server(
    hold: Duration,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    use smdb_client::frame::{decode_frame, encode_frame};
    use std::sync::atomic::{AtomicU32, Ordering};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(AtomicU32::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let (mut buf, mut pings) = (Vec::new(), 0);
            let mut chunk = [0u8; 4096];
            loop {
                while let Ok(Some((range, used))) = decode_frame(&buf, 1 << 20) {
                    let req: Value = serde_json::from_slice(&buf[range]).unwrap();
                    buf.drain(..used);
                    let result = match req["op"].as_str() {
                        Some("PING") => {
                            pings += 1;
                            if pings == 1 {
                                std::thread::sleep(hold);
                            }
                            json!({"pong": true})
                        }
                        _ => json!({}),
                    };
                    let resp = json!({"type": "response", "id": req["id"], "status": "ok",
                                      "result": result});
                    let mut out = Vec::new();
                    encode_frame(&serde_json::to_vec(&resp).unwrap(), &mut out);
                    if s.write_all(&out).is_err() {
                        return;
                    }
                }
                match std::io::Read::read(&mut s, &mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        }
    });
    (addr, accepted)
}

#[test]
fn an_async_call_times_out_and_its_late_answer_leaves_the_connection_working() {
    let (addr, accepted) = slow_first_pong_server(Duration::from_millis(800));
    let o = ConnectOptions {
        timeout: Some(Duration::from_millis(200)),
        retry: RetryPolicy::none(),
        ..opts()
    };
    rt().block_on(async {
        let c = asyncio::Client::connect(&addr, o).await.unwrap();
        let t = std::time::Instant::now();
        let e = c.ping().await.unwrap_err();
        let waited = t.elapsed();
        assert!(
            matches!(&e, Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut),
            "{e:?}"
        );
        assert!(e.to_string().contains("PING: no response within"), "{e}");
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_millis(700),
            "timed out after {waited:?}"
        );
        // The late pong arrives meanwhile: it is dropped, not taken for a protocol error
        // (which would end the connection), and the connection keeps serving.
        tokio::time::sleep(Duration::from_millis(900)).await;
        for _ in 0..2 {
            let pong = c.ping().await;
            assert!(pong.as_ref().is_ok_and(|p| p.pong), "{pong:?}");
        }
    });
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no reconnect"
    );
}

#[test]
fn malformed_and_truncated_frames_from_a_fake_server_are_clear_errors() {
    let none = ConnectOptions {
        retry: RetryPolicy::none(),
        ..opts()
    };
    let cases = [
        ("bad_magic", "bad frame magic"),
        ("bad_crc", "CRC32C mismatch"),
        ("truncated_payload", "in the middle of a frame"),
        ("truncated_header", "in the middle of a frame"),
    ];
    for (name, text) in cases {
        let addr = fake_server(vector(name));
        let e = Client::connect_with(&addr, &none).err().expect(name);
        assert!(matches!(e, Error::Protocol(_)), "{name}: {e:?}");
        assert!(e.to_string().contains(text), "{name}: {e}");
        let e = rt()
            .block_on(asyncio::Client::connect(&addr, none.clone()))
            .err()
            .expect(name);
        assert!(matches!(e, Error::Protocol(_)), "{name}: async {e:?}");
        assert!(e.to_string().contains(text), "{name}: async {e}");
    }
    // The server's own refusal of our bytes (id null) surfaces its code.
    let addr = fake_server(vector("response_null_id"));
    let e = Client::connect_with(&addr, &none).err().unwrap();
    assert_eq!(e.code(), Some("CHECKSUM_MISMATCH"), "{e}");
}

#[test]
fn bearer_auth_and_mutual_tls_when_the_server_requires_them() {
    let token = "client-test-token";
    let cfg = format!(
        "[auth]\nrequired = true\ntoken_hashes = [\"{}\"]\n[tls]\nenabled = true\ncert_path = \"{}\"\nkey_path = \"{}\"\nclient_ca_path = \"{}\"\n",
        hex(&sha256(token.as_bytes())),
        testdata("tls/server.pem").display(),
        testdata("tls/server.key").display(),
        testdata("tls/ca.pem").display(),
    );
    let (s, _d) = Server::start(&cfg);
    let addr = format!("localhost:{}", s.addr.port());
    let tls = ClientTlsOptions {
        ca: Some(testdata("tls/ca.pem")),
        cert: Some(testdata("tls/client.pem")),
        key: Some(testdata("tls/client.key")),
        server_name: None,
    };
    let full = ConnectOptions {
        token: Some(token.into()),
        tls: Some(tls.clone()),
        retry: RetryPolicy::none(),
        ..opts()
    };
    let mut c = Client::connect_with(&addr, &full).unwrap();
    assert_eq!(c.hello_result().unwrap()["auth_required"], true);
    c.put_machine("order", 1, &order_definition()).unwrap();

    let no_token = ConnectOptions {
        token: None,
        ..full.clone()
    };
    let mut anon = Client::connect_with(&addr, &no_token).unwrap();
    assert_eq!(
        anon.list_machines().unwrap_err().code(),
        Some("UNAUTHORIZED")
    );
    let wrong = ConnectOptions {
        token: Some("wrong".into()),
        ..full.clone()
    };
    let e = Client::connect_with(&addr, &wrong).err().unwrap();
    assert_eq!(e.code(), Some("AUTH_FAILED"));
    let no_cert = ConnectOptions {
        tls: Some(ClientTlsOptions {
            cert: None,
            key: None,
            ..tls.clone()
        }),
        ..full.clone()
    };
    let e = Client::connect_with(&addr, &no_cert)
        .err()
        .expect("mTLS refuses");
    assert!(
        e.code().is_none(),
        "a handshake failure, not a server refusal: {e}"
    );
    let plain = ConnectOptions {
        tls: None,
        ..full.clone()
    };
    assert!(
        Client::connect_with(&addr, &plain).is_err(),
        "plaintext is refused"
    );

    rt().block_on(async {
        let c = asyncio::Client::connect(&addr, full.clone()).await.unwrap();
        assert_eq!(c.list_machines().await.unwrap().machines.len(), 1);
        let anon = asyncio::Client::connect(&addr, no_token.clone())
            .await
            .unwrap();
        let e = anon.list_machines().await.unwrap_err();
        assert_eq!(e.code(), Some("UNAUTHORIZED"));
    });
}

#[test]
fn the_blocking_and_tokio_examples_run_against_a_real_server() {
    let (s, _d) = Server::start("");
    let addr = s.addr.to_string();
    let lines = blocking_example::quickstart(&addr).unwrap();
    let text = lines.join("\n");
    assert!(text.contains("refused: GUARD_FAILED"), "{text}");
    assert!(text.contains("order-1: new -> paid"), "{text}");
    assert!(text.contains("event: pay new -> paid"), "{text}");
    let lines = rt().block_on(tokio_example::quickstart(&addr)).unwrap();
    let text = lines.join("\n");
    assert!(text.contains("created order-2 in new"), "{text}");
    assert!(text.contains("event: pay new -> paid"), "{text}");
    assert!(
        text.contains("8 concurrent reads: paid,paid,paid,paid,paid,paid,paid,paid"),
        "{text}"
    );
}

#[test]
fn a_lagged_subscription_surfaces_its_cursor_and_resumes_exactly() {
    let (s, _d) = Server::start("[subscriptions]\nqueue_max = 64\n[storage]\nfsync = \"never\"\n");
    let mut c = connect(&s);
    c.put_machine("tick", 1, &tick_definition()).unwrap();
    c.create_instance("tick", 1, "l-1", &json!({})).unwrap();
    let mut sub = connect(&s)
        .subscribe_all(WatchAllFilter::default())
        .unwrap();
    // The subscriber reads nothing while 4,000 pushes of 2 KiB pile up: more than the socket
    // buffers and the server's queue of 64 hold.
    const N: u64 = 4000;
    let blob = "z".repeat(2048);
    let reqs: Vec<_> = (0..N)
        .map(|n| {
            let p = json!({"n": n, "blob": blob});
            ops::apply_event("l-1", "tick", Some(&p), &ApplyOptions::default())
        })
        .collect();
    for r in c.pipeline(&reqs).unwrap() {
        r.unwrap();
    }
    let mut got = Vec::new();
    let mut lagged = 0;
    while (got.len() as u64) < N {
        match sub.next_timeout(Duration::from_secs(20)) {
            Ok(Some(e)) => got.push(e.payload["n"].as_u64().unwrap()),
            Ok(None) => panic!("stalled after {} events", got.len()),
            Err(Error::Lagged { resume_cursor, .. }) => {
                assert!(resume_cursor.starts_with("c1-"), "{resume_cursor}");
                lagged += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(lagged >= 1, "the subscriber lagged");
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "no gap, no duplicate");
}

/// `order` v1 and v2 (v2 renames `paid` to `settled`), 6 instances new and 6 paid at v1.
fn orders_to_migrate(c: &mut Client) {
    let v2 = json!({"states": ["new", "settled", "shipped", "cancelled"], "initial": "new",
        "transitions": [{"from": "new", "event": "pay", "to": "settled"},
                        {"from": "settled", "event": "ship", "to": "shipped"}]});
    c.put_machine("order", 1, &order_definition()).unwrap();
    c.put_machine("order", 2, &v2).unwrap();
    c.put_machine("order", 3, &v2).unwrap();
    for i in 0..12 {
        let id = format!("m{i:02}");
        c.create_instance("order", 1, &id, &json!({"total": 1}))
            .unwrap();
        if i % 2 == 1 {
            c.apply_event(&id, "pay", Some(&json!({"amount": 1})))
                .unwrap();
        }
    }
}

#[test]
fn migrate_and_delete_instances_through_both_clients() {
    use smdb_client::{DeleteReply, DeleteRequest, MigrateReply, MigrateRequest};
    let (s, _d) = Server::start("[shards]\ncount = 2");
    let mut c = connect(&s);
    orders_to_migrate(&mut c);

    // Blocking: a dry run, then call after call by cursor, 3 examined per call.
    let plan = MigrateRequest::new("order", 1, 2).map_state("paid", "settled");
    let dry = c
        .migrate_instances(&MigrateRequest {
            dry_run: true,
            ..plan.clone()
        })
        .unwrap();
    assert_eq!(
        dry.would_migrate,
        [("new".into(), 6), ("paid".into(), 6)].into()
    );
    assert_eq!((dry.examined, dry.cursor), (12, None));
    let replies: Vec<MigrateReply> = c
        .migrate_pages(MigrateRequest {
            limit: Some(3),
            ..plan
        })
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(replies.len() >= 3, "{replies:?}");
    let mut total = MigrateReply::default();
    replies.into_iter().for_each(|r| total.add(r));
    assert_eq!(
        (total.migrated, total.examined, total.remaining),
        (12, 12, 0)
    );
    let m01 = c.get_instance("m01").unwrap();
    assert_eq!((m01.version, m01.state.as_str()), (2, "settled"));

    // Async: the same ops, driven to the end with a look at each call.
    let addr = s.addr.to_string();
    rt().block_on(async {
        let a = asyncio::Client::connect(&addr, opts()).await.unwrap();
        let mut calls = 0;
        let settled = DeleteRequest {
            state: Some("settled".into()),
            limit: Some(4),
            ..DeleteRequest::new("order")
        };
        let deleted = a.delete_to_end(settled, |_| calls += 1).await.unwrap();
        assert_eq!((deleted.deleted, deleted.cursor), (6, None));
        assert!(calls >= 3, "{calls} calls");
        let mut to_v3 = MigrateRequest::new("order", 2, 3);
        to_v3.conditions.insert("id".into(), json!("m00"));
        let one = a.migrate_instances(&to_v3).await.unwrap();
        assert_eq!(one.migrated, 1);
        let rest = a
            .migrate_to_end(MigrateRequest::new("order", 2, 3), |_| {})
            .await
            .unwrap();
        assert_eq!(rest.migrated, 5);
    });
    assert_eq!(c.get_instance("m00").unwrap().version, 3);
    assert_eq!(
        c.get_instance("m01").unwrap_err().code(),
        Some("INSTANCE_NOT_FOUND")
    );

    // Blocking delete of the rest, by time.
    let all = DeleteRequest {
        updated_before: Some("2999-01-01T00:00:00Z".into()),
        ..DeleteRequest::new("order")
    };
    let mut total = DeleteReply::default();
    for r in c.delete_pages(all) {
        total.add(r.unwrap());
    }
    assert_eq!(total.deleted, 6);
    assert!(c
        .list_instances(&ListFilter::default())
        .unwrap()
        .instances
        .is_empty());
}
