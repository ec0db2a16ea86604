//! The context: one client connection to the device's rxud per
//! `ibv_open_device`.
//!
//! - [`state`]: the per-context state every op reaches through its
//!   `ibv_context` (below the ops).
//! - [`close`]: `free_context`, an op of the table.
//! - [`open`]: `alloc_context`, a device op; installs the ops table.
//! - [`import`]: `import_context`, the device op of `ibv_import_device`.

pub mod close;
pub mod import;
pub mod open;
pub mod state;
