//! A full disk that heals (docs/wal.md "A full disk"), against the real binary on a real small filesystem: a
//! loop-mounted ext4 image. The tests need root and loop devices, as CI has; without them they
//! FAIL (never skip): a silent skip would hide that the behaviour is untested.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::scrape::{http_get, metrics_addr, scrape};
use common::*;
use serde_json::json;

/// Bytes. The image: big enough for ext4's own metadata and a few segments, small enough to
/// fill in seconds.
const IMAGE_BYTES: u64 = 48 << 20;

/// Bytes. Segment size of the test servers: many rotations on a small disk.
const SEGMENT_BYTES: u64 = 1 << 20;

/// Bytes of context per write (the report used 20 KB contexts).
const CONTEXT_BYTES: usize = 20 << 10;

/// The contract: writes come back within 10 s of space returning. Polled, with slack for a
/// loaded CI host.
const RESUME_WITHIN: Duration = Duration::from_secs(15);

/// A mounted ext4 image; unmounted and deleted on drop.
struct LoopFs {
    _root: tempfile::TempDir,
    mnt: PathBuf,
}

impl LoopFs {
    fn new() -> LoopFs {
        let root = temp_dir();
        let img = root.path().join("fs.img");
        let mnt = root.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        run(Command::new("truncate")
            .arg("-s")
            .arg(IMAGE_BYTES.to_string())
            .arg(&img));
        run(Command::new("mkfs.ext4").arg("-q").arg("-F").arg(&img));
        run(Command::new("mount")
            .arg("-o")
            .arg("loop")
            .arg(&img)
            .arg(&mnt));
        LoopFs { _root: root, mnt }
    }

    /// Fills the filesystem with a file of zeros until `leave` bytes remain free.
    fn fill_leaving(&self, leave: u64) -> PathBuf {
        let free = free_bytes(&self.mnt);
        let filler = self.mnt.join("filler");
        let len = free.saturating_sub(leave);
        run(Command::new("fallocate")
            .arg("-l")
            .arg(len.to_string())
            .arg(&filler));
        filler
    }

    /// Fills every block, the ones ext4 reserves for root included (these tests run as root,
    /// which may write into them): `fill_leaving` first, then zeros until the disk refuses.
    fn fill_completely(&self) -> PathBuf {
        let filler = self.fill_leaving(1 << 20);
        let mut rest = std::fs::File::create(self.mnt.join("filler-rest")).expect("filler");
        let zeros = [0u8; 4096];
        while std::io::Write::write_all(&mut rest, &zeros).is_ok() {}
        let _ = rest.sync_all();
        filler
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // The image and the mount point go with `_root` after this.
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed (these tests need root and loop devices; they fail rather than skip): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_bytes(path: &Path) -> u64 {
    let out = Command::new("df")
        .arg("-B1")
        .arg("--output=avail")
        .arg(path)
        .output()
        .expect("df");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().nth(1).unwrap_or("").trim().to_string();
    line.parse()
        .unwrap_or_else(|_| panic!("df output {text:?}"))
}

fn config(data_dir: &Path) -> String {
    format!(
        "[shards]\ncount = 1\n[storage]\ndata_dir = \"{}\"\nsegment_bytes = {SEGMENT_BYTES}\n\
         [metrics]\nenabled = true\nbind_addr = \"127.0.0.1:0\"",
        data_dir.display()
    )
}

fn create(c: &mut Client, id: &str, pad: &str) -> Result<serde_json::Value, ClientError> {
    let p = json!({"machine": "order", "version": 1, "id": id,
        "context": {"total": 1, "pad": pad}});
    c.call("CREATE_INSTANCE", p)
}

#[test]
fn a_full_disk_refuses_writes_serves_reads_and_heals_without_a_restart() {
    let fs = LoopFs::new();
    let state = temp_dir();
    let mut s = Server::start_in(state.path(), &config(&fs.mnt.join("data")))
        .unwrap_or_else(|e| panic!("start: {e}"));
    let mut c = s.order_client();
    // Leave room for a few segments: the log fills it, then cannot allocate the next one.
    let filler = fs.fill_leaving(6 * SEGMENT_BYTES);
    let pad = "x".repeat(CONTEXT_BYTES);
    let mut acked = Vec::new();
    let full = loop {
        let id = format!("o-{}", acked.len());
        match create(&mut c, &id, &pad) {
            Ok(_) => acked.push(id),
            Err(e) => break e,
        }
        assert!(acked.len() < 10_000, "the disk never filled");
    };
    assert_eq!(full.code(), Some("STORAGE_FULL"), "{full}");
    assert!(full.is_retryable(), "STORAGE_FULL is retryable: {full}");
    assert!(
        acked.len() > 10,
        "only {} writes before the disk filled",
        acked.len()
    );

    // Reads go on; the gauge and /health say who refuses writes; one error line.
    for id in [&acked[0], &acked[acked.len() - 1]] {
        let got = c
            .call("GET_INSTANCE", json!({"id": id}))
            .expect("read on a full disk");
        assert_eq!(got["state"], "new");
    }
    assert_eq!(scrape(&s).get("svc_wal_storage_full", &[]), 1.0);
    let health = http_get(metrics_addr(&s), "/health", &[]);
    assert_eq!(health.status, 200, "{}", health.body);
    assert!(
        health.body.contains("storage_full_shards"),
        "{}",
        health.body
    );
    let again = create(&mut c, "refused-again", &pad);
    assert_eq!(err_code(again), "STORAGE_FULL");
    assert_eq!(
        s.log().matches("the disk is full").count(),
        1,
        "{}",
        s.log()
    );

    // Free space: writes come back by themselves.
    std::fs::remove_file(&filler).expect("free space");
    let freed = Instant::now();
    let mut n = 0;
    loop {
        let id = format!("after-{n}");
        match create(&mut c, &id, "small") {
            Ok(_) => {
                acked.push(id);
                break;
            }
            Err(e) if e.code() == Some("STORAGE_FULL") => {}
            Err(e) => panic!("write after freeing space: {e}"),
        }
        n += 1;
        assert!(
            freed.elapsed() < RESUME_WITHIN,
            "writes did not resume within {RESUME_WITHIN:?} of space returning"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in 0..50 {
        let id = format!("later-{i}");
        create(&mut c, &id, &pad).expect("writes after the disk healed");
        acked.push(id);
    }
    assert_eq!(scrape(&s).get("svc_wal_storage_full", &[]), 0.0);

    // Nothing acknowledged is lost across a SIGKILL.
    s.restart_after_kill();
    let mut c = s.client();
    for id in &acked {
        c.call("GET_INSTANCE", json!({"id": id}))
            .unwrap_or_else(|e| panic!("acknowledged {id} lost after restart: {e}"));
    }
}

#[test]
fn start_up_without_room_for_a_segment_and_its_spare_exits_1_leaving_no_file() {
    let fs = LoopFs::new();
    let data = fs.mnt.join("data");
    let _filler = fs.fill_leaving(SEGMENT_BYTES);
    let stderr = start_up_exits_1(&data);
    assert!(stderr.contains("bytes needed"), "{stderr}");
    assert_no_file_left(&data);
}

/// A disk with no byte free: the meta file cannot be written either, and its temp file goes
/// with the failure (it was left behind before).
#[test]
fn start_up_on_a_completely_full_disk_exits_1_leaving_no_temporary_file() {
    let fs = LoopFs::new();
    let data = fs.mnt.join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let _filler = fs.fill_completely();
    let stderr = start_up_exits_1(&data);
    assert!(stderr.contains("No space left"), "{stderr}");
    assert_no_file_left(&data);
}

/// Starts the server on `data` and expects exit status 1 naming it; returns its stderr.
fn start_up_exits_1(data: &Path) -> String {
    let state = temp_dir();
    let cfg_path = state.path().join("smdb.toml");
    let (code, _, stderr) =
        run_config_to_exit(&cfg_path, &base_config(state.path(), &config(data)));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&data.display().to_string()), "{stderr}");
    stderr
}

/// No temp file, segment or snapshot anywhere under `data`.
fn assert_no_file_left(data: &Path) {
    let mut left = Vec::new();
    let mut stack = vec![data.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                stack.push(p);
            } else if name.ends_with(".tmp") || name.ends_with(".seg") || name.ends_with(".snap") {
                left.push(p);
            }
        }
    }
    assert!(left.is_empty(), "start-up left files behind: {left:?}");
}

/// docs/wal.md "A full disk", with `ha.enabled`: a primary whose disk stays full for longer than `ttl_ms`
/// hands over its lease (another member takes the writes), does not campaign while full, and
/// once space returns follows the new primary holding every acknowledged write.
#[test]
fn a_primary_on_a_full_disk_hands_over_its_lease() {
    let _serial = ha::serial();
    let fs = LoopFs::new();
    let etcd = common::etcd::Etcd::start(3);
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let start = |i: usize| {
        let mut cfg = ha::member_config(&etcd, "full", &format!("n{i}"), "sync");
        if i == 0 {
            let data = format!(
                "[storage]\ndata_dir = \"{}\"\n",
                fs.mnt.join("data").display()
            );
            cfg = cfg.replacen("[storage]\n", &data, 1);
        }
        Server::start_in(dirs[i].path(), &cfg).unwrap_or_else(|e| panic!("start n{i}: {e}"))
    };
    // n0 (on the small disk) starts alone and leads; the others join as followers.
    let mut members = vec![start(0)];
    assert_eq!(ha::one_primary(&[&members[0]], Duration::from_secs(20)), 0);
    members.push(start(1));
    members.push(start(2));
    fn all(m: &[Server]) -> Vec<&Server> {
        m.iter().collect()
    }
    assert_eq!(ha::one_primary(&all(&members), Duration::from_secs(20)), 0);

    let mut c = members[0].client();
    put_order_machine(&mut c);
    let filler = fs.fill_leaving(6 * SEGMENT_BYTES);
    let pad = "x".repeat(CONTEXT_BYTES);
    let mut acked = Vec::new();
    let full = loop {
        match create(&mut c, &format!("o-{}", acked.len()), &pad) {
            Ok(_) => acked.push(format!("o-{}", acked.len())),
            Err(e) => break e,
        }
        assert!(acked.len() < 10_000, "the disk never filled");
    };
    assert_eq!(full.code(), Some("STORAGE_FULL"), "{full}");
    let full_at = Instant::now();

    // Past ttl_ms another member leads; n0 counts the demotion and names the new primary.
    let deadline = full_at + Duration::from_millis(ha::TTL_MS) + Duration::from_secs(20);
    let second = loop {
        let roles: Vec<String> = (members.iter())
            .map(|m| ha::status(m.addr).map_or("down".into(), |s| s["role"].to_string()))
            .collect();
        if let Some(i) = (1..3).find(|&i| roles[i] == "\"primary\"") {
            break i;
        }
        assert!(
            Instant::now() < deadline,
            "no hand-over: {roles:?}\n{}",
            members[0].log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let handed_over = full_at.elapsed();
    eprintln!("lease handed over {handed_over:?} after the first STORAGE_FULL");
    assert!(
        handed_over >= Duration::from_millis(ha::TTL_MS),
        "handed over before ttl_ms: {handed_over:?}"
    );
    let m = scrape(&members[0]);
    let demoted = m.value("svc_ha_demotions_total", &[("reason", "storage_full")]);
    assert_eq!(demoted, Some(1.0), "{}", m.text);
    assert!(members[0]
        .log()
        .contains("writes refused for lack of space"));

    // Writes go on at the new primary.
    let mut w = members[second].client();
    for i in 0..20 {
        let id = format!("new-{i}");
        create(&mut w, &id, "small").unwrap_or_else(|e| panic!("write at n{second}: {e}"));
        acked.push(id);
    }
    // n0 never campaigns while full; once space returns it follows and holds everything.
    std::fs::remove_file(&filler).expect("free space");
    ha::converge(&members[second], &members[0]);
    assert_eq!(
        ha::one_primary(&all(&members), Duration::from_secs(10)),
        second
    );
    let mut r = members[0].client();
    for id in &acked {
        r.call("GET_INSTANCE", json!({"id": id}))
            .unwrap_or_else(|e| panic!("acknowledged {id} missing on n0: {e}"));
    }
}
