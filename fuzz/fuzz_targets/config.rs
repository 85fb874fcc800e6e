//! The `config` object: its plain JSON part, its sealed parameters, and the parameters' JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use neverwiped::format::config::{ConfigFile, RepositoryParams};

fuzz_target!(|data: &[u8]| {
    let sealer = &neverwiped_fuzz::keys().sealer;
    if let Ok(config) = ConfigFile::parse(data) {
        let _ = config.open(sealer);
    }
    if let Ok(params) = serde_json::from_slice::<RepositoryParams>(data) {
        let _ = params.chunker.validate();
    }
});
