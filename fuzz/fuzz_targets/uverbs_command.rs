//! Arbitrary bytes as a write and as an ioctl on an rxu context's cmd_fd,
//! through the preload's uverbs decoders (`rxu_fuzz::uverbs::run`):
//! errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rxu_fuzz::uverbs::run(data);
});
