//! The public device and context structs (`verbs.h`): `struct
//! ibv_device`, `struct ibv_context` and `struct verbs_context` (648 bytes
//! with `context` at 320 in rdma-core 39..58; docs/libibverbs-contract.md §3.2).

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

/// `struct verbs_context`: library-owned op slots, the library's size of
/// the struct, then the public context (last).
#[repr(C)]
pub struct VerbsContext {
    /// 39 public op slots and the library's `priv`; written only by the
    /// library.
    pub slots: [usize; 39],
    /// `sizeof(struct verbs_context)` as compiled into the running library.
    pub sz: usize,
    pub context: IbvContext,
}

/// Size of `struct verbs_context` this provider is laid out for.
pub const VERBS_CONTEXT_SIZE: usize = 648;

impl VerbsContext {
    /// The `verbs_context` holding `ctx`.
    ///
    /// # Safety
    /// `ctx` must be the `context` member of a live `VerbsContext`.
    pub unsafe fn from_ibv(ctx: *mut IbvContext) -> *mut VerbsContext {
        let off = std::mem::offset_of!(VerbsContext, context);
        // SAFETY: per the contract, `ctx` lies `off` bytes into a
        // VerbsContext, so the subtraction stays inside that allocation.
        unsafe { ctx.cast::<u8>().sub(off).cast() }
    }
}
