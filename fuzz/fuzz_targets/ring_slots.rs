//! Arbitrary bytes as a client's SQ and RQ slots, through the daemon's slot
//! decoder into two queue pairs running against the daemon's registered
//! memory table: an error completion or a refused post, never a panic,
//! never an access outside the client's registered memory. See
//! `rxu_fuzz::slots`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rxu_fuzz::slots::run(data);
});
