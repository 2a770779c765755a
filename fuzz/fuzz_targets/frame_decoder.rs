//! Feeds arbitrary bytes to the frame decoder: it must never panic, and any frame it accepts
//! must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smdb::protocol::frame::{decode_frame, encode_frame};

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    while let Ok(Some((range, used))) = decode_frame(&data[at..], 1 << 20) {
        let payload = &data[at + range.start..at + range.end];
        let mut again = Vec::new();
        encode_frame(payload, &mut again);
        assert_eq!(&again[8..], &data[at + 8..at + used], "length and CRC round trip");
        at += used;
    }
});
