//! Arbitrary bytes as a sequence of sessions, Hellos with any fds and
//! requests against one in-process daemon device
//! (`rxu_fuzz::control::Sequence`): no panic, and every table and fd back
//! to where it was once the sessions close.
#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use rxu_fuzz::control::Sequence;

static SEQ: Mutex<Option<Sequence>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut g = SEQ.lock().unwrap_or_else(|p| p.into_inner());
    let seq = g.get_or_insert_with(|| Sequence::new([127, 0, 78, 1].into()));
    seq.run(data);
});
