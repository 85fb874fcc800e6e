//! The REST server's listing of a folder (version 2 of the restic REST protocol). The parser's
//! struct is private to `backend/rest/mod.rs`, so this target parses with the same shape (`null` or
//! an array of `{"name": string, "size": u64}`) through the same `serde_json` call.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::Deserialize;

#[derive(Deserialize)]
#[allow(dead_code)]
struct ListedObject {
    name: String,
    size: u64,
}

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(listed)) = serde_json::from_slice::<Option<Vec<ListedObject>>>(data) {
        for object in listed {
            let _ = object.name.parse::<neverwiped::ids::ObjectId>();
        }
    }
});
