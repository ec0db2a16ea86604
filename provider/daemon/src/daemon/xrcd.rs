//! XRC domains: which sessions opened which domain, and the domains
//! shared through a file (`ibv_open_xrcd` with an fd), found again by the
//! file's device and inode as the kernel finds them. A domain lives while
//! a session has it open; a session's XRC SRQs and target QPs keep it
//! from being closed (`daemon/xrc.rs` checks that).

use std::collections::{BTreeMap, HashMap};

/// The device's XRC domains.
#[derive(Debug, Default)]
pub struct Xrcds {
    next: u32,
    /// Domain -> the sessions that have it open, with how many times.
    opens: BTreeMap<u32, BTreeMap<u32, u32>>,
    /// (device, inode) of a file -> the domain it names.
    files: HashMap<(u64, u64), u32>,
}

/// Why a domain could not be opened (the kernel's errnos).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenError {
    pub errno: i32,
    pub msg: &'static str,
}

impl Xrcds {
    /// Opens a domain for `session`: a new private one (`file` None), or
    /// the one the file names (made if `create`; refused if it exists and
    /// `excl`).
    pub fn open(
        &mut self,
        session: u32,
        file: Option<(u64, u64)>,
        create: bool,
        excl: bool,
    ) -> Result<u32, OpenError> {
        let known = file.and_then(|f| self.files.get(&f).copied());
        let x = match (file, known) {
            (Some(_), Some(_)) if excl => {
                return Err(OpenError {
                    errno: libc::EINVAL,
                    msg: "O_EXCL: the file names an XRC domain already",
                })
            }
            (Some(_), Some(x)) => x,
            (Some(_), None) if !create => {
                return Err(OpenError {
                    errno: libc::EINVAL,
                    msg: "the file names no XRC domain and O_CREAT is not set",
                })
            }
            (f, _) => {
                let x = self.fresh();
                if let Some(f) = f {
                    self.files.insert(f, x);
                }
                x
            }
        };
        *self.opens.entry(x).or_default().entry(session).or_default() += 1;
        Ok(x)
    }

    fn fresh(&mut self) -> u32 {
        loop {
            self.next = self.next.wrapping_add(1).max(1);
            if !self.opens.contains_key(&self.next) {
                return self.next;
            }
        }
    }

    /// Whether `session` has domain `x` open.
    pub fn is_open(&self, session: u32, x: u32) -> bool {
        self.opens.get(&x).is_some_and(|s| s.contains_key(&session))
    }

    /// How many times `session` has `x` open.
    pub fn opens_of(&self, session: u32, x: u32) -> u32 {
        self.opens
            .get(&x)
            .and_then(|s| s.get(&session))
            .copied()
            .unwrap_or(0)
    }

    /// Drops one open of `x` by `session`; false if it had none.
    pub fn close(&mut self, session: u32, x: u32) -> bool {
        let Some(users) = self.opens.get_mut(&x) else {
            return false;
        };
        let Some(n) = users.get_mut(&session) else {
            return false;
        };
        *n -= 1;
        if *n == 0 {
            users.remove(&session);
        }
        self.forget_if_unused(x);
        true
    }

    /// Drops every open of a session that is gone.
    pub fn release_session(&mut self, session: u32) {
        let xs: Vec<u32> = self
            .opens
            .iter()
            .filter(|(_, u)| u.contains_key(&session))
            .map(|(&x, _)| x)
            .collect();
        for x in xs {
            if let Some(u) = self.opens.get_mut(&x) {
                u.remove(&session);
            }
            self.forget_if_unused(x);
        }
    }

    fn forget_if_unused(&mut self, x: u32) {
        if self.opens.get(&x).is_some_and(|u| u.is_empty()) {
            self.opens.remove(&x);
            self.files.retain(|_, v| *v != x);
        }
    }

    /// Domains open now.
    pub fn len(&self) -> usize {
        self.opens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.opens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: (u64, u64) = (8, 1234);

    #[test]
    fn a_file_names_one_domain_until_its_last_open_closes() {
        let mut x = Xrcds::default();
        let err = x.open(1, Some(F), false, false).unwrap_err();
        assert_eq!(err.errno, libc::EINVAL);
        let a = x.open(1, Some(F), true, false).unwrap();
        let b = x.open(2, Some(F), true, false).unwrap();
        assert_eq!(a, b, "two sessions, one file: one domain");
        assert_eq!(
            x.open(3, Some(F), true, true).unwrap_err().errno,
            libc::EINVAL
        );
        assert_eq!(x.open(2, Some(F), false, false).unwrap(), a);
        assert_eq!(x.opens_of(2, a), 2);
        assert!(x.close(1, a));
        assert!(!x.close(1, a), "session 1 has no open left");
        x.release_session(2);
        assert!(x.is_empty());
        let c = x.open(1, Some(F), true, false).unwrap();
        assert!(x.is_open(1, c) && !x.is_open(2, c));
    }

    #[test]
    fn private_domains_are_never_shared() {
        let mut x = Xrcds::default();
        let a = x.open(1, None, false, false).unwrap();
        let b = x.open(1, None, false, false).unwrap();
        assert_ne!(a, b);
        assert!(!x.is_open(2, a));
        assert!(x.close(1, a) && x.close(1, b));
        assert!(x.is_empty());
    }
}
