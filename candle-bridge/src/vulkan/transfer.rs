//! Copies between two [`VulkanDevice`]s (a model's layers split over GPUs, llama.cpp's
//! `-sm layer`), through host-visible staging on each side: the source device copies the
//! values into a readback buffer, the host copies them into an upload buffer of the
//! destination, which copies them into device-local memory.
//!
//! Both copies are recorded when [`VulkanStorage::to_device`] is called, so a decode step
//! spanning devices is recorded (and can be recorded ahead) like one on a single device.
//! The host copy between them is a [`Hop`] the destination keeps until its next
//! [`VulkanDevice::flush`]: that flush first submits the source's command buffer holding
//! the copy (where it is still being recorded), waits for it, copies, and only then
//! submits the destination's work. Work on the two devices therefore overlaps where the
//! caller submits each in order and records more in between (a prompt in micro-batches:
//! the source runs batch i + 1 while the destination runs batch i).
//!
//! A command buffer may not both feed a hop and take one that depends on it (device A's
//! layers feed B, whose logits' argmax comes back to A): the host could run neither first.
//! So a hop into a device whose open command buffer feeds another hop still pending ends
//! that command buffer first (submits it), and the hop's copy opens the next.

use candle_core::backend::BackendDevice;
use std::sync::atomic::Ordering;

use candle_core::Layout;
use vkml_hal::{Buffer, MemoryKind};

use super::{cerr, packed, CResult, VulkanDevice, VulkanStorage};

/// A host copy owed between two devices: `src` (a readback buffer of `from`, written by
/// work recorded there) into `dst` (an upload buffer of the device holding the hop, read
/// by work recorded there).
pub(super) struct Hop {
    from: VulkanDevice,
    /// `from`'s submission count when the hop was recorded: its command buffer holding
    /// the copy into `src` is submission number `epoch` (counted from 0).
    epoch: u64,
    src: Buffer,
    dst: Buffer,
}

impl VulkanStorage {
    /// The elements of `l` as a new contiguous storage on `to`, through host-visible
    /// staging when `to` is another device (see the module's docs); on the same device, a
    /// packed copy (or this storage, when `l` is already packed from element 0). The
    /// copies are recorded: nothing waits here.
    ///
    /// # Errors
    /// Out of (host-visible or device) memory on either device, naming the size.
    pub fn to_device(&self, l: &Layout, to: &VulkanDevice) -> CResult<VulkanStorage> {
        if self.device.same_device(to) {
            return packed(self, l);
        }
        self.device.refuse_while_replaying("a copy to another device")?;
        to.refuse_while_replaying("a copy from another device")?;
        let n = l.shape().elem_count();
        let src = packed(self, l)?;
        let bytes = (n * self.dtype.size_in_bytes()) as u64;
        let size = bytes.max(4);
        let from = &self.device;
        let readback = from.hal().alloc(size, MemoryKind::Readback).map_err(|e| from.named_error(e))?;
        let epoch = from.with_stream(|s| {
            s.copy(&src.buffer, 0, &readback, 0, bytes).map_err(cerr)?;
            Ok(s.stats().submissions)
        })?;
        from.inner.feeds.store(epoch + 1, Ordering::Release);
        // `to`'s open command buffer feeds a pending hop: end it before it takes this one.
        if to.inner.feeds.load(Ordering::Acquire) == to.own_submissions() + 1 {
            to.flush()?;
        }
        let upload = to.hal().alloc(size, MemoryKind::Upload).map_err(|e| to.named_error(e))?;
        let y = to.alloc(n, self.dtype)?;
        to.with_stream(|s| s.copy(&upload, 0, &y, 0, bytes).map_err(cerr))?;
        to.inner.hops.lock().push(Hop { from: from.clone(), epoch, src: readback, dst: upload });
        Ok(to.storage(y, self.dtype, n))
    }
}

impl VulkanDevice {
    /// Does the host copies owed to this device's recorded work ([`Hop`]s), in the order
    /// they were recorded: each submits its source's command buffer holding the copy
    /// where that is still being recorded, waits for it, and copies.
    ///
    /// # Errors
    /// Device errors of the source devices (submission, device lost), naming the device.
    pub(super) fn run_hops(&self) -> CResult<()> {
        let mut hops = std::mem::take(&mut *self.inner.hops.lock());
        let mut staging = Vec::new();
        let mut run = |h: &Hop| -> CResult<()> {
            if h.from.own_submissions() == h.epoch {
                h.from.flush()?;
            }
            staging.resize(h.src.size() as usize, 0u8);
            h.src.read(0, &mut staging).map_err(|e| h.from.named_error(e))?;
            h.dst.write(0, &staging).map_err(|e| self.named_error(e))
        };
        for i in 0..hops.len() {
            if let Err(e) = run(&hops[i]) {
                // The copies not done stay owed: the next flush tries them again rather
                // than submitting work that reads upload buffers never written.
                let rest = hops.split_off(i);
                let mut owed = self.inner.hops.lock();
                let later = std::mem::replace(&mut *owed, rest);
                owed.extend(later);
                return Err(e);
            }
        }
        Ok(())
    }

    /// `e` as a candle error naming this device: its ordinal here (its place in a layer
    /// split), its name and its index in `vkml info`; with several devices, which one
    /// failed (out of memory, device lost).
    pub fn named_error(&self, e: impl std::fmt::Display) -> candle_core::Error {
        candle_core::Error::Msg(format!(
            "Vulkan device {} ({}, vkml info index {}): {e}",
            self.inner.ordinal,
            self.inner.dev.caps().name,
            self.inner.dev.ordinal()
        ))
    }
}
