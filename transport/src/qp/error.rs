//! Misuse of the QP API, refused before anything changes.

use super::types::QpState;

/// Misuse of the QP API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QpError {
    #[error("operation not allowed in QP state {0:?}")]
    InvalidState(QpState),
    #[error("work queue full")]
    QueueFull,
    #[error("work request not valid for this QP: {0}")]
    InvalidWr(&'static str),
    #[error("attribute not valid: {0}")]
    InvalidAttr(&'static str),
}
