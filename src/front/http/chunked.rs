//! `Transfer-Encoding: chunked` bodies, decoded incrementally: each byte is looked at once
//! however the body arrives (a body of tiny chunks sent a byte at a time costs no more than
//! one sent whole), and the decoded body never grows past its limit.
//!
//! Chunk extensions are skipped; trailer fields are read and dropped (bounded with the head's
//! own limit). Whitespace, a missing CRLF or a size of more than 16 hex digits is an error.

use super::parse::HEAD_BYTES_MAX;

/// Longest chunk-size line (size, extensions, CRLF), in bytes.
pub const CHUNK_LINE_BYTES_MAX: usize = 4096;

/// Why a chunked body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// The decoded body would pass its limit: 413.
    TooLarge,
    /// Not chunked framing: 400.
    Bad(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the hex size (`digits` read so far).
    Size {
        digits: u8,
    },
    /// Skipping a chunk extension up to CR.
    Ext,
    /// CR seen after the size line; LF next.
    SizeLf,
    /// Copying chunk data; this many bytes left.
    Data(u64),
    DataCr,
    DataLf,
    /// A trailer line (or the final empty line); `len` bytes of it so far.
    Trailer {
        len: usize,
    },
    TrailerLf {
        empty: bool,
    },
    Done,
}

/// One chunked body being decoded.
#[derive(Debug)]
pub struct Chunked {
    state: State,
    size: u64,
    line: usize,
    trailers: usize,
    max: usize,
    body: Vec<u8>,
}

impl Chunked {
    /// A decoder whose body may hold at most `max` bytes.
    pub fn new(max: usize) -> Chunked {
        Chunked {
            state: State::Size { digits: 0 },
            size: 0,
            line: 0,
            trailers: 0,
            max,
            body: Vec::new(),
        }
    }

    /// The whole body and the final CRLF have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The decoded body (complete once `is_done`).
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }

    /// Decodes from `input`; returns how many bytes it consumed (all of them unless the body
    /// ended inside `input`: what follows belongs to the next request).
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() && self.state != State::Done {
            if let State::Data(left) = self.state {
                let n = (input.len() - i).min(usize::try_from(left).unwrap_or(usize::MAX));
                self.body.extend_from_slice(&input[i..i + n]);
                i += n;
                let left = left - n as u64;
                self.state = if left == 0 {
                    State::DataCr
                } else {
                    State::Data(left)
                };
                continue;
            }
            self.step(input[i])?;
            i += 1;
        }
        Ok(i)
    }

    /// One framing byte (everything but chunk data).
    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        let bad = ChunkError::Bad;
        self.state = match self.state {
            State::Size { digits } => match (b, digits) {
                (b'\r', 1..) => State::SizeLf,
                (b';', 1..) => State::Ext,
                (_, 16..) => return Err(bad("chunk size over 16 hex digits")),
                _ => {
                    let d = (b as char).to_digit(16).ok_or(bad("bad chunk size"))?;
                    self.size = self.size * 16 + u64::from(d);
                    State::Size { digits: digits + 1 }
                }
            },
            State::Ext => {
                self.line += 1;
                if self.line > CHUNK_LINE_BYTES_MAX {
                    return Err(bad("chunk extension too long"));
                }
                match b {
                    b'\r' => State::SizeLf,
                    b'\n' | 0 => return Err(bad("bad chunk extension")),
                    _ => State::Ext,
                }
            }
            State::SizeLf if b == b'\n' => self.start_chunk()?,
            State::DataCr if b == b'\r' => State::DataLf,
            State::DataLf if b == b'\n' => State::Size { digits: 0 },
            State::Trailer { len } => {
                self.trailers += 1;
                if self.trailers > HEAD_BYTES_MAX {
                    return Err(bad("trailer fields too long"));
                }
                match b {
                    b'\r' => State::TrailerLf { empty: len == 0 },
                    b'\n' => return Err(bad("bare LF in trailer")),
                    _ => State::Trailer { len: len + 1 },
                }
            }
            State::TrailerLf { empty } if b == b'\n' => match empty {
                true => State::Done,
                false => State::Trailer { len: 0 },
            },
            _ => return Err(bad("missing CRLF in chunked body")),
        };
        Ok(())
    }

    /// The size line ended: data of `size` bytes follows, or the trailer for size 0.
    fn start_chunk(&mut self) -> Result<State, ChunkError> {
        let size = std::mem::take(&mut self.size);
        self.line = 0;
        if size == 0 {
            return Ok(State::Trailer { len: 0 });
        }
        let room = (self.max - self.body.len()) as u64;
        if size > room {
            return Err(ChunkError::TooLarge);
        }
        self.body.reserve(size as usize);
        Ok(State::Data(size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &[u8], max: usize) -> Result<(Vec<u8>, usize), ChunkError> {
        let mut c = Chunked::new(max);
        let used = c.feed(text)?;
        assert!(c.is_done(), "not done");
        Ok((c.into_body(), used))
    }

    #[test]
    fn decodes_chunks_with_extensions_and_trailers() {
        let text =
            b"4;x=y\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nT: 1\r\n\r\nNEXT";
        let (body, used) = decode(text, 1000).unwrap();
        assert_eq!(body, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&text[used..], b"NEXT");
    }

    #[test]
    fn byte_at_a_time_gives_the_same_body() {
        let text = b"3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n";
        let mut c = Chunked::new(100);
        for b in text {
            assert_eq!(c.feed(std::slice::from_ref(b)).unwrap(), 1);
        }
        assert!(c.is_done());
        assert_eq!(c.into_body(), b"abcd");
    }

    #[test]
    fn limits_and_malformed_framing_are_refused() {
        assert_eq!(
            decode(b"5\r\nabcde\r\n0\r\n\r\n", 4),
            Err(ChunkError::TooLarge)
        );
        let bad: [&[u8]; 7] = [
            b"\r\n",
            b"g\r\n",
            b" 1\r\na\r\n0\r\n\r\n",
            b"1\r\nab\r\n0\r\n\r\n",
            b"1\na\r\n0\r\n\r\n",
            b"11111111111111111\r\n",
            b"0\r\nX\n\r\n",
        ];
        for text in bad {
            let mut c = Chunked::new(100);
            assert!(matches!(c.feed(text), Err(ChunkError::Bad(_))), "{text:?}");
        }
    }
}
