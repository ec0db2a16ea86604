//! Errors of the engine's commands: the errno the kernel's rdma_cm / ucma
//! would return, and a message for the log.

use thiserror::Error;

/// A refused command. `errno()` is positive (EINVAL, EADDRINUSE, ...).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{msg} (errno {errno})")]
pub struct CmError {
    errno: i32,
    msg: String,
}

impl CmError {
    pub fn new(errno: i32, msg: impl Into<String>) -> CmError {
        CmError {
            errno,
            msg: msg.into(),
        }
    }

    pub fn errno(&self) -> i32 {
        self.errno
    }

    pub fn msg(&self) -> &str {
        &self.msg
    }

    pub(crate) fn inval(msg: impl Into<String>) -> CmError {
        CmError::new(libc::EINVAL, msg)
    }

    pub(crate) fn noent(id: u32) -> CmError {
        CmError::new(libc::ENOENT, format!("no cm id {id}"))
    }
}
