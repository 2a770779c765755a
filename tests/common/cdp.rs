//! A headless Chromium driven over the DevTools protocol, for the console's browser test.
//!
//! The DevTools endpoint is a WebSocket; the few frames CDP needs (text messages, masked from
//! the client, possibly fragmented or 64-bit-long from the browser, ping/pong) are written
//! here in ~80 lines rather than pulling a WebSocket crate and its dependency tree into every
//! test build.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The line that installs what this test needs on Debian (also in .ci/run).
pub const INSTALL: &str = "apt-get install -y chromium fonts-dejavu-core";

/// The Chromium binary, or the reason there is none (the caller fails with it: a browser test
/// never passes without a browser).
pub fn chromium() -> Result<PathBuf, String> {
    let candidates = [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ];
    let from_env = std::env::var_os("SMDB_CHROMIUM").map(PathBuf::from);
    from_env
        .into_iter()
        .chain(candidates.iter().map(PathBuf::from))
        .find(|p| p.exists())
        .ok_or_else(|| format!("no Chromium found (set SMDB_CHROMIUM or run: {INSTALL})"))
}

/// A minimal WebSocket client connection (RFC 6455), text messages only.
struct Ws {
    s: TcpStream,
    mask: u32,
}

impl Ws {
    fn connect(url: &str) -> Ws {
        let rest = url.strip_prefix("ws://").expect("a ws:// URL");
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut s = TcpStream::connect(host).expect("connect to DevTools");
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: c21kYi1jb25zb2xlLXRlc3Q=\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).expect("DevTools handshake");
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "DevTools refused: {head}");
        Ws {
            s,
            mask: 0x5a17_c3e1,
        }
    }

    fn send(&mut self, text: &str) {
        let p = text.as_bytes();
        let mut f = vec![0x81u8];
        match p.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n < 65536 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        self.mask = self.mask.rotate_left(7) ^ 0x9e37_79b9;
        let key = self.mask.to_be_bytes();
        f.extend_from_slice(&key);
        f.extend(p.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        self.s.write_all(&f).expect("send to DevTools");
    }

    /// The next whole text message (control frames answered on the way).
    fn recv(&mut self) -> String {
        let mut msg = Vec::new();
        loop {
            let mut h = [0u8; 2];
            self.s.read_exact(&mut h).expect("read from DevTools");
            let (fin, op) = (h[0] & 0x80 != 0, h[0] & 0x0f);
            let len = match h[1] & 0x7f {
                126 => {
                    let mut l = [0u8; 2];
                    self.s.read_exact(&mut l).unwrap();
                    u64::from(u16::from_be_bytes(l))
                }
                127 => {
                    let mut l = [0u8; 8];
                    self.s.read_exact(&mut l).unwrap();
                    u64::from_be_bytes(l)
                }
                n => u64::from(n),
            };
            let mut payload = vec![0u8; len as usize];
            self.s.read_exact(&mut payload).unwrap();
            match op {
                0x9 => self.pong(&payload),
                0x8 => panic!("DevTools closed the connection"),
                0xa => {}
                _ => {
                    msg.extend_from_slice(&payload);
                    if fin {
                        return String::from_utf8(msg).expect("UTF-8 message");
                    }
                }
            }
        }
    }

    fn pong(&mut self, payload: &[u8]) {
        let mut f = vec![0x8a, 0x80 | payload.len() as u8, 0, 0, 0, 0];
        f.extend_from_slice(payload);
        let _ = self.s.write_all(&f);
    }
}

/// One headless browser with one page, attached in flat session mode.
pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    ws: Ws,
    next: u64,
    session: String,
    /// Every event received so far (`Network.requestWillBeSent` and the rest).
    pub events: Vec<Value>,
}

impl Browser {
    /// Starts Chromium (panics with the install line when there is none).
    pub fn launch() -> Browser {
        let bin = chromium().unwrap_or_else(|e| panic!("{e}"));
        let profile = super::temp_dir();
        let mut child = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let stderr = child.stderr.take().unwrap();
        let url = super::first_line(stderr, Duration::from_secs(60), |line| {
            let url = line.strip_prefix("DevTools listening on ")?;
            Some(url.trim().to_string())
        })
        .expect("DevTools endpoint");
        let mut b = Browser {
            child,
            _profile: profile,
            ws: Ws::connect(&url),
            next: 0,
            session: String::new(),
            events: Vec::new(),
        };
        let target = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let attach = json!({"targetId": target["targetId"], "flatten": true});
        let session = b.call("Target.attachToTarget", attach);
        b.session = session["sessionId"].as_str().unwrap().to_string();
        for domain in ["Page.enable", "Runtime.enable", "Network.enable"] {
            b.call(domain, json!({}));
        }
        b
    }

    /// Sends a command (to the page once attached) and waits for its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = self.session.clone().into();
        }
        self.ws.send(&msg.to_string());
        loop {
            let v: Value = serde_json::from_str(&self.ws.recv()).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {}", v["error"]);
                return v["result"].clone();
            }
            if v.get("method").is_some() {
                self.events.push(v);
            }
        }
    }

    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
    }

    /// Evaluates `expr` in the page (promises awaited) and returns its value.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expr}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Polls `expr` until it is truthy; returns its value, or panics after `limit`.
    pub fn wait_for(&mut self, expr: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        // A page still loading may throw: that counts as false.
        let guarded =
            format!("(() => {{ try {{ return ({expr}); }} catch (e) {{ return false; }} }})()");
        loop {
            let v = self.eval(&guarded);
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return v;
            }
            let page = self.eval("document.body ? document.body.innerText.slice(0, 600) : ''");
            assert!(
                Instant::now() < deadline,
                "never true: {expr}\npage: {page}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Saves a PNG of the page.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = smdb::protocol::base64::decode(r["data"].as_str().unwrap().as_bytes()).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Every URL the page asked for since it started.
    pub fn requested_urls(&mut self) -> Vec<String> {
        self.eval("1"); // drain pending events
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .map(|e| {
                e["params"]["request"]["url"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
