//! `librxu-ucma.so`: the kernel's rdma_cm character device
//! (`/dev/infiniband/rdma_cm`, ucma ABI 4) emulated inside the process, so
//! the system's unmodified librdmacm runs on rxu devices. Loaded with
//! `LD_PRELOAD` (`rxu up` / `rxu env` print it).
//!
//! - [`command`]: decoding one ucma command, with the kernel's errnos;
//! - [`abi`]: the byte layouts of commands and responses;
//! - [`table`]: channels, ids, multicast joins;
//! - [`core`]: executing commands against the table and the daemons
//!   ([`daemon`], the `Cm` messages of `rxu_abi::proto::cm`), and turning
//!   event records into event responses ([`event`]);
//! - [`shim`]: the process-wide lock and the blocking GET_EVENT;
//! - [`uverbs`]: the part of the uverbs device libibverbs uses without the
//!   provider (completion channels, the async fd of an imported context),
//!   for rxu contexts only;
//! - `interpose`: the libc symbols (open, fstat, write, ioctl, close) of
//!   the preload library, and `exports`: the functions the rxu provider
//!   calls (feature `interpose`, on by default).

pub mod abi;
pub mod command;
pub mod core;
pub mod daemon;
pub mod event;
pub mod fdset;
pub mod mem;
pub mod netdev;
pub mod owner;
pub mod shim;
pub mod table;
pub mod uverbs;

#[cfg(test)]
mod fake_daemon;

#[cfg(all(feature = "interpose", not(test)))]
mod exports;
#[cfg(all(feature = "interpose", not(test)))]
mod interpose;
