//! Work recorded once and submitted again and again: [`VulkanDevice::record_replay`] and
//! [`Replay`], what a decode step becomes when only its position changes from token to
//! token (the position then lives in a step buffer the kernels read, written between
//! submissions).

use std::sync::atomic::Ordering;

use vkml_hal::{Buffer, MemoryKind, Recording, Stream, StreamStats};

use super::{CResult, VulkanDevice};

/// Ops recorded once by [`VulkanDevice::record_replay`], run again by every
/// [`Replay::submit`]. It holds every buffer its commands use; the storages made while it
/// was recorded are never recycled, so no later op is served their memory while the
/// recording may still write it. Storages made before and used by it must outlive it
/// (dropped, an owned storage's buffer would serve later ops while replays still use it).
pub struct Replay {
    recording: Recording,
    /// Dispatches and barriers of one submission (`submissions` 1).
    stats: StreamStats,
    device: VulkanDevice,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replay({} dispatches on {:?})", self.stats.dispatches, self.device)
    }
}

impl Replay {
    /// Submits the recorded work again, after everything the device's stream has recorded
    /// so far (which this submits first, so that the two run in the order they were
    /// called). Waits on the host only where the previous submission of this replay has
    /// not completed yet (a command buffer cannot be pending twice).
    ///
    /// # Errors
    /// Device errors (device lost), naming the device.
    pub fn submit(&mut self) -> CResult<()> {
        self.device.flush()?;
        self.recording.submit().map_err(|e| self.device.named_error(e))?;
        let mut r = self.device.inner.replayed.lock();
        r.dispatches += self.stats.dispatches;
        r.barriers += self.stats.barriers;
        r.transfers += self.stats.transfers;
        r.submissions += 1;
        Ok(())
    }

    /// What one submission runs: dispatches, barriers and copies.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }
}

impl VulkanDevice {
    /// Whether [`VulkanDevice::record_replay`] records here: not while the device profiles
    /// (a recording's timestamps would be written again by every submission).
    pub fn can_replay(&self) -> bool {
        !self.inner.dev.profiling()
    }

    /// The step buffer of the replay being recorded ([`VulkanDevice::record_replay`]), as
    /// its kernels read it (a device-local copy made at the start of each submission):
    /// ops whose values change from one submission to the next (a decode step's position)
    /// read them from it when they run, instead of recording them. `None` outside a
    /// recording for replay.
    pub fn step_buffer(&self) -> Option<Buffer> {
        self.inner.replay_step.lock().clone()
    }

    /// Records the ops `f` records on this device into a [`Replay`] instead of the
    /// device's stream, with `step` (copied to the device first at every submission) as
    /// [`VulkanDevice::step_buffer`] meanwhile, and returns what `f` returns. Work recorded
    /// before is submitted first. Meanwhile the storages made are never recycled (see
    /// [`Replay`]), the recycler takes no buffer back, and submitting (a flush, a read-back)
    /// or copying to or from another device is an error. One thread records on a device at
    /// a time.
    ///
    /// # Errors
    /// [`VulkanDevice::can_replay`] does not hold; `f`'s error (among them an op that
    /// submits or reaches another device); device errors.
    pub fn record_replay<T, E: From<candle_core::Error>>(
        &self,
        step: &Buffer,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<(T, Replay), E> {
        if !self.can_replay() {
            return Err(candle_core::Error::Msg(format!(
                "vkml: {self:?} profiles its commands, so it records them for one submission only (no replay)"
            ))
            .into());
        }
        self.flush()?;
        let mut fresh = Stream::new(&self.inner.dev).map_err(|e| self.named_error(e))?;
        // The kernels read the step from device-local memory: a copy at the start of each
        // submission, beside the first dispatches, instead of a read from host-visible
        // memory (across the bus on a discrete GPU) in every kernel that reads it.
        let local = self.inner.dev.alloc(step.size(), MemoryKind::DeviceLocal).map_err(|e| self.named_error(e))?;
        fresh.copy(step, 0, &local, 0, step.size()).map_err(|e| self.named_error(e))?;
        let mut mode = ReplayMode::enter(self, fresh, local);
        let out = f();
        let stream = mode.leave();
        let out = out?;
        let stats = stream.stats();
        if stats.submissions > 0 {
            return Err(candle_core::Error::Msg(format!(
                "vkml: work recorded for replay on {self:?} was submitted while it was recorded"
            ))
            .into());
        }
        let recording = stream.into_recording().map_err(|e| self.named_error(e))?;
        Ok((out, Replay { recording, stats: StreamStats { submissions: 1, ..stats }, device: self.clone() }))
    }

    /// An error where [`VulkanDevice::record_replay`] is recording: `what` would submit
    /// part of the work recorded for replay, or reach another device.
    pub(super) fn refuse_while_replaying(&self, what: &str) -> CResult<()> {
        if self.replaying() {
            candle_core::bail!(
                "vkml: {what} on {self:?} while a step is recorded for replay (recorded once, submitted again): \
                 only that device's own ops, recorded without a read-back, can be replayed"
            )
        }
        Ok(())
    }

    /// Whether [`VulkanDevice::record_replay`] is recording (storages made now are never
    /// recycled).
    pub(super) fn replaying(&self) -> bool {
        self.inner.replaying.load(Ordering::Acquire)
    }
}

/// The device in replay recording ([`VulkanDevice::record_replay`]): its stream swapped for
/// the recording's, its step buffer set, its storages kept out of the recycler; restored by
/// [`ReplayMode::leave`], or on drop (a panic in the recording closure).
struct ReplayMode<'a> {
    device: &'a VulkanDevice,
    main: Option<Stream>,
}

impl<'a> ReplayMode<'a> {
    fn enter(device: &'a VulkanDevice, fresh: Stream, step: Buffer) -> Self {
        let main = std::mem::replace(&mut *device.inner.stream.lock(), fresh);
        *device.inner.replay_step.lock() = Some(step);
        device.inner.replaying.store(true, Ordering::Release);
        ReplayMode { device, main: Some(main) }
    }

    /// Restores the device and returns the stream that recorded.
    fn leave(&mut self) -> Stream {
        let inner = &self.device.inner;
        inner.replaying.store(false, Ordering::Release);
        *inner.replay_step.lock() = None;
        let main = self.main.take().expect("left once");
        std::mem::replace(&mut *inner.stream.lock(), main)
    }
}

impl Drop for ReplayMode<'_> {
    fn drop(&mut self) {
        if self.main.is_some() {
            // Unsubmitted: dropping the recording's stream discards its commands.
            drop(self.leave());
        }
    }
}
