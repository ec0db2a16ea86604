//! The client library's errors, each with the errno a C caller expects.

use std::io;

use rxu_abi::proto::ProtoError;
use rxu_abi::ring::RingError;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed (socket, mmap, eventfd...).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The daemon refused the request.
    #[error("rxud: {msg} (errno {errno})")]
    Daemon { errno: i32, msg: String },
    /// The daemon's reply or shared memory did not make sense.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Nothing listens on the device's control socket.
    #[error("rxu device {0:?} not found: is it up? run `rxu up`")]
    DeviceNotFound(String),
    /// The runtime directory or the daemon answering in it is not to be
    /// trusted (`rxu_abi::paths::TrustError`): EACCES or EPERM.
    #[error("{msg}")]
    Untrusted { errno: i32, msg: String },
    /// The daemon closed the control connection.
    #[error("rxud closed the connection")]
    Disconnected,
    /// The device's daemon is gone (IBV_EVENT_DEVICE_FATAL was delivered):
    /// nothing on this context works any more; close it.
    #[error("the rxu device is gone (its daemon rxud stopped or died)")]
    DeviceFatal,
    /// The call's arguments are invalid (checked before reaching the daemon).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// A queue is full (post_send / post_recv).
    #[error("queue full")]
    QueueFull,
    /// The object is still in use (EBUSY), found by the client itself.
    #[error("busy: {0}")]
    Busy(&'static str),
    /// An empty entry of the GID table (ENODATA, as the kernel's GID
    /// lookup answers).
    #[error("no GID at index {0}")]
    NoGid(u32),
}

impl Error {
    /// The errno a verbs call would return for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::Daemon { errno, .. } if *errno > 0 => *errno,
            Error::Daemon { .. } => libc::EIO,
            Error::Protocol(_) => libc::EPROTO,
            Error::DeviceNotFound(_) => libc::ENODEV,
            Error::Untrusted { errno, .. } => *errno,
            Error::Disconnected => libc::ENOTCONN,
            Error::DeviceFatal => libc::EIO,
            Error::Invalid(_) => libc::EINVAL,
            Error::QueueFull => libc::ENOMEM,
            Error::NoGid(_) => libc::ENODATA,
            Error::Busy(_) => libc::EBUSY,
        }
    }

    pub(crate) fn protocol(what: impl std::fmt::Display) -> Error {
        Error::Protocol(what.to_string())
    }
}

impl From<ProtoError> for Error {
    fn from(e: ProtoError) -> Error {
        Error::protocol(e)
    }
}

impl From<RingError> for Error {
    fn from(e: RingError) -> Error {
        match e {
            RingError::Io(e) => Error::Io(e),
            other => Error::protocol(other),
        }
    }
}

/// Result of a client call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A post call that stopped at one work request, like `ibv_post_send`'s
/// `bad_wr`: requests before `index` were posted, the rest were not.
#[derive(Debug, thiserror::Error)]
#[error("work request {index}: {error}")]
pub struct PostError {
    pub index: usize,
    pub error: Error,
}

impl PostError {
    pub fn errno(&self) -> i32 {
        self.error.errno()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos() {
        assert_eq!(Error::QueueFull.errno(), libc::ENOMEM);
        assert_eq!(Error::Invalid("x").errno(), libc::EINVAL);
        let d = Error::Daemon {
            errno: libc::EBUSY,
            msg: "in use".into(),
        };
        assert_eq!(d.errno(), libc::EBUSY);
        assert_eq!(
            Error::Io(io::Error::from_raw_os_error(libc::EBADF)).errno(),
            libc::EBADF
        );
        let nf = Error::DeviceNotFound("rxu0".into()).to_string();
        assert!(nf.contains("rxu up"), "{nf}");
    }
}
