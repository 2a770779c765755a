"""benches/rcp1.py: what the Python bench scripts share: an RCP1 connection (HELLO, call),
starting a server and reading its listening line, scraping /metrics.

Scripts import it from their own directory (`sys.path` holds the script's directory).
"""
import json, re, socket, struct, subprocess, time

SERVER = None  # set by the caller: the smdb-server binary start() runs

_T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _T.append(c)


def crc32c(b):
    c = 0xFFFFFFFF
    t = _T
    for x in b:
        c = t[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)))
        self.buf = b""
        self.n = 0
        self.call("HELLO", {"protocol_version": 1, "client_name": "timers-bench"})

    def send(self, op, params):
        self.n += 1
        p = json.dumps({"type": "request", "id": str(self.n), "op": op, "params": params},
                       separators=(",", ":")).encode()
        self.s.sendall(b"RCP1" + b"\0\0\0\0" + struct.pack(">II", len(p), crc32c(p)) + p)

    def recv(self):
        while True:
            if len(self.buf) >= 16:
                (n,) = struct.unpack(">I", self.buf[8:12])
                if len(self.buf) >= 16 + n:
                    p, self.buf = self.buf[16:16 + n], self.buf[16 + n:]
                    m = json.loads(p)
                    if m.get("type") == "response":
                        return m
                    continue
            d = self.s.recv(1 << 20)
            if not d:
                raise RuntimeError("connection closed")
            self.buf += d

    def call(self, op, params):
        self.send(op, params)
        r = self.recv()
        if r["status"] != "ok":
            raise RuntimeError(f"{op}: {r['error']}")
        return r["result"]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start(cfg, log):
    p = subprocess.Popen([SERVER, "--config", cfg], stdout=subprocess.PIPE, stderr=log, text=True)
    addr = maddr = None
    t0 = time.time()
    while True:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError("server exited")
        m = re.search(r"listening on (\S+)", line)
        if m:
            addr = m.group(1)
            mm = re.search(r"metrics=(\S+)", line)
            maddr = mm.group(1) if mm else None
            return p, addr, maddr, time.time() - t0


def scrape(maddr):
    host, port = maddr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    out = b""
    while True:
        d = s.recv(1 << 16)
        if not d:
            break
        out += d
    return out.decode().split("\r\n\r\n", 1)[1]


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def quantile(text, name, q):
    b = []
    for line in text.splitlines():
        m = re.match(name + r'_bucket\{le="([^"]+)"\} (\S+)', line)
        if m:
            b.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
    if not b or b[-1][1] == 0:
        return None
    want = q * b[-1][1]
    for le, n in b:
        if n >= want:
            return le
    return None


