//! The emulated device as the interposed `write`, `ioctl` and `close`
//! see it: the process's one [`Uverbs`] behind a lock, bitmaps of its fds
//! for the cheap test every interposed call makes, and the copies from
//! and to the application's memory (a bad pointer is EFAULT, as the
//! kernel's copy_{from,to}_user). `None` from [`Device::write`] and
//! [`Device::ioctl`]: not emulated, the call goes on to the file.

use std::os::fd::{OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard};

use super::abi;
use super::command::{self, Ioctl, Write};
use super::state::Uverbs;
use crate::abi::{u16_at, u32_at};
use crate::command::Errno;
use crate::fdset::FdSet;
use crate::mem;

/// The longest write a valid command can be (`in_words` is 16 bits).
const MAX_WRITE: usize = 0xffff * 4;

pub struct Device {
    state: Mutex<Uverbs>,
    /// The keys of the state's two tables, for a lock-free "is it ours".
    cmd_fds: FdSet,
    channels: FdSet,
}

impl Default for Device {
    fn default() -> Self {
        Self::new()
    }
}

impl Device {
    pub const fn new() -> Self {
        Device {
            state: Mutex::new(Uverbs::new()),
            cmd_fds: FdSet::new(),
            channels: FdSet::new(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Uverbs> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `fd` is an attached cmd_fd (one atomic load).
    pub fn is_cmd_fd(&self, fd: RawFd) -> bool {
        self.cmd_fds.contains(fd)
    }

    /// Whether `fd` is a channel the emulation made (one atomic load).
    pub fn is_channel(&self, fd: RawFd) -> bool {
        self.channels.contains(fd)
    }

    /// The provider names an rxu context's cmd_fd.
    pub fn attach_cmd_fd(&self, fd: RawFd) -> Result<(), Errno> {
        let mut st = self.lock();
        st.attach_cmd_fd(fd)?;
        crate::owner::note();
        if !self.cmd_fds.insert(fd) {
            st.close(fd);
            return Err(libc::EMFILE);
        }
        Ok(())
    }

    /// Stops taking `fd` for one of ours, leaving the state alone (a
    /// forked child's copy closes).
    pub fn unmark(&self, fd: RawFd) {
        self.cmd_fds.remove(fd);
        self.channels.remove(fd);
    }

    /// Our fds (cmd_fds and channels) in `[first, last]`.
    pub fn fds_in(&self, first: u32, last: u32) -> Vec<RawFd> {
        let mut v = self.cmd_fds.members_in(first, last);
        v.extend(self.channels.members_in(first, last));
        v
    }

    /// The application closes `fd`, one of ours.
    pub fn close(&self, fd: RawFd) {
        let mut st = self.lock();
        st.close(fd);
        self.cmd_fds.remove(fd);
        self.channels.remove(fd);
    }

    /// `write(fd, buf, len)` on an attached cmd_fd.
    pub fn write(&self, buf: u64, len: usize) -> Result<Option<isize>, Errno> {
        let mut hdr = [0u8; abi::CMD_HDR_LEN];
        if len >= abi::CMD_HDR_LEN
            && mem::read(buf, &mut hdr).is_ok()
            && u32_at(&hdr, 0) != abi::CMD_CREATE_COMP_CHANNEL
        {
            return Ok(None);
        }
        let mut bytes = vec![0u8; len.min(MAX_WRITE)];
        let core = abi::CMD_HDR_LEN + abi::CREATE_COMP_CHANNEL_LEN;
        let readable = [bytes.len(), core.min(bytes.len()), abi::CMD_HDR_LEN]
            .into_iter()
            .find(|&n| mem::read(buf, &mut bytes[..n]).is_ok())
            .unwrap_or(0);
        let Write::CreateCompChannel { response, out_len } =
            command::decode_write(&bytes[..readable], len)?
        else {
            return Ok(None);
        };
        self.lock().create_comp_channel(|fd| {
            // A number too high to watch for its close is refused, as
            // the kernel refuses when out of fds.
            crate::owner::note();
            if !self.channels.insert(fd) {
                return Err(libc::EMFILE);
            }
            mem::write(response, &command::comp_channel_resp(fd, out_len))
                .inspect_err(|_| self.channels.remove(fd))
        })?;
        Ok(Some(isize::try_from(len).unwrap_or(isize::MAX)))
    }

    /// `ioctl(cmd_fd, RDMA_VERBS_IOCTL, arg)` on an attached cmd_fd: only
    /// ASYNC_EVENT_ALLOC, and only when the provider set the fd it gives.
    pub fn ioctl(&self, cmd_fd: RawFd, arg: u64) -> Result<Option<i32>, Errno> {
        let mut hdr = [0u8; abi::IOCTL_HDR_LEN];
        if mem::read(arg, &mut hdr).is_err() {
            return Ok(None);
        }
        let (object, method) = (u16_at(&hdr, 2), u16_at(&hdr, 4));
        if (object, method) != (abi::OBJECT_ASYNC_EVENT, abi::METHOD_ASYNC_EVENT_ALLOC) {
            return Ok(None);
        }
        let mut st = self.lock();
        let Some(async_fd) = st.take_async_fd(cmd_fd) else {
            return Ok(None);
        };
        let r = (|| {
            let h = command::ioctl_header(&hdr)?;
            let mut bytes = vec![0u8; h.length];
            mem::read(arg, &mut bytes)?;
            match command::decode_ioctl(&bytes)? {
                Ioctl::AsyncEventAlloc { data_at } => {
                    let fd = i64::from(async_fd).to_ne_bytes();
                    mem::write(arg + data_at as u64, &fd)
                }
                Ioctl::Other => Err(libc::EINVAL),
            }
        })();
        if r.is_err() {
            st.restore_async_fd(cmd_fd, async_fd);
        }
        r.map(|()| Some(0))
    }

    /// A copy of the write end of channel `fd` (for the provider).
    pub fn channel_peer(&self, fd: RawFd) -> Result<OwnedFd, Errno> {
        if !self.is_channel(fd) {
            return Err(libc::ENOENT);
        }
        self.lock().channel_peer(fd)
    }

    /// The provider's async event fd for the next ASYNC_EVENT_ALLOC.
    pub fn set_async_fd(&self, cmd_fd: RawFd, async_fd: RawFd) -> Result<(), Errno> {
        self.lock().set_async_fd(cmd_fd, async_fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn create_cmd(response: u64) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&abi::CMD_CREATE_COMP_CHANNEL.to_ne_bytes());
        b[4..6].copy_from_slice(&4u16.to_ne_bytes());
        b[6..8].copy_from_slice(&1u16.to_ne_bytes());
        b[8..16].copy_from_slice(&response.to_ne_bytes());
        b
    }

    #[test]
    fn create_comp_channel_fills_the_response() {
        let d = Box::new(Device::new());
        let mut resp = [0xffu8; 4];
        let cmd = create_cmd(resp.as_mut_ptr() as u64);
        assert_eq!(d.write(cmd.as_ptr() as u64, 16), Ok(Some(16)));
        let fd = i32::from_ne_bytes(resp);
        assert!(d.is_channel(fd) && d.lock().is_channel(fd));
        let peer = d.channel_peer(fd).unwrap();
        assert!(peer.as_raw_fd() != fd);
        d.close(fd);
        assert!(!d.is_channel(fd));
        assert_eq!(d.channel_peer(fd).err(), Some(libc::ENOENT));
        // SAFETY: the channel fd the emulation gave us.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn bad_pointers_are_efault_and_other_commands_pass() {
        let d = Box::new(Device::new());
        assert_eq!(d.write(8, 16), Err(libc::EFAULT));
        let cmd = create_cmd(8);
        assert_eq!(d.write(cmd.as_ptr() as u64, 16), Err(libc::EFAULT));
        assert_eq!(d.write(cmd.as_ptr() as u64, 4), Err(libc::EINVAL));
        let mut other = create_cmd(8);
        other[0] = 3;
        assert_eq!(d.write(other.as_ptr() as u64, 16), Ok(None));
    }

    #[test]
    fn async_event_alloc_gives_the_pending_fd_once() {
        let d = Box::new(Device::new());
        let null = std::fs::File::open("/dev/null").unwrap();
        let cmd_fd = null.as_raw_fd();
        let mut buf = [0u8; 40];
        buf[0..2].copy_from_slice(&40u16.to_ne_bytes());
        buf[2..4].copy_from_slice(&abi::OBJECT_ASYNC_EVENT.to_ne_bytes());
        buf[6..8].copy_from_slice(&1u16.to_ne_bytes());
        let arg = buf.as_mut_ptr() as u64;
        d.attach_cmd_fd(cmd_fd).unwrap();
        assert!(d.is_cmd_fd(cmd_fd));
        assert_eq!(d.ioctl(cmd_fd, arg), Ok(None), "nothing pending");
        d.set_async_fd(cmd_fd, 77).unwrap();
        assert_eq!(d.ioctl(cmd_fd, arg), Ok(Some(0)));
        assert_eq!(i64::from_ne_bytes(buf[32..40].try_into().unwrap()), 77);
        assert_eq!(d.ioctl(cmd_fd, arg), Ok(None), "given once");
        d.set_async_fd(cmd_fd, 78).unwrap();
        buf[20] = 1;
        let arg = buf.as_mut_ptr() as u64;
        assert_eq!(d.ioctl(cmd_fd, arg), Err(libc::EPROTONOSUPPORT));
        buf[20] = 0;
        let arg = buf.as_mut_ptr() as u64;
        assert_eq!(d.ioctl(cmd_fd, arg), Ok(Some(0)), "kept after a failure");
        assert_eq!(
            d.ioctl(cmd_fd, 8),
            Ok(None),
            "unreadable: not ours to answer"
        );
    }
}
