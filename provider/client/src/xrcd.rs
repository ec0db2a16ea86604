//! XRC domains (`ibv_open_xrcd`): private, or shared between processes
//! through a file (the daemon finds the domain by the file's inode).

use std::os::fd::BorrowedFd;

use super::context::{unexpected, Context};
use super::error::{Error, Result};
use rxu_abi::proto::{Request, Response};

/// An XRC domain this process opened. Closed on drop (errors ignored)
/// or by [`Xrcd::close`] (EBUSY while its SRQs or target QPs exist).
pub struct Xrcd {
    ctx: Context,
    handle: u32,
    live: bool,
}

impl Xrcd {
    /// Opens the domain `file` names (O_CREAT in `oflags`: made if it
    /// names none yet; O_EXCL: refused if it does), or with no file a
    /// domain of this process alone.
    pub fn open(ctx: &Context, file: Option<BorrowedFd<'_>>, oflags: u32) -> Result<Xrcd> {
        let fds: Vec<BorrowedFd<'_>> = file.into_iter().collect();
        let (resp, _) = ctx.call(&Request::OpenXrcd { oflags }, &fds)?;
        let Response::Xrcd { xrcd } = resp else {
            return Err(unexpected("Xrcd", &resp));
        };
        Ok(Xrcd {
            ctx: ctx.clone(),
            handle: xrcd,
            live: true,
        })
    }

    /// The daemon's number of the domain.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Closes now, reporting errors; on failure it is handed back.
    pub fn close(mut self) -> Result<(), (Xrcd, Error)> {
        match self.ctx.call_ok(&Request::CloseXrcd { xrcd: self.handle }) {
            Ok(()) => {
                self.live = false;
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

impl Drop for Xrcd {
    fn drop(&mut self) {
        if self.live {
            let _ = self.ctx.call_ok(&Request::CloseXrcd { xrcd: self.handle });
        }
    }
}
