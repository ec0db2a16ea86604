//! What the kernel's ucma keeps per file and per id, kept by the process:
//! event channels (the emulated open files), ids and multicast joins.
//! Handles are allocated lowest-free from 0, as the kernel's xarray does;
//! ids are global to the process and belong to one channel (an id used
//! through another channel's fd is EINVAL, an unknown one ENOENT).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{OwnedFd, RawFd};

use rxu_abi::proto::cm::RouteInfo;
use rxu_abi::proto::QpType;

use crate::command::Errno;

/// One emulated open of `/dev/infiniband/rdma_cm`.
pub struct Channel {
    /// The number daemons know the channel by.
    pub num: u32,
    /// Our end of the socket pair (the application has the other, `fd`).
    pub b: OwnedFd,
    /// Devices whose daemon has a copy of `b` (AttachChannel sent).
    pub attached: Vec<usize>,
}

/// Options set before the id reached a daemon, passed with `Bind`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingOptions {
    pub reuseaddr: bool,
    pub afonly: bool,
    pub tos: Option<u8>,
    pub ack_timeout: Option<u8>,
}

/// One rdma_cm id.
pub struct Id {
    /// librdmacm's `cma_id_private` address, echoed in events (0 for an id
    /// of a connect request until it is accepted: its events are dropped).
    pub uid: u64,
    pub ps: u16,
    pub qp_type: QpType,
    /// The application's fd of the channel the id belongs to.
    pub channel: RawFd,
    /// Events of this id handed to the application (DESTROY_ID and
    /// MIGRATE_ID report it; librdmacm waits until it acked as many).
    pub events_reported: u32,
    /// (device, daemon id) pairs: one for a bound id, one per device for a
    /// wildcard listener, none before binding.
    pub bindings: Vec<(usize, u32)>,
    /// Bound to a wildcard address: no device of its own (QUERY_ROUTE
    /// reports node_guid 0, as the kernel does for such ids).
    pub wildcard: bool,
    pub listening: bool,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub route: RouteInfo,
    pub options: PendingOptions,
}

impl Id {
    pub fn new(uid: u64, ps: u16, qp_type: QpType, channel: RawFd) -> Self {
        Id {
            uid,
            ps,
            qp_type,
            channel,
            events_reported: 0,
            bindings: Vec::new(),
            wildcard: false,
            listening: false,
            src: None,
            dst: None,
            route: RouteInfo::default(),
            options: PendingOptions::default(),
        }
    }

    /// The id's own device, when it has one (not a wildcard listener).
    pub fn device(&self) -> Option<(usize, u32)> {
        if self.wildcard {
            None
        } else {
            self.bindings.first().copied()
        }
    }
}

/// A multicast join (`JOIN_IP_MCAST`): its own handle space.
pub struct Mcast {
    pub id: u32,
    pub uid: u64,
    pub addr: SocketAddr,
    pub events_reported: u32,
}

/// Everything, behind the process's one lock.
#[derive(Default)]
pub struct Table {
    pub channels: HashMap<RawFd, Channel>,
    pub ids: HashMap<u32, Id>,
    /// (device, daemon id) -> handle.
    pub by_daemon: HashMap<(usize, u32), u32>,
    pub mcs: HashMap<u32, Mcast>,
    next_channel: u32,
}

/// The lowest number not in use.
fn lowest_free<V>(m: &HashMap<u32, V>) -> u32 {
    (0..=u32::MAX)
        .find(|h| !m.contains_key(h))
        .unwrap_or(u32::MAX)
}

impl Table {
    pub fn add_channel(&mut self, fd: RawFd, b: OwnedFd) -> u32 {
        self.next_channel = self.next_channel.wrapping_add(1);
        let num = self.next_channel;
        self.channels.insert(
            fd,
            Channel {
                num,
                b,
                attached: Vec::new(),
            },
        );
        num
    }

    pub fn add_id(&mut self, id: Id) -> u32 {
        let h = lowest_free(&self.ids);
        for &b in &id.bindings {
            self.by_daemon.insert(b, h);
        }
        self.ids.insert(h, id);
        h
    }

    /// The id `h` used through channel `fd`: ENOENT / EINVAL as the kernel.
    pub fn id_of(&mut self, fd: RawFd, h: u32) -> Result<&mut Id, Errno> {
        match self.ids.get_mut(&h) {
            None => Err(libc::ENOENT),
            Some(id) if id.channel != fd => Err(libc::EINVAL),
            Some(id) => Ok(id),
        }
    }

    pub fn bind(&mut self, h: u32, dev: usize, daemon_id: u32) {
        if let Some(id) = self.ids.get_mut(&h) {
            id.bindings.push((dev, daemon_id));
            self.by_daemon.insert((dev, daemon_id), h);
        }
    }

    /// Removes an id and its joins; returns it.
    pub fn remove_id(&mut self, h: u32) -> Option<Id> {
        let id = self.ids.remove(&h)?;
        for b in &id.bindings {
            self.by_daemon.remove(b);
        }
        self.mcs.retain(|_, m| m.id != h);
        Some(id)
    }

    pub fn add_mcast(&mut self, m: Mcast) -> u32 {
        let h = lowest_free(&self.mcs);
        self.mcs.insert(h, m);
        h
    }

    /// The join `h` used through channel `fd`.
    pub fn mcast_of(&self, fd: RawFd, h: u32) -> Result<&Mcast, Errno> {
        let m = self.mcs.get(&h).ok_or(libc::ENOENT)?;
        match self.ids.get(&m.id) {
            Some(id) if id.channel == fd => Ok(m),
            _ => Err(libc::EINVAL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_lowest_free_and_owned_by_a_channel() {
        let mut t = Table::default();
        let a = t.add_id(Id::new(1, 0x106, QpType::Rc, 5));
        let b = t.add_id(Id::new(2, 0x106, QpType::Rc, 5));
        assert_eq!((a, b), (0, 1));
        assert!(t.id_of(5, 0).is_ok());
        assert_eq!(t.id_of(6, 0).err(), Some(libc::EINVAL));
        assert_eq!(t.id_of(5, 9).err(), Some(libc::ENOENT));
        t.bind(a, 0, 40);
        assert_eq!(t.by_daemon.get(&(0, 40)), Some(&a));
        t.remove_id(a);
        assert!(t.by_daemon.is_empty());
        assert_eq!(t.add_id(Id::new(3, 0x106, QpType::Rc, 5)), 0, "reused");
    }
}
