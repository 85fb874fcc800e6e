//! Key objects: parsing, and unwrapping the master key where the KDF parameters are cheap
//! enough to run per input (the parameters' upper bounds are checked by `KdfParams::derive`
//! before any memory is taken, and a unit test covers them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use neverwiped::format::key::KeyFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = KeyFile::parse(data, "fuzzed key") {
        let params = key.kdf.params;
        if params.memory_kib <= 256 && params.iterations <= 2 && params.parallelism <= 2 {
            let _ = key.unwrap_master(b"fuzz", "fuzzed key");
        }
    }
});
