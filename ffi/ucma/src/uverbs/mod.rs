//! The kernel's uverbs device, the part libibverbs reaches without asking
//! the provider, emulated inside the process for rxu contexts:
//!
//! - `ibv_create_comp_channel` writes CREATE_COMP_CHANNEL to the context's
//!   `cmd_fd` and takes the fd from the response. Here that write makes a
//!   socket pair and answers with its read end, so the channel fd is real
//!   from the start (O_NONBLOCK, poll and epoll on it work before any CQ
//!   exists; reading it gives one 8-byte `struct ibv_cq *` per event; its
//!   close is the channel's end). The provider fetches the write end for
//!   rxud when a CQ is created on the channel
//!   (`rxu_uverbs_comp_channel_peer`).
//! - `ibv_import_device` asks the device for an async event fd
//!   (ASYNC_EVENT_ALLOC ioctl); the provider says beforehand which fd that
//!   is (`rxu_uverbs_set_async_fd`).
//!
//! The provider names the fds that are rxu `cmd_fd`s
//! (`rxu_uverbs_attach_cmd_fd`); nothing else is touched, and any other
//! command on them goes on to the file (/dev/null) as before.
//!
//! - [`abi`]: the byte layouts; [`command`]: decoding, with the kernel's
//!   errnos; [`state`]: the cmd fds and channels; [`shim`]: the entry
//!   points, with the copies from and to the application.

pub mod abi;
pub mod command;
pub mod shim;
pub mod state;
