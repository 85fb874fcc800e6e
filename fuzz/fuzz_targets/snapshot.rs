//! Snapshot objects.
#![no_main]

use libfuzzer_sys::fuzz_target;
use neverwiped::backend::ObjectKind;
use neverwiped::format::snapshot::Snapshot;

fuzz_target!(|data: &[u8]| {
    neverwiped_fuzz::open_object_both_ways::<Snapshot>(ObjectKind::Snapshots, data);
});
