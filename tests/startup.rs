//! Process behaviour: CLI, config errors, exclusive port and data dir, shard-count check,
//! graceful shutdown, definitions loaded at start-up.

mod common;

use common::*;
use serde_json::{json, Value};

#[test]
fn help_and_version() {
    let (code, out, _) = run_to_exit(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
    let (code, out, _) = run_to_exit(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--config"), "{out}");
}

#[test]
fn bad_config_exits_78_naming_the_key() {
    let dir = temp_dir();
    let path = dir.path().join("bad.toml");
    let (code, _, err) = run_config_to_exit(&path, "[network]\nbind_adress = \"127.0.0.1:1\"\n");
    assert_eq!(code, 78);
    assert!(err.contains("bind_adress"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one-line message: {err}");
    let (code, _, _) = run_config_to_exit(&path, "[storage]\nfsync = \"sometimes\"\n");
    assert_eq!(code, 78);
    // A frame limit above what one log record holds could accept requests the log (and so
    // every replica) cannot take: refused at load, naming the key (src/limits.rs).
    let (code, _, err) = run_config_to_exit(&path, "[network]\nmax_frame_bytes = 104857600\n");
    assert_eq!(code, 78);
    assert!(err.contains("network.max_frame_bytes"), "{err}");
    // Separate front executors and fronts run by the shards are two placements, not one.
    let both = "[network]\nfronts_on_shards = true\nacceptor_cores = 2\n";
    let (code, _, err) = run_config_to_exit(&path, both);
    assert_eq!(code, 78);
    assert!(err.contains("network.fronts_on_shards"), "{err}");
}

#[test]
fn second_server_on_a_busy_port_fails_with_address_in_use() {
    let (s, _d) = Server::start("");
    let dir = temp_dir();
    let extra = format!("[network]\nbind_addr = \"{}\"", s.addr);
    let err = Server::start_in(dir.path(), &extra)
        .err()
        .expect("second bind must fail");
    assert!(err.to_lowercase().contains("address in use"), "{err}");
}

#[test]
fn second_server_on_the_same_data_dir_is_refused() {
    let (s, dir) = Server::start("");
    let err = Server::start_in(dir.path(), "")
        .err()
        .expect("must be refused");
    assert!(err.contains("locked"), "{err}");
    drop(s);
}

#[test]
fn shard_count_mismatch_is_refused_naming_both_counts() {
    let dir = temp_dir();
    let mut s = Server::start_in(dir.path(), "[shards]\ncount = 2").unwrap();
    assert!(s.terminate().success());
    let err = Server::start_in(dir.path(), "[shards]\ncount = 3")
        .err()
        .expect("refused");
    assert!(
        err.contains("2 shards") && err.contains("3 shards"),
        "{err}"
    );
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits_zero() {
    let (mut s, _d) = Server::start("[shards]\ncount = 2");
    let mut c = s.order_client();
    let mut ids = Vec::new();
    for i in 0..50 {
        let p = json!({"machine":"order","version":1,"id":format!("t{i}"),"context":{}});
        ids.push(c.send("CREATE_INSTANCE", &p).unwrap());
    }
    // Once the first answer is back the server has read the whole pipeline (5 KB, one read).
    assert_eq!(c.recv_response().unwrap()["status"], "ok");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let status = s.terminate();
    assert!(status.success(), "{status:?}");
    // Every request the server had read was answered before it exited.
    let mut answered = 1;
    while let Ok(v) = c.recv_response() {
        assert_eq!(v["status"], "ok", "{v}");
        answered += 1;
    }
    assert_eq!(answered, ids.len());
}

#[test]
fn definitions_dir_is_loaded_at_start() {
    let dir = temp_dir();
    let defs = dir.path().join("defs");
    std::fs::create_dir_all(&defs).unwrap();
    let file = json!({"machine": "order", "version": 3, "definition": order_definition()});
    std::fs::write(defs.join("order-3.json"), file.to_string()).unwrap();
    let extra = format!(
        "[storage]\ndefinitions_dir = \"{}\"\n[shards]\ncount = 2",
        defs.display()
    );
    let s = Server::start_in(dir.path(), &extra).unwrap();
    let mut c = s.client();
    let m = c.call("GET_MACHINE", json!({"machine": "order"})).unwrap();
    assert_eq!(m["version"], 3);
    for i in 0..8 {
        let p = json!({"machine":"order","version":3,"id":format!("d{i}"),"context":{}});
        c.call("CREATE_INSTANCE", p).unwrap();
    }
    drop(s);
    std::fs::write(
        defs.join("zz-bad.json"),
        r#"{"machine":"x","version":1,"definition":{}}"#,
    )
    .unwrap();
    let dir2 = temp_dir();
    let extra = format!("[storage]\ndefinitions_dir = \"{}\"", defs.display());
    let err = Server::start_in(dir2.path(), &extra)
        .err()
        .expect("bad definition stops start");
    assert!(err.contains("zz-bad.json"), "{err}");
    let _ = Value::Null;
}

#[test]
fn a_relative_data_dir_such_as_the_default_works() {
    let dir = temp_dir();
    let cfg = dir.path().join("rel.toml");
    std::fs::write(
        &cfg,
        "[network]\nbind_addr = \"127.0.0.1:0\"\n[storage]\ndata_dir = \"./data\"\n\
         [metrics]\nenabled = false\n[http]\nenabled = false\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(BIN)
        .arg("--config")
        .arg(&cfg)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.starts_with("smdb-server listening on "),
        "did not start: {line:?}"
    );
    assert!(dir.path().join("data/shard-0/wal").is_dir());
}
