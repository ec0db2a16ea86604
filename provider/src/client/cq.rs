//! Completion queues: a ring the daemon produces and this process consumes.
//! Polling and arming touch only shared memory.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::channel::CompChannel;
use super::context::{take_fd, unexpected, Context};
use super::error::{Error, Result};
use super::wc::Wc;
use crate::proto::abi::{Cqe, CQE_SIZE};
use crate::proto::{Request, Response};
use crate::ring::{Consumer, Ring};

/// Arm values of the CQ ring's consumer-flag word.
pub const ARM_NEXT: u32 = 1;
pub const ARM_SOLICITED: u32 = 2;

/// A completion queue. Clones share it; a QP holds clones of its CQs.
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

struct CqInner {
    ctx: Context,
    handle: u32,
    user_handle: u64,
    cqe: AtomicU32,
    ring: Mutex<Consumer>,
    channel: Option<CompChannel>,
    events_acked: AtomicU32,
    live: AtomicBool,
}

fn attach_cq_ring(fds: &mut Vec<std::os::fd::OwnedFd>) -> Result<Consumer> {
    let ring = Ring::attach(take_fd(fds, "CQ ring")?)?;
    if (ring.slot_size() as usize) < CQE_SIZE {
        return Err(Error::Protocol(format!(
            "CQ ring slots of {} bytes",
            ring.slot_size()
        )));
    }
    Ok(ring.into_consumer())
}

impl Cq {
    /// Creates a CQ of at least `cqe` entries. Events go to `channel` (if
    /// any) carrying `user_handle`, which async events carry too.
    pub fn create(
        ctx: &Context,
        cqe: u32,
        comp_vector: u32,
        channel: Option<&CompChannel>,
        user_handle: u64,
    ) -> Result<Cq> {
        ctx.doorbell()?;
        let req = Request::CreateCq {
            cqe,
            comp_vector,
            user_handle,
            channel: channel.is_some(),
        };
        let fds: Vec<_> = channel.iter().map(|c| c.write_end()).collect();
        let (resp, mut rfds) = ctx.call(&req, &fds)?;
        let Response::Cq { cq, cqe } = resp else {
            return Err(unexpected("Cq", &resp));
        };
        let consumer = match attach_cq_ring(&mut rfds) {
            Ok(c) => c,
            Err(e) => {
                let _ = ctx.call_ok(&Request::DestroyCq { cq });
                return Err(e);
            }
        };
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: ctx.clone(),
                handle: cq,
                user_handle,
                cqe: AtomicU32::new(cqe),
                ring: Mutex::new(consumer),
                channel: channel.cloned(),
                events_acked: AtomicU32::new(0),
                live: AtomicBool::new(true),
            }),
        })
    }

    /// The daemon's CQ handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    pub fn user_handle(&self) -> u64 {
        self.inner.user_handle
    }

    /// Entries the CQ holds (at least what was asked for).
    pub fn cqe(&self) -> u32 {
        self.inner.cqe.load(Ordering::Relaxed)
    }

    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    pub fn channel(&self) -> Option<&CompChannel> {
        self.inner.channel.as_ref()
    }

    fn ring(&self) -> MutexGuard<'_, Consumer> {
        self.inner.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves up to `wc.len()` completions into `wc`; returns how many. No
    /// system call. A corrupt ring is a protocol error.
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let mut ring = self.ring();
        let mut buf = [0u8; CQE_SIZE];
        for (n, out) in wc.iter_mut().enumerate() {
            let Some(slot) = ring.peek()? else {
                return Ok(n);
            };
            slot.read(0, &mut buf)?;
            slot.release();
            *out = Wc::from_cqe(&Cqe::decode(&buf).map_err(Error::protocol)?);
        }
        Ok(wc.len())
    }

    /// Arms the CQ: the next completion (or, with `solicited_only`, the
    /// next solicited one) sends one event to the channel. No system call.
    /// Poll again after arming: completions already queued send nothing.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        if self.inner.channel.is_none() {
            // As the kernel: arming a CQ without a channel is allowed and
            // simply never signals.
            return Ok(());
        }
        let v = if solicited_only {
            ARM_SOLICITED
        } else {
            ARM_NEXT
        };
        self.ring().set_flag(v);
        Ok(())
    }

    /// Counts `n` events of this CQ as handled (`ibv_ack_cq_events`).
    pub fn ack_events(&self, n: u32) {
        self.inner.events_acked.fetch_add(n, Ordering::Relaxed);
    }

    pub fn events_acked(&self) -> u32 {
        self.inner.events_acked.load(Ordering::Relaxed)
    }

    /// Resizes to at least `cqe` entries; returns the new size. The daemon
    /// moves unpolled completions into the new ring, which replaces the
    /// old one once the reply is in (polling waits meanwhile).
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        let mut ring = self.ring();
        let (resp, mut fds) = self.inner.ctx.call(
            &Request::ResizeCq {
                cq: self.inner.handle,
                cqe,
            },
            &[],
        )?;
        let Response::Cq { cqe, .. } = resp else {
            return Err(unexpected("Cq", &resp));
        };
        *ring = attach_cq_ring(&mut fds)?;
        self.inner.cqe.store(cqe, Ordering::Relaxed);
        Ok(cqe)
    }

    /// Destroys now, reporting errors (EBUSY while a QP uses it). On
    /// failure the CQ is handed back unchanged.
    pub fn destroy(self) -> Result<(), (Cq, Error)> {
        match self.inner.destroy() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}

impl CqInner {
    fn destroy(&self) -> Result<()> {
        self.ctx.call_ok(&Request::DestroyCq { cq: self.handle })?;
        self.live.store(false, Ordering::Relaxed);
        // As the kernel: events of a destroyed CQ are dropped unread.
        if let Some(ch) = &self.channel {
            ch.purge(self.user_handle);
        }
        Ok(())
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if self.live.load(Ordering::Relaxed) {
            let _ = self.destroy();
        }
    }
}
