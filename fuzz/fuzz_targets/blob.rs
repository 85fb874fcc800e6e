//! Compressed blobs: every decoder of a codec byte and body (input: the expected plaintext
//! length, a little-endian u32 capped at 16 MiB, then the encoding).
#![no_main]

use libfuzzer_sys::fuzz_target;
use neverwiped::compress::{decode, decode_unsized, Decoder};

/// The largest plaintext a metadata object may have, lowered for the fuzzer's memory limit.
const UNSIZED_LIMIT_BYTES: usize = 64 * 1024 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((length, encoded)) = neverwiped_fuzz::split_u32(data) else {
        return;
    };
    let expected = (length & 0xff_ffff) as usize;
    let decoded = decode(encoded.to_vec(), expected);
    if let Ok(plaintext) = &decoded {
        assert_eq!(plaintext.len(), expected);
    }
    let mut decoder = Decoder::default();
    let in_place = decoder.decode(encoded, expected).map(|p| p.to_vec());
    assert_eq!(decoded.is_ok(), in_place.is_ok());
    if let (Ok(a), Ok(b)) = (&decoded, &in_place) {
        assert_eq!(a, b, "the two decoders disagree");
    }
    if let Ok(plaintext) = decode_unsized(encoded, UNSIZED_LIMIT_BYTES) {
        assert!(plaintext.len() <= UNSIZED_LIMIT_BYTES);
    }
});
