//! Test helpers for the metrics listener: a tiny blocking HTTP client and a parser for the
//! Prometheus text exposition (promtool itself: `tools::promtool`).

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::Server;

pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        super::http::header(&self.headers, name)
    }
}

/// Sends `raw` and reads the response until the server closes (it always does).
pub fn http_raw(addr: SocketAddr, raw: &[u8]) -> HttpResponse {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(raw);
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    HttpResponse {
        status,
        headers,
        body: body.to_string(),
    }
}

/// `GET path` with extra headers.
pub fn http_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    http_raw(addr, req.as_bytes())
}

/// The server's metrics listener (panics when disabled).
pub fn metrics_addr(s: &Server) -> SocketAddr {
    s.metrics_addr.expect("metrics listener enabled")
}

/// Scrapes `/metrics` in the default format and parses it.
pub fn scrape(s: &Server) -> Exposition {
    let r = http_get(metrics_addr(s), "/metrics", &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    Exposition::parse(&r.body)
}

pub type Labels = BTreeMap<String, String>;

/// A parsed Prometheus text exposition.
pub struct Exposition {
    pub text: String,
    /// `# TYPE` lines: family name -> type.
    pub types: HashMap<String, String>,
    pub samples: Vec<(String, Labels, f64)>,
}

impl Exposition {
    pub fn parse(text: &str) -> Exposition {
        let mut types = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').expect("TYPE name kind");
                let old = types.insert(name.to_string(), kind.to_string());
                assert!(old.is_none(), "family {name} declared twice");
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            samples.push(parse_sample(line));
        }
        Exposition {
            text: text.to_string(),
            types,
            samples,
        }
    }

    /// The value of the sample named `name` with exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && *l == want)
            .map(|(_, _, v)| *v)
    }

    /// `value`, with 0 for a series not (yet) exposed.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or(0.0)
    }

    /// Every sample named `name`.
    pub fn series(&self, name: &str) -> Vec<(Labels, f64)> {
        self.samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, l, v)| (l.clone(), *v))
            .collect()
    }
}

fn parse_sample(line: &str) -> (String, Labels, f64) {
    let name_end = line.find(['{', ' ']).expect("sample name");
    let name = line[..name_end].to_string();
    let mut labels = Labels::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices();
        let mut key = String::new();
        loop {
            let (i, c) = chars.next().expect("unterminated labels");
            match c {
                '}' => {
                    rest = &inner[i + 1..];
                    break;
                }
                ',' => {}
                '=' => {
                    assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                    let mut value = String::new();
                    loop {
                        match chars.next().expect("unterminated value").1 {
                            '\\' => match chars.next().expect("escape").1 {
                                'n' => value.push('\n'),
                                c => value.push(c),
                            },
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                c => key.push(c),
            }
        }
    }
    let value = rest.split_whitespace().next().expect("value");
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}")),
    };
    (name, labels, value)
}
