//! Arbitrary bytes as a ucma command of the in-process rdma_cm emulator
//! (`rxu_fuzz::ucma::run`): errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rxu_fuzz::ucma::run(data);
});
