//! Why a memory access was refused: what every [`super::Memory`] and the
//! window rules ([`super::window`]) answer.

/// Why a memory access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    #[error("no such key")]
    InvalidKey,
    #[error("key belongs to another protection domain")]
    WrongPd,
    #[error("access outside the registered region")]
    OutOfBounds,
    #[error("access flags do not permit this operation")]
    AccessDenied,
    #[error("atomic address not 8-byte aligned")]
    Misaligned,
    #[error("registered memory is no longer mapped")]
    Unmapped,
    /// The process that owns the memory has lost its whole address space:
    /// it is exiting, and its QPs are about to be destroyed. Unlike the
    /// errors above this says nothing about the request, so the responder
    /// drops the packet as if the QP were already gone (the requester
    /// retries, then gets RETRY_EXC_ERR, as from a destroyed QP on a NIC)
    /// instead of blaming the requester with a NAK.
    #[error("the memory's owner has exited")]
    Gone,
}
