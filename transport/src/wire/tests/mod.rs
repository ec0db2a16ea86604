//! Property tests of the wire codec and the ICRC (unit tests of single
//! pieces live next to them; real captures are in transport/tests/vectors.rs).

mod props;
mod xrc;
