//! The IB CM on the wire (IBA vol. 1 ch. 12; byte positions as the kernel's
//! `ibta_vol1_c12.h` states them). Offsets below are "CM offsets", counted
//! from the start of the MAD data area (MAD offset - 24).

mod msg;

pub use msg::*;
