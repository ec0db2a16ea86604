//! The device's memory windows, filed by index (the upper 24 bits of the
//! rkey, fixed for a window's life; the low 8 bits change with each bind).
//! The rules of binding and use are the transport's
//! ([`transport::qp::window`]); this table only keeps who owns what.

use transport::qp::window::Window;

use super::keys::KeyMap;

struct Entry {
    client: u32,
    win: Window,
}

/// Every window of a device.
#[derive(Default)]
pub(crate) struct Windows {
    map: KeyMap<Entry>,
}

impl Windows {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether a window has index `i` (an MR key must not share it).
    pub(crate) fn has_index(&self, i: u32) -> bool {
        self.map.contains_key(&i)
    }

    pub(crate) fn insert(&mut self, client: u32, win: Window) {
        self.map
            .insert(Window::index(win.rkey), Entry { client, win });
    }

    /// The window a key names (by index: the key may be stale).
    pub(crate) fn get(&self, rkey: u32) -> Option<&Window> {
        self.map.get(&Window::index(rkey)).map(|e| &e.win)
    }

    pub(crate) fn get_mut(&mut self, rkey: u32) -> Option<&mut Window> {
        self.map.get_mut(&Window::index(rkey)).map(|e| &mut e.win)
    }

    /// Removes `client`'s window named by `rkey` (any of its keys).
    pub(crate) fn remove(&mut self, client: u32, rkey: u32) -> Option<Window> {
        let i = Window::index(rkey);
        match self.map.get(&i) {
            Some(e) if e.client == client => self.map.remove(&i).map(|e| e.win),
            _ => None,
        }
    }

    /// Removes every window of `client`.
    pub(crate) fn remove_client(&mut self, client: u32) {
        self.map.retain(|_, e| e.client != client);
    }

    /// Windows of `client`.
    pub(crate) fn client_count(&self, client: u32) -> usize {
        self.map.values().filter(|e| e.client == client).count()
    }

    /// Frees the type 2 windows bound through QP `qpn`.
    pub(crate) fn release_qp(&mut self, qpn: u32) {
        for e in self.map.values_mut() {
            if e.win.binding.is_some_and(|b| b.qpn == Some(qpn)) {
                e.win.binding = None;
            }
        }
    }

    /// Bound windows opening onto the region with key `mr`.
    pub(crate) fn bound_to(&self, mr: u32) -> usize {
        self.map
            .values()
            .filter(|e| e.win.binding.is_some_and(|b| b.mr == mr))
            .count()
    }
}
