//! Asynchronous events: the 16-byte records the daemon writes to a
//! client's async socket (`struct ib_uverbs_async_event_desc`).

/// `enum ibv_event_type` values.
pub mod event_type {
    pub const CQ_ERR: u32 = 0;
    pub const QP_FATAL: u32 = 1;
    pub const QP_REQ_ERR: u32 = 2;
    pub const QP_ACCESS_ERR: u32 = 3;
    pub const COMM_EST: u32 = 4;
    pub const SQ_DRAINED: u32 = 5;
    pub const PATH_MIG: u32 = 6;
    pub const PATH_MIG_ERR: u32 = 7;
    pub const DEVICE_FATAL: u32 = 8;
    pub const PORT_ACTIVE: u32 = 9;
    pub const PORT_ERR: u32 = 10;
    pub const LID_CHANGE: u32 = 11;
    pub const PKEY_CHANGE: u32 = 12;
    pub const SM_CHANGE: u32 = 13;
    pub const SRQ_ERR: u32 = 14;
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    pub const CLIENT_REREGISTER: u32 = 17;
    pub const GID_CHANGE: u32 = 18;
    pub const WQ_FATAL: u32 = 19;
}

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
