//! Codec tests: golden bytes that pin every field's position (MAD offsets,
//! i.e. CM offset + 24), header refusals, and property tests.

mod arb;
mod golden;
mod header;
mod prop;
