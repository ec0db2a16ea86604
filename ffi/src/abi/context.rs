//! The public device and context structs (`verbs.h`): `struct
//! ibv_device`, `struct ibv_context` and the end of `struct verbs_context`
//! (whose size differs between releases: docs/provider-abi.md).

use std::ffi::{c_char, c_int, c_void};

/// `struct ibv_device` (664).
#[repr(C)]
pub struct IbvDevice {
    /// `_ops._dummy1/_dummy2`: must stay NULL.
    pub _dummy: [usize; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

/// `struct ibv_context` (328).
#[repr(C)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    /// `struct ibv_context_ops`: 32 slots the library fills in
    /// `verbs_set_ops`; the provider never writes them.
    pub ops: [usize; 32],
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    /// `UINTPTR_MAX` marks an extended (`verbs_context`) context.
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context`, only ever behind a pointer: its size depends on
/// the running release (648..696 bytes in rdma-core 34..65; new members are
/// added at the front), so the provider never lays it out whole. The
/// library writes all of it; the provider reads only [`VerbsContextTail`].
#[repr(C)]
pub struct VerbsContext {
    _opaque: [u8; 0],
}

/// The last two members of `struct verbs_context` in every release: the
/// library's `sizeof(struct verbs_context)` right before the public
/// context, which is last.
#[repr(C)]
pub struct VerbsContextTail {
    pub sz: usize,
    pub context: IbvContext,
}
