//! Arbitrary bytes as a CM MAD: parse never panics; whatever parses comes
//! back unchanged through emit -> parse. See `rxu_fuzz::cm_mad`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rxu_fuzz::cm_mad::run(data);
});
