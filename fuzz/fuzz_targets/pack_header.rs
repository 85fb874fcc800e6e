//! A pack's trailing header: as stored, and as the plaintext of a sealed header behind a region
//! of blob bytes (input: the region's length as a little-endian u16, then the header plaintext).
#![no_main]

use libfuzzer_sys::fuzz_target;
use neverwiped::format::pack::read_header;
use neverwiped_fuzz::{keys, PACK_HEADER_ASSOCIATED_DATA};

fuzz_target!(|data: &[u8]| {
    let sealer = &keys().sealer;
    let _ = read_header(sealer, data, "fuzzed pack");
    if let Some((front, header)) = data.split_at_checked(2) {
        let region = u16::from_le_bytes([front[0], front[1]]) as usize;
        let mut pack = vec![0u8; region];
        let sealed = sealer.seal(header, PACK_HEADER_ASSOCIATED_DATA);
        pack.extend_from_slice(&sealed);
        pack.extend_from_slice(&(sealed.len() as u32).to_le_bytes());
        if let Ok(entries) = read_header(sealer, &pack, "fuzzed pack") {
            for entry in entries {
                assert!(entry.offset as usize + entry.length as usize <= region);
            }
        }
    }
});
