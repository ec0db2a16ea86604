//! Support code for the fuzz targets (also run on stable by this crate's
//! tests).

pub mod cm_mad;
pub mod control;
pub mod slots;
pub mod ucma;
pub mod uverbs;
