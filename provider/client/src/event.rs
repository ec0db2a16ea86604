//! Asynchronous events: the 16-byte records the daemon writes to a
//! client's async socket (`struct ib_uverbs_async_event_desc`).

/// `enum ibv_event_type` values (the shared vocabulary's).
pub use transport::verbs::event_type;

/// Size of one async event record.
pub const ASYNC_EVENT_LEN: usize = 16;

/// One async event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The `user_handle` of the QP, CQ or SRQ it concerns, or the port
    /// number for device and port events.
    pub element: u64,
    /// An [`event_type`] value.
    pub event_type: u32,
}

impl AsyncEvent {
    /// Decodes a record (native-endian, as the kernel's).
    pub fn from_record(b: &[u8; ASYNC_EVENT_LEN]) -> AsyncEvent {
        let mut e = [0u8; 8];
        e.copy_from_slice(&b[0..8]);
        let mut t = [0u8; 4];
        t.copy_from_slice(&b[8..12]);
        AsyncEvent {
            element: u64::from_ne_bytes(e),
            event_type: u32::from_ne_bytes(t),
        }
    }

    /// Encodes a record (for tests and daemon-side symmetry).
    pub fn to_record(&self) -> [u8; ASYNC_EVENT_LEN] {
        let mut b = [0u8; ASYNC_EVENT_LEN];
        b[0..8].copy_from_slice(&self.element.to_ne_bytes());
        b[8..12].copy_from_slice(&self.event_type.to_ne_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip() {
        let e = AsyncEvent {
            element: 0x7fff_1234_5678,
            event_type: event_type::SRQ_LIMIT_REACHED,
        };
        let r = e.to_record();
        assert_eq!(&r[12..], &[0; 4]);
        assert_eq!(AsyncEvent::from_record(&r), e);
    }
}
