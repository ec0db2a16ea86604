//! C layouts of rdma-core's provider ABI (x86_64, glibc), written by hand
//! from the contract's tables (docs/libibverbs-contract.md §3) and checked
//! three ways: compile-time offset asserts here (`layout`), a test that
//! compiles the installed `verbs.h` and compares every public struct
//! (`tests`), and run-time checks against the loaded library
//! (`crate::version`).
//!
//! Hand layouts rather than bindgen: `driver.h` (verbs_context,
//! verbs_device, the ops table...) is not installed by any distribution, so
//! bindgen could cover only half; and what bindgen reads is the build
//! host's header, while what matters is the library loaded at run time.

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
compile_error!("the rxu provider's C layouts are written for x86_64 Linux with glibc");

pub mod attrs;
pub mod consts;
pub mod context;
pub mod device;
pub mod extended;
mod layout;
pub mod objects;
pub mod ops;
#[cfg(test)]
mod tests;
pub mod wr;

pub use attrs::*;
pub use context::*;
pub use device::*;
pub use extended::*;
pub use objects::*;
pub use ops::VerbsContextOps;
pub use wr::*;
