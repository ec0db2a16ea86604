//! The daemon's own counters (the engine and the memory keep theirs).

/// Daemon-level counters, reported by Stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DaemonCounters {
    pub clients_accepted: u64,
    pub requests: u64,
    pub requests_refused: u64,
    pub wqes_posted: u64,
    pub bad_wqes: u64,
    pub cqes_delivered: u64,
    pub cqes_dropped: u64,
    pub cq_overruns: u64,
    pub channel_events: u64,
    pub async_events: u64,
    pub async_events_dropped: u64,
    pub sleeps: u64,
    pub doorbells: u64,
    /// Receive rings read in the middle of a receive batch because a
    /// packet took a QP's last receive WQE.
    pub recv_refills: u64,
    /// Bytes of every successful registration since start.
    pub mr_bytes_registered: u64,
    /// Regions released (DeregMr, or with their client).
    pub mr_deregistrations: u64,
    /// Port state changes and GID table changes (netdev events).
    pub port_changes: u64,
    pub gid_changes: u64,
    /// Times rxud shrank its tables and trimmed its heap after clients
    /// destroyed many objects (`Device::give_back_memory`).
    pub heap_trims: u64,
}
