//! What the emulated uverbs device keeps for the process: the `cmd_fd`s
//! the rxu provider handed over (with the async event fd an import is to
//! get, see [`Uverbs::set_async_fd`]), and the completion channels made
//! on them. A channel is a `SOCK_SEQPACKET` socket pair: the application
//! holds the read end (`channel->fd`), this table the write end until the
//! provider fetches a copy for rxud at `create_cq` and the application
//! closes the channel.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::command::Errno;

/// (st_dev, st_ino) of an open fd: which open file a number names now.
pub fn file_id(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: stat is plain data; all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`; a bad fd just fails.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A duplicate of `fd`, close-on-exec.
fn dup(fd: RawFd) -> Result<OwnedFd, Errno> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor; fails cleanly if it is bad.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        return Err(errno());
    }
    // SAFETY: fcntl just created `d`; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(d) })
}

struct Channel {
    /// The socket pair's other end, which events are written to.
    wr: OwnedFd,
    /// The identity of the application's end, so a number closed behind
    /// our back (close(2) not through libc) and reused is not taken for
    /// the channel.
    id: (u64, u64),
}

#[derive(Default)]
struct CmdFd {
    /// The fd `ibv_cmd_alloc_async_fd` is to get on this cmd_fd.
    pending_async: Option<RawFd>,
}

#[derive(Default)]
pub struct Uverbs {
    cmd_fds: BTreeMap<RawFd, CmdFd>,
    channels: BTreeMap<RawFd, Channel>,
}

impl Uverbs {
    pub const fn new() -> Self {
        Uverbs {
            cmd_fds: BTreeMap::new(),
            channels: BTreeMap::new(),
        }
    }

    /// `fd` is the cmd_fd of an rxu context: its writes and ioctls come
    /// here from now on.
    pub fn attach_cmd_fd(&mut self, fd: RawFd) -> Result<(), Errno> {
        file_id(fd).ok_or(libc::EBADF)?;
        self.cmd_fds.entry(fd).or_default();
        Ok(())
    }

    pub fn is_cmd_fd(&self, fd: RawFd) -> bool {
        self.cmd_fds.contains_key(&fd)
    }

    pub fn is_channel(&self, fd: RawFd) -> bool {
        self.channels.contains_key(&fd)
    }

    /// The application closes `fd` (either kind).
    pub fn close(&mut self, fd: RawFd) {
        self.cmd_fds.remove(&fd);
        self.channels.remove(&fd);
    }

    /// CREATE_COMP_CHANNEL: a new channel; `respond` writes the response
    /// with the application's fd (its failure undoes everything, as the
    /// kernel aborts the new file when the copy to user space fails).
    pub fn create_comp_channel(
        &mut self,
        respond: impl FnOnce(RawFd) -> Result<(), Errno>,
    ) -> Result<RawFd, Errno> {
        let mut sv = [0; 2];
        let ty = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
        // SAFETY: sv is a valid 2-element array for socketpair to fill.
        if unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()) } != 0 {
            return Err(errno());
        }
        // SAFETY: socketpair just created both; nothing else owns them.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        let id = file_id(rd.as_raw_fd()).ok_or(libc::EIO)?;
        respond(rd.as_raw_fd())?;
        let fd = std::os::fd::IntoRawFd::into_raw_fd(rd);
        self.channels.insert(fd, Channel { wr, id });
        Ok(fd)
    }

    /// A copy of the write end of the channel whose application end is
    /// `fd` (ENOENT: `fd` is not such a channel, or no longer).
    pub fn channel_peer(&self, fd: RawFd) -> Result<OwnedFd, Errno> {
        let ch = self.channels.get(&fd).ok_or(libc::ENOENT)?;
        if file_id(fd) != Some(ch.id) {
            return Err(libc::ENOENT);
        }
        dup(ch.wr.as_raw_fd())
    }

    /// The next ASYNC_EVENT_ALLOC on `cmd_fd` gives `async_fd` (the
    /// provider's async event fd of an imported context; libibverbs stores
    /// the number in `context->async_fd` and owns it from then on).
    pub fn set_async_fd(&mut self, cmd_fd: RawFd, async_fd: RawFd) -> Result<(), Errno> {
        let c = self.cmd_fds.get_mut(&cmd_fd).ok_or(libc::EBADF)?;
        c.pending_async = Some(async_fd);
        Ok(())
    }

    /// Takes the fd set by [`Uverbs::set_async_fd`].
    pub fn take_async_fd(&mut self, cmd_fd: RawFd) -> Option<RawFd> {
        self.cmd_fds.get_mut(&cmd_fd)?.pending_async.take()
    }

    /// Puts back what [`Uverbs::take_async_fd`] took (the response could
    /// not be written).
    pub fn restore_async_fd(&mut self, cmd_fd: RawFd, async_fd: RawFd) {
        if let Some(c) = self.cmd_fds.get_mut(&cmd_fd) {
            c.pending_async.get_or_insert(async_fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_record(fd: RawFd) -> Option<[u8; 8]> {
        let mut b = [0u8; 8];
        // SAFETY: recv into our 8-byte buffer.
        let n = unsafe { libc::recv(fd, b.as_mut_ptr().cast(), 8, libc::MSG_DONTWAIT) };
        (n == 8).then_some(b)
    }

    #[test]
    fn a_channel_carries_records_from_its_peer() {
        let mut u = Uverbs::default();
        let mut given = None;
        let fd = u
            .create_comp_channel(|fd| {
                given = Some(fd);
                Ok(())
            })
            .unwrap();
        assert_eq!(given, Some(fd));
        assert!(u.is_channel(fd));
        assert_eq!(read_record(fd), None, "empty");
        let peer = u.channel_peer(fd).unwrap();
        let rec = 0x1234u64.to_ne_bytes();
        // SAFETY: send from our buffer on the peer copy.
        let n = unsafe { libc::send(peer.as_raw_fd(), rec.as_ptr().cast(), 8, 0) };
        assert_eq!(n, 8);
        assert_eq!(read_record(fd), Some(rec));
        u.close(fd);
        assert_eq!(u.channel_peer(fd).err(), Some(libc::ENOENT));
        // SAFETY: the application's end, which close() above only forgot.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn a_failed_response_leaves_nothing() {
        let mut u = Uverbs::default();
        let mut seen = -1;
        let r = u.create_comp_channel(|fd| {
            seen = fd;
            Err(libc::EFAULT)
        });
        assert_eq!(r, Err(libc::EFAULT));
        assert!(seen >= 0 && !u.is_channel(seen));
        assert_eq!(u.channel_peer(seen).err(), Some(libc::ENOENT));
    }

    #[test]
    fn a_reused_number_is_not_the_channel() {
        let mut u = Uverbs::default();
        let fd = u.create_comp_channel(|_| Ok(())).unwrap();
        // Closed without telling us, and the number reused by a file.
        // SAFETY: our own fds.
        unsafe { libc::close(fd) };
        let f = std::fs::File::open("/dev/null").unwrap();
        let nfd = f.as_raw_fd();
        if nfd == fd {
            assert_eq!(u.channel_peer(fd).err(), Some(libc::ENOENT));
        }
        assert_eq!(u.channel_peer(-1).err(), Some(libc::ENOENT));
    }

    #[test]
    fn pending_async_fds_go_once() {
        let mut u = Uverbs::default();
        let null = std::fs::File::open("/dev/null").unwrap();
        let cmd = null.as_raw_fd();
        assert_eq!(u.set_async_fd(cmd, 42), Err(libc::EBADF));
        u.attach_cmd_fd(cmd).unwrap();
        assert!(u.is_cmd_fd(cmd));
        u.set_async_fd(cmd, 42).unwrap();
        assert_eq!(u.take_async_fd(cmd), Some(42));
        assert_eq!(u.take_async_fd(cmd), None);
        u.restore_async_fd(cmd, 42);
        assert_eq!(u.take_async_fd(cmd), Some(42));
        u.close(cmd);
        assert!(!u.is_cmd_fd(cmd));
        assert_eq!(u.attach_cmd_fd(-1), Err(libc::EBADF));
    }
}
