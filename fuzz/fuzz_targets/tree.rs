//! Tree blobs: the JSON alone, and the encoding inside a sealed blob (input: the length the index
//! gives the plaintext, a little-endian u32 capped at 16 MiB, then codec byte and body). Whatever
//! decodes must encode to bytes that decode to the same tree: the walk reuses a parent tree's id
//! only when encoding it gives its stored bytes back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use neverwiped::compress::Decoder;
use neverwiped::format::tree::Tree;

fn round_trips(plaintext: &[u8]) {
    if let Ok(tree) = Tree::from_bytes(plaintext) {
        let encoded = tree.to_bytes();
        let again = Tree::from_bytes(&encoded).expect("an encoded tree decodes");
        assert_eq!(again, tree, "a tree changed through encoding");
        assert_eq!(again.to_bytes(), encoded, "encoding is not stable");
    }
}

fuzz_target!(|data: &[u8]| {
    round_trips(data);
    if let Some((raw_length, encoded)) = neverwiped_fuzz::split_u32(data) {
        let mut decoder = Decoder::default();
        if let Ok(plaintext) = decoder.decode(encoded, (raw_length & 0xff_ffff) as usize) {
            round_trips(plaintext);
        }
    }
});
