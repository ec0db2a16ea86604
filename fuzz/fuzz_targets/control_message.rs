//! Arbitrary bytes as a control-protocol message (`rxu_fuzz::control::decode`):
//! every decoder refuses or decodes, and what decodes round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rxu_fuzz::control::decode(data);
});
