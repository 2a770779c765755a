//! Reading a PROXY header off a connection: exactly its bytes, within `HEADER_READ_TIMEOUT`.

use std::time::Duration;

use futures_lite::{AsyncRead, AsyncReadExt};

use super::{parse, Header, ParseError, HEADER_BYTES_MIN};

/// Time a new connection has to deliver its whole PROXY header. Balancers send it with the
/// connection's first bytes; a peer that does not is not a balancer.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a connection's header was refused.
#[derive(Debug)]
pub enum ReadError {
    /// No complete header within `HEADER_READ_TIMEOUT`.
    Timeout,
    /// The peer closed or the read failed before a complete header.
    Io(std::io::Error),
    /// The bytes are not a valid PROXY header.
    Invalid(&'static str),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Timeout => write!(f, "no PROXY header within {HEADER_READ_TIMEOUT:?}"),
            ReadError::Io(e) => write!(f, "closed before a complete PROXY header: {e}"),
            ReadError::Invalid(why) => write!(f, "invalid PROXY header: {why}"),
        }
    }
}

/// Reads one header from `stream`, never past its last byte: first the shortest possible
/// header, then exactly what `parse` says is still missing (v2: its length field; v1: one byte
/// at a time up to CRLF, at most 107).
pub async fn read_header<R: AsyncRead + Unpin>(stream: &mut R) -> Result<Header, ReadError> {
    let read = glommio::timer::timeout(HEADER_READ_TIMEOUT, async {
        Ok(read_exactly(stream).await)
    });
    match read.await {
        Ok(r) => r,
        Err(_) => Err(ReadError::Timeout),
    }
}

async fn read_exactly<R: AsyncRead + Unpin>(stream: &mut R) -> Result<Header, ReadError> {
    let mut buf = Vec::with_capacity(64);
    let mut need = HEADER_BYTES_MIN;
    loop {
        let at = buf.len();
        buf.resize(at + need, 0);
        stream
            .read_exact(&mut buf[at..])
            .await
            .map_err(ReadError::Io)?;
        match parse(&buf) {
            Ok((header, used)) if used == buf.len() => return Ok(header),
            // parse never asks for bytes past the header, so this cannot happen; refuse anyway.
            Ok(_) => return Err(ReadError::Invalid("header shorter than the bytes read")),
            Err(ParseError::Incomplete(n)) => need = n.max(1),
            Err(ParseError::Invalid(why)) => return Err(ReadError::Invalid(why)),
        }
    }
}
