//! Tree blobs: the JSON alone, and the encoding inside a sealed blob (input: the length the index
//! gives the plaintext, a little-endian u32 capped at 16 MiB, then codec byte and body).
#![no_main]

use libfuzzer_sys::fuzz_target;
use neverwiped::compress::Decoder;
use neverwiped::format::tree::Tree;

fuzz_target!(|data: &[u8]| {
    let _ = Tree::from_bytes(data);
    if let Some((raw_length, encoded)) = neverwiped_fuzz::split_u32(data) {
        let mut decoder = Decoder::default();
        if let Ok(plaintext) = decoder.decode(encoded, (raw_length & 0xff_ffff) as usize) {
            let _ = Tree::from_bytes(plaintext);
        }
    }
});
