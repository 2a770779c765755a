//! A small blocking HTTP/1.1 client for the HTTP API tests: keep-alive requests, raw bytes,
//! and Server-Sent Event streams. It parses exactly what the server sends (Content-Length
//! bodies, or a body up to close) and nothing more.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A response as read.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The value of header `name` (any case) among `headers`.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The response is an error: `status`, and `code` in its body.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code()),
            (status, code.to_string()),
            "{}",
            self.text()
        );
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A problem body's `code`.
    pub fn code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{} {}",
            self.status,
            self.text()
        );
        self.json()["code"].as_str().unwrap_or("").to_string()
    }
}

/// Any byte stream the client can speak over (TCP, or TLS in tests/http_tls).
pub trait Io: Read + Write {}
impl<T: Read + Write> Io for T {}

/// One keep-alive connection.
pub struct Http {
    io: Box<dyn Io>,
    pub host: String,
    /// Sent as `Authorization: Bearer` when set.
    pub token: Option<String>,
    buf: Vec<u8>,
}

impl Http {
    pub fn connect(addr: SocketAddr) -> Http {
        let s = TcpStream::connect(addr).expect("connect to the HTTP listener");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_nodelay(true).unwrap();
        Http::over(Box::new(s), addr.to_string())
    }

    pub fn over(io: Box<dyn Io>, host: String) -> Http {
        Http {
            io,
            host,
            token: None,
            buf: Vec::new(),
        }
    }

    pub fn with_token(mut self, token: &str) -> Http {
        self.token = Some(token.to_string());
        self
    }

    /// The request bytes: Host, the token, a JSON body's type and length, then `headers`.
    pub fn encode(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if let Some(t) = &self.token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body.unwrap_or_default());
        bytes
    }

    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Resp {
        let bytes = self.encode(method, path, headers, body);
        self.raw(&bytes)
    }

    pub fn get(&mut self, path: &str) -> Resp {
        self.request("GET", path, &[], None)
    }

    pub fn post(&mut self, path: &str, body: &Value) -> Resp {
        self.request("POST", path, &[], Some(body.to_string().as_bytes()))
    }

    pub fn put(&mut self, path: &str, body: &Value) -> Resp {
        self.request("PUT", path, &[], Some(body.to_string().as_bytes()))
    }

    pub fn delete(&mut self, path: &str) -> Resp {
        self.request("DELETE", path, &[], None)
    }

    /// Sends `bytes` as they are and reads one response.
    pub fn raw(&mut self, bytes: &[u8]) -> Resp {
        self.send(bytes);
        self.read_response().expect("a response")
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).expect("send");
        self.io.flush().expect("flush");
    }

    /// Reads until `buf` holds `n` bytes (false on EOF).
    fn fill(&mut self, n: usize) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        while self.buf.len() < n {
            match self.io.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
            }
        }
        true
    }

    /// Reads one response; `None` when the server closed first.
    pub fn read_response(&mut self) -> Option<Resp> {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            let want = self.buf.len() + 1;
            if !self.fill(want) {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let length = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.parse::<usize>().unwrap());
        if status == 100 {
            return self.read_response();
        }
        let body = match length {
            Some(n) => {
                self.fill(n);
                self.buf.drain(..n.min(self.buf.len())).collect()
            }
            None => {
                let _ = self.io.read_to_end(&mut self.buf);
                std::mem::take(&mut self.buf)
            }
        };
        Some(Resp {
            status,
            headers,
            body,
        })
    }

    /// True when the server has closed the connection (reads EOF within `wait`).
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut b = [0u8; 1024];
        while Instant::now() < deadline {
            match self.io.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return true,
            }
        }
        false
    }

    /// Starts an event stream: sends the GET and reads the response head.
    pub fn stream(mut self, path: &str, headers: &[(&str, &str)]) -> Result<Sse, Resp> {
        let mut all = vec![("Accept", "text/event-stream")];
        all.extend_from_slice(headers);
        let bytes = self.encode("GET", path, &all, None);
        self.send(&bytes);
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            let want = self.buf.len() + 1;
            assert!(self.fill(want), "closed before the response head");
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        if status != 200 {
            return Err(self.read_rest(end, status));
        }
        assert!(head.contains("Content-Type: text/event-stream"), "{head}");
        self.buf.drain(..end + 4);
        Ok(Sse { http: self })
    }

    fn read_rest(&mut self, end: usize, status: u16) -> Resp {
        let _ = status;
        self.read_response()
            .unwrap_or_else(|| panic!("no response after {end}"))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    pub id: Option<String>,
    /// `message` when the event has no `event:` line.
    pub event: String,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// A running event stream.
pub struct Sse {
    pub http: Http,
}

impl Sse {
    /// The next block up to a blank line, as sent (comments included).
    pub fn next_block(&mut self) -> Option<String> {
        let end = loop {
            if let Some(i) = find(&self.http.buf, b"\n\n") {
                break i;
            }
            let want = self.http.buf.len() + 1;
            if !self.http.fill(want) {
                return None;
            }
        };
        let block = String::from_utf8(self.http.buf[..end].to_vec()).unwrap();
        self.http.buf.drain(..end + 2);
        Some(block)
    }

    /// The next event (comments skipped); `None` when the server closed the stream.
    pub fn next(&mut self) -> Option<Event> {
        loop {
            let block = self.next_block()?;
            let mut ev = Event {
                event: "message".into(),
                ..Event::default()
            };
            let mut any = false;
            for line in block.lines() {
                if line.starts_with(':') {
                    continue;
                }
                let (field, value) = line.split_once(": ").unwrap_or((line, ""));
                any = true;
                match field {
                    "id" => ev.id = Some(value.to_string()),
                    "event" => ev.event = value.to_string(),
                    "data" => ev.data.push_str(value),
                    _ => {}
                }
            }
            if any && (ev.event != "message" || !ev.data.is_empty()) {
                return Some(ev);
            }
        }
    }
}
