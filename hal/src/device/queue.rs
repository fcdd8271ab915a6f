//! Submissions on the compute and transfer queues and their timeline semaphores.

use std::sync::atomic::Ordering;

use ash::vk;

use crate::error::{Error, Result};
use crate::memory::Buffer;

use super::*;

impl DeviceInner {
    /// Submits `cmd` to `queue`, signalling the next value of its timeline, which is
    /// returned. Waits (on the GPU) for the other queue's latest value so that cross-queue
    /// writes are visible.
    pub(crate) fn submit(&self, kind: QueueKind, cmd: vk::CommandBuffer) -> Result<u64> {
        let (queue, other) = match kind {
            QueueKind::Compute => (&self.compute, self.transfer.as_ref()),
            QueueKind::Transfer => (self.transfer.as_ref().unwrap_or(&self.compute), Some(&self.compute)),
        };
        let other = other.filter(|o| !std::ptr::eq(*o, queue));
        let raw_q = queue.raw.lock();
        let value = queue.last_submitted.load(Ordering::Acquire) + 1;
        let (wait_sems, wait_vals): (Vec<vk::Semaphore>, Vec<u64>) = other
            .map(|o| (o.timeline, o.last_submitted.load(Ordering::Acquire)))
            .filter(|(_, v)| *v > 0)
            .into_iter()
            .unzip();
        let stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; wait_sems.len()];
        let signal = [queue.timeline];
        let signal_vals = [value];
        let mut ts = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_vals)
            .signal_semaphore_values(&signal_vals);
        let cmds = [cmd];
        let submit = vk::SubmitInfo::default()
            .command_buffers(&cmds)
            .wait_semaphores(&wait_sems)
            .wait_dst_stage_mask(&stages)
            .signal_semaphores(&signal)
            .push_next(&mut ts);
        // SAFETY: the queue is externally synchronised by its mutex; `cmd` is in the
        // executable state and not pending (callers wait for a command buffer's previous
        // submission before resubmitting it); timeline values strictly increase under the
        // mutex.
        unsafe { self.raw.queue_submit(*raw_q, &[submit], vk::Fence::null()) }.map_err(Error::vk("vkQueueSubmit"))?;
        queue.last_submitted.store(value, Ordering::Release);
        Ok(value)
    }

    pub(crate) fn completed(&self, queue: &Queue) -> Result<u64> {
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        unsafe { self.raw.get_semaphore_counter_value(queue.timeline) }.map_err(Error::vk("vkGetSemaphoreCounterValue"))
    }

    pub(crate) fn wait_queue(&self, queue: &Queue, value: u64) -> Result<()> {
        if value == 0 || self.completed(queue)? >= value {
            return Ok(());
        }
        let sems = [queue.timeline];
        let vals = [value];
        let info = vk::SemaphoreWaitInfo::default().semaphores(&sems).values(&vals);
        // SAFETY: the semaphore is live; the value has been (or will be) signalled by a
        // submission made before this call.
        match unsafe { self.raw.wait_semaphores(&info, self.wait_timeout_ns) } {
            Ok(()) => Ok(()),
            Err(vk::Result::TIMEOUT) => Err(Error::Timeout { seconds: self.wait_timeout_ns / 1_000_000_000 }),
            Err(e) => Err(Error::vk("vkWaitSemaphores")(e)),
        }
    }

    pub(crate) fn wait_compute_value(&self, value: u64) -> Result<()> {
        self.wait_queue(&self.compute, value)?;
        self.instance.check_validation()
    }

    /// Copies `len` bytes between buffers on the transfer queue (the compute queue where
    /// there is none) and waits for the copy. Callers have waited for GPU work that uses
    /// either buffer.
    pub(crate) fn transfer_copy(&self, src: &Buffer, src_off: u64, dst: &Buffer, dst_off: u64, len: u64) -> Result<()> {
        let (kind, queue) = match &self.transfer {
            Some(t) => (QueueKind::Transfer, t),
            None => (QueueKind::Compute, &self.compute),
        };
        let pool = self.transfer_pool.lock();
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(*pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is live and externally synchronised by its mutex (held for the
        // whole function, so the command buffer is used by this thread only).
        let cmd =
            unsafe { self.raw.allocate_command_buffers(&alloc) }.map_err(Error::vk("vkAllocateCommandBuffers"))?[0];
        let result = (|| {
            // SAFETY: `cmd` is freshly allocated; both buffers are live, have TRANSFER
            // usage, and the regions are in range (callers check); queue family sharing
            // is CONCURRENT where two families exist.
            unsafe {
                self.raw
                    .begin_command_buffer(
                        cmd,
                        &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
                    )
                    .map_err(Error::vk("vkBeginCommandBuffer"))?;
                let region = vk::BufferCopy { src_offset: src_off, dst_offset: dst_off, size: len };
                self.raw.cmd_copy_buffer(cmd, src.inner.handle, dst.inner.handle, &[region]);
                self.raw.end_command_buffer(cmd).map_err(Error::vk("vkEndCommandBuffer"))?;
            }
            let value = self.submit(kind, cmd)?;
            self.wait_queue(queue, value)?;
            self.instance.check_validation()
        })();
        if result.is_err() {
            // The copy may still be pending: let the device drain before freeing.
            // SAFETY: the device is live.
            let _ = unsafe { self.raw.device_wait_idle() };
        }
        // SAFETY: the command buffer's submission has completed (waited above).
        unsafe { self.raw.free_command_buffers(*pool, &[cmd]) };
        result
    }
}
