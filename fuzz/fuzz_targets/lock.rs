//! Lock objects, and what is read of them (their age, whether they are stale).
#![no_main]

use libfuzzer_sys::fuzz_target;
use neverwiped::backend::ObjectKind;
use neverwiped::format::lock::Lock;
use neverwiped_fuzz::{keys, object_associated_data};

fuzz_target!(|data: &[u8]| {
    neverwiped_fuzz::open_object_both_ways::<Lock>(ObjectKind::Locks, data);
    let sealer = &keys().sealer;
    let sealed = sealer.seal(data, &object_associated_data(ObjectKind::Locks));
    if let Ok(lock) =
        neverwiped::format::open_object::<Lock>(sealer, ObjectKind::Locks, &sealed, "fuzzed lock")
    {
        let now = chrono_now();
        let _ = lock.age_secs(now);
        let _ = lock.is_stale(now);
    }
});

fn chrono_now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}
