//! Completion channels (docs/libibverbs-contract.md §2.4). `ibv_create_comp_channel` never
//! reaches a provider: libibverbs writes a kernel command to `cmd_fd` and
//! takes the fd from the response.
//!
//! "emulated" (the default with `librxu-ucma.so` preloaded, as `rxu up` /
//! `rxu env` set it up): the preload answers that command itself with the
//! read end of a socket pair ([`crate::preload`]), so `channel->fd` is a
//! real fd from the start, with the application's flags. The first
//! `create_cq` on the channel fetches the write end from the preload and
//! hands it to rxud; nothing in the channel struct is touched.
//!
//! "adopt" (the contract's option C; the fallback without the preload, or
//! with `RXU_COMP_CHANNEL=adopt`):
//! `cmd_fd` stays the writable `/dev/null` libibverbs opened, so channel
//! creation "succeeds" with an indeterminate `channel->fd` (stack garbage,
//! or 0 from rdma-core 54). The first `create_cq` on the channel makes a
//! socket pair and overwrites `channel->fd` with (a duplicate of) its
//! read end — without closing the old value, which was never ours.
//!
//! Either way rxud writes one 8-byte record (the `struct ibv_cq *`) per
//! event to the write end; `ibv_get_cq_event` reads it;
//! `ibv_destroy_comp_channel` closes the channel fd. Several CQs may share
//! a channel: it is recognised by its pointer and the identity (st_dev,
//! st_ino) of the socket in `channel->fd`, so a freed-and-reused channel
//! struct is taken afresh.
//!
//! "refuse" (option A): `cmd_fd` is reopened read-only, so
//! `ibv_create_comp_channel` fails cleanly with EBADF. Chosen with
//! `RXU_COMP_CHANNEL=refuse`, and, without the preload, automatically when
//! `cmd_fd` is not /dev/null, since only /dev/null makes that write
//! harmless.

use std::ffi::c_int;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

use rxu_client::CompChannel;

use crate::abi::{IbvCompChannel, IbvContext};
use crate::guard::OpResult;
use crate::{log_err, log_info, preload};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelMode {
    Emulated,
    Adopt,
    Refuse,
}

/// (st_dev, st_ino, st_mode, st_rdev) of an open fd.
fn fd_stat(fd: c_int) -> Option<(u64, u64, u32, u64)> {
    // SAFETY: stat is plain data; all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`; a bad fd just fails.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino, st.st_mode, st.st_rdev))
}

fn fd_id(fd: c_int) -> Option<(u64, u64)> {
    fd_stat(fd).map(|(d, i, _, _)| (d, i))
}

fn is_dev_null(fd: c_int) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(null) = std::fs::metadata("/dev/null") else {
        return false;
    };
    matches!(fd_stat(fd), Some((_, _, mode, rdev))
        if mode & libc::S_IFMT == libc::S_IFCHR && rdev == null.rdev())
}

/// The channel strategy for a context whose `cmd_fd` is `cmd_fd`:
/// emulated if `emulate` hands it to the preload
/// ([`preload::attach_cmd_fd`]; not asked when `RXU_COMP_CHANNEL` says
/// `refuse` or `adopt`).
pub fn choose_mode(cmd_fd: c_int, emulate: impl FnOnce(c_int) -> bool) -> ChannelMode {
    let forced_adopt = match std::env::var("RXU_COMP_CHANNEL").as_deref() {
        Ok("refuse") => return ChannelMode::Refuse,
        Ok("adopt") => true,
        Err(_) => false,
        Ok(other) => {
            log_err!("RXU_COMP_CHANNEL={other:?}: expected adopt or refuse; ignored");
            false
        }
    };
    if !forced_adopt && emulate(cmd_fd) {
        ChannelMode::Emulated
    } else if is_dev_null(cmd_fd) {
        ChannelMode::Adopt
    } else {
        log_info!("cmd_fd is not /dev/null: completion channels refused");
        ChannelMode::Refuse
    }
}

fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Replaces `cmd_fd` (same number) by a read-only /dev/null: ioctls still
/// fail with ENOTTY (libibverbs' sysfs GID fallback), writes with EBADF.
pub fn make_cmd_fd_read_only(cmd_fd: c_int) -> OpResult<()> {
    let ro = std::fs::File::open("/dev/null").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    // SAFETY: dup3 onto cmd_fd, which we own (the library handed it over);
    // `ro` is closed when dropped.
    if unsafe { libc::dup3(ro.as_raw_fd(), cmd_fd, libc::O_CLOEXEC) } < 0 {
        return Err(last_errno());
    }
    Ok(())
}

struct Adopted {
    /// The `struct ibv_comp_channel *`.
    chan: usize,
    /// The fd number we stored in `channel->fd` and its identity.
    fd: c_int,
    dev: u64,
    ino: u64,
    comp: CompChannel,
    /// CQs created on it and not yet destroyed.
    cqs: usize,
    /// Made by the preload (forgotten with its last CQ: the preload
    /// knows it as long as the application keeps it open).
    emulated: bool,
}

impl Adopted {
    /// Whether `channel->fd` still holds the socket we installed.
    fn current(&self, fd: c_int) -> bool {
        fd == self.fd && fd_id(fd) == Some((self.dev, self.ino))
    }
}

/// The channels a context adopted.
pub struct Channels {
    mode: ChannelMode,
    list: Mutex<Vec<Adopted>>,
}

impl Channels {
    pub fn new(mode: ChannelMode) -> Self {
        Channels {
            mode,
            list: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Adopted>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The client channel behind `ch` for a new CQ, adopting `ch` if needed.
    ///
    /// # Safety
    /// `ch` must point to a live `struct ibv_comp_channel`.
    pub unsafe fn attach(
        &self,
        ctx: *mut IbvContext,
        ch: *mut IbvCompChannel,
    ) -> OpResult<CompChannel> {
        if self.mode == ChannelMode::Refuse {
            log_err!("completion channels are disabled for this context");
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: ch points to a live ibv_comp_channel (the contract).
        let chan = unsafe { &mut *ch };
        if chan.context != ctx {
            log_err!("create_cq: the completion channel belongs to another context");
            return Err(libc::EINVAL);
        }
        let key = ch as usize;
        let mut list = self.lock();
        if let Some(a) = list
            .iter_mut()
            .find(|a| a.chan == key && a.current(chan.fd))
        {
            a.cqs += 1;
            return Ok(a.comp.clone());
        }
        // New (or a freed-and-reused struct): forget unused stale entries.
        list.retain(|a| a.cqs > 0 || (!a.emulated && a.chan != key && a.current_elsewhere()));
        if self.mode == ChannelMode::Emulated {
            if let Some(wr) = preload::comp_channel_peer(chan.fd) {
                let fd = chan.fd;
                let (dev, ino) = fd_id(fd).ok_or(libc::EBADF)?;
                // SAFETY: F_DUPFD_CLOEXEC on the application's channel fd,
                // which the preload just vouched for.
                let rd = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
                if rd < 0 {
                    return Err(last_errno());
                }
                // SAFETY: fcntl just made `rd`; nothing else owns it.
                let rd = unsafe { OwnedFd::from_raw_fd(rd) };
                let comp = CompChannel::from_fds(rd, wr);
                list.push(Adopted {
                    chan: key,
                    fd,
                    dev,
                    ino,
                    comp: comp.clone(),
                    cqs: 1,
                    emulated: true,
                });
                return Ok(comp);
            }
            log_info!(
                "completion channel {key:#x} (fd {}) was not made by the preload; adopting it",
                chan.fd
            );
        }
        let comp = CompChannel::new().map_err(|e| e.errno())?;
        // SAFETY: fcntl on our own open fd.
        let fd = unsafe { libc::fcntl(comp.fd().as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(last_errno());
        }
        let (dev, ino) = fd_id(fd).ok_or(libc::EIO)?;
        log_info!(
            "adopting completion channel {key:#x}: fd {} -> {fd}",
            chan.fd
        );
        // The old value is not ours (garbage, or stdin on rdma-core 54+).
        chan.fd = fd;
        list.push(Adopted {
            chan: key,
            fd,
            dev,
            ino,
            comp: comp.clone(),
            cqs: 1,
            emulated: false,
        });
        Ok(comp)
    }

    /// A CQ on `comp` is gone.
    pub fn detach(&self, comp: &CompChannel) {
        let raw = comp.fd().as_raw_fd();
        let mut list = self.lock();
        if let Some(a) = list.iter_mut().find(|a| a.comp.fd().as_raw_fd() == raw) {
            a.cqs = a.cqs.saturating_sub(1);
        }
        list.retain(|a| a.cqs > 0 || (!a.emulated && a.current_elsewhere()));
    }
}

impl Adopted {
    /// Without the struct at hand: whether our fd number still names our
    /// socket (if not, the application destroyed the channel).
    fn current_elsewhere(&self) -> bool {
        fd_id(self.fd) == Some((self.dev, self.ino))
    }
}
