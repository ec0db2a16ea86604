//! The bytes of the uverbs device's two interfaces that libibverbs uses on
//! a context's `cmd_fd` (`ib_user_verbs.h`, `rdma_user_ioctl_cmds.h`,
//! `ib_user_ioctl_cmds.h`; the values are checked against the installed
//! headers by the provider's C tests):
//!
//! - `write`: an 8-byte `struct ib_uverbs_cmd_hdr {u32 command; u16
//!   in_words; u16 out_words}` (words of 4 bytes, the header included in
//!   `in_words`), then the command, whose first field is the `u64`
//!   address of the response;
//! - `ioctl(fd, RDMA_VERBS_IOCTL, hdr)`: a 24-byte `struct
//!   ib_uverbs_ioctl_hdr {u16 length; u16 object_id; u16 method_id; u16
//!   num_attrs; u64 reserved1; u32 driver_id; u32 reserved2}` followed by
//!   `num_attrs` 16-byte `struct ib_uverbs_attr {u16 attr_id; u16 len;
//!   u16 flags; u16 attr_data; u64 data}`.

/// `sizeof(struct ib_uverbs_cmd_hdr)`.
pub const CMD_HDR_LEN: usize = 8;
/// `IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL`.
pub const CMD_CREATE_COMP_CHANNEL: u32 = 17;
/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`: the `_ex` commands (another header).
pub const CMD_FLAG_EXTENDED: u32 = 0x8000_0000;
/// `sizeof(struct ib_uverbs_create_comp_channel)`: the response address.
pub const CREATE_COMP_CHANNEL_LEN: usize = 8;
/// `sizeof(struct ib_uverbs_create_comp_channel_resp)`: `u32 fd`.
pub const CREATE_COMP_CHANNEL_RESP_LEN: usize = 4;
/// The bytes of one completion event (`struct ib_uverbs_comp_event_desc`:
/// the CQ's `user_handle`).
pub const COMP_EVENT_LEN: usize = 8;

/// `RDMA_VERBS_IOCTL` = `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)`.
pub const RDMA_VERBS_IOCTL: u64 = 0xc018_1b01;
/// `sizeof(struct ib_uverbs_ioctl_hdr)`.
pub const IOCTL_HDR_LEN: usize = 24;
/// `sizeof(struct ib_uverbs_attr)`.
pub const IOCTL_ATTR_LEN: usize = 16;
/// Offset of `data` in an attribute.
pub const ATTR_DATA_AT: usize = 8;
/// `IB_UVERBS_MAX_CMD_SZ`: the longest ioctl command the kernel takes.
pub const IOCTL_MAX_LEN: usize = 4096;
/// `UVERBS_OBJECT_ASYNC_EVENT`, its `UVERBS_METHOD_ASYNC_EVENT_ALLOC` and
/// that method's `UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE` (an FD out).
pub const OBJECT_ASYNC_EVENT: u16 = 0x10;
pub const METHOD_ASYNC_EVENT_ALLOC: u16 = 0;
pub const ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE: u16 = 0;
