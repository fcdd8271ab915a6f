//! `Stream`: records many dispatches and copies into one command buffer, with a barrier
//! only where a command touches what an earlier one wrote (or writes what an earlier one
//! read), submits with a timeline-semaphore value, and can be frozen into a
//! [`Recording`] that is replayed any number of times (like a CUDA graph: parameters
//! change through buffer contents, not through re-recording).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ash::vk;
use vkml_shaders::Access;

use crate::device::{BatchProfile, Device, QueueKind, PROFILE_QUERIES};
use crate::error::{Error, Result};
use crate::memory::Buffer;
use crate::pipeline::Pipeline;

/// One buffer binding of a dispatch: a byte range of a buffer.
#[derive(Debug, Clone, Copy)]
pub struct BufferArg<'a> {
    /// The buffer.
    pub buffer: &'a Buffer,
    /// Start of the range in bytes; a multiple of `minStorageBufferOffsetAlignment`.
    pub offset: u64,
    /// Length of the range in bytes; `None` is to the end of the buffer.
    pub size: Option<u64>,
}

impl<'a> BufferArg<'a> {
    /// A byte range of `buffer`.
    pub fn range(buffer: &'a Buffer, offset: u64, size: u64) -> Self {
        BufferArg { buffer, offset, size: Some(size) }
    }
}

impl<'a> From<&'a Buffer> for BufferArg<'a> {
    fn from(buffer: &'a Buffer) -> Self {
        BufferArg { buffer, offset: 0, size: None }
    }
}

/// Counters of what a stream recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Dispatches recorded.
    pub dispatches: u64,
    /// Copies and fills recorded.
    pub transfers: u64,
    /// Hazard barriers inserted between commands (not counting the one that opens and
    /// the one that closes each command buffer).
    pub barriers: u64,
    /// Command buffers submitted.
    pub submissions: u64,
}

/// A submitted command buffer: a point on the compute queue's timeline.
#[derive(Debug, Clone)]
pub struct Submission {
    device: Device,
    value: u64,
}

impl Submission {
    /// The timeline value that signals completion.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// Blocks until the work is done.
    ///
    /// # Errors
    /// [`Error::DeviceLost`], [`Error::Timeout`], or [`Error::Validation`] when
    /// validation is on and reported errors.
    pub fn wait(&self) -> Result<()> {
        self.device.inner.wait_compute_value(self.value)
    }

    /// Whether the work is done, without blocking.
    ///
    /// # Errors
    /// [`Error::DeviceLost`].
    pub fn is_complete(&self) -> Result<bool> {
        Ok(self.device.inner.completed(&self.device.inner.compute)? >= self.value)
    }
}

/// One command buffer and what it keeps alive.
struct Batch {
    cmd: vk::CommandBuffer,
    commands: u64,
    buffers: Vec<Buffer>,
    pipelines: Vec<Arc<Pipeline>>,
    desc_pools: Vec<vk::DescriptorPool>,
    value: u64,
    /// Timestamp queries, where the device profiles ([`Device::set_profiling`]).
    prof: Option<BatchProfile>,
}

#[derive(Default)]
struct Hazards {
    reads: Vec<(u64, u64, u64)>,
    writes: Vec<(u64, u64, u64)>,
}

impl Hazards {
    fn overlaps(list: &[(u64, u64, u64)], id: u64, start: u64, end: u64) -> bool {
        list.iter().any(|&(i, s, e)| i == id && s < end && start < e)
    }

    /// Whether an access conflicts with one recorded since the last barrier.
    fn conflicts(&self, id: u64, start: u64, end: u64, access: Access) -> bool {
        (access.reads() && Self::overlaps(&self.writes, id, start, end))
            || (access.writes()
                && (Self::overlaps(&self.writes, id, start, end) || Self::overlaps(&self.reads, id, start, end)))
    }

    fn record(&mut self, id: u64, start: u64, end: u64, access: Access) {
        if access.reads() {
            self.reads.push((id, start, end));
        }
        if access.writes() {
            self.writes.push((id, start, end));
        }
    }

    fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }
}

const DESC_POOL_SETS: u32 = 128;
const DESC_POOL_BUFFERS: u32 = 128 * 16;

/// Records dispatches into command buffers and submits them to the compute queue.
///
/// Commands execute in recording order. A barrier is inserted only before a command
/// that reads a byte range an earlier command (since the last barrier) wrote, or writes
/// a range an earlier command read or wrote. Each command buffer opens with a barrier
/// against earlier submissions and closes with one that makes its writes visible to the
/// host.
pub struct Stream {
    device: Device,
    pool: vk::CommandPool,
    current: Option<Batch>,
    in_flight: VecDeque<Batch>,
    free_cmds: Vec<vk::CommandBuffer>,
    free_desc_pools: Vec<vk::DescriptorPool>,
    hazards: Hazards,
    stats: StreamStats,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("stats", &self.stats).field("in_flight", &self.in_flight.len()).finish()
    }
}

impl Stream {
    /// A new stream on the device's compute queue.
    ///
    /// # Errors
    /// [`Error::Vulkan`] when the command pool cannot be created.
    pub fn new(device: &Device) -> Result<Stream> {
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.inner.compute.family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: the device is live.
        let pool =
            unsafe { device.inner.raw.create_command_pool(&info, None) }.map_err(Error::vk("vkCreateCommandPool"))?;
        Ok(Stream {
            device: device.clone(),
            pool,
            current: None,
            in_flight: VecDeque::new(),
            free_cmds: Vec::new(),
            free_desc_pools: Vec::new(),
            hazards: Hazards::default(),
            stats: StreamStats::default(),
        })
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// What has been recorded so far.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }

    fn raw(&self) -> &ash::Device {
        &self.device.inner.raw
    }

    /// The batch being recorded, beginning one (with its opening barrier) if needed.
    fn batch(&mut self) -> Result<&mut Batch> {
        if self.current.is_none() {
            self.retire()?;
            let cmd = match self.free_cmds.pop() {
                Some(c) => c,
                None => {
                    let info = vk::CommandBufferAllocateInfo::default()
                        .command_pool(self.pool)
                        .level(vk::CommandBufferLevel::PRIMARY)
                        .command_buffer_count(1);
                    // SAFETY: the pool is live and owned by this stream (not shared).
                    unsafe { self.raw().allocate_command_buffers(&info) }
                        .map_err(Error::vk("vkAllocateCommandBuffers"))?[0]
                }
            };
            // SAFETY: `cmd` is not pending (fresh, or retired after its submission
            // completed); beginning it implicitly resets it (RESET_COMMAND_BUFFER pool).
            unsafe {
                self.raw()
                    .begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
                    .map_err(Error::vk("vkBeginCommandBuffer"))?;
            }
            self.hazards.clear();
            // Order against everything submitted earlier on this queue.
            self.command_barrier(cmd);
            let prof = if self.device.inner.profiler.on.load(Ordering::Acquire) {
                Some(self.begin_profile(cmd)?)
            } else {
                None
            };
            self.current = Some(Batch {
                cmd,
                commands: 0,
                buffers: Vec::new(),
                pipelines: Vec::new(),
                desc_pools: Vec::new(),
                value: 0,
                prof,
            });
        }
        Ok(self.current.as_mut().expect("batch begun above"))
    }

    /// A query pool for a profiled command buffer `cmd` (recording), reset in `cmd`, with
    /// its first timestamp written.
    fn begin_profile(&mut self, cmd: vk::CommandBuffer) -> Result<BatchProfile> {
        let pool = self.device.inner.profile_pool()?;
        // SAFETY: `cmd` is recording (outside any render pass: compute only); the pool is
        // not in use by a pending command buffer (profile_pool hands out fresh pools or
        // ones whose command buffer completed or was never submitted); the compute family
        // has timestampValidBits > 0 (checked by Device::set_profiling).
        unsafe {
            self.raw().cmd_reset_query_pool(cmd, pool, 0, PROFILE_QUERIES);
            self.raw().cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, 0);
        }
        Ok(BatchProfile { pool, labels: Vec::new() })
    }

    /// Writes the timestamp that ends the command just recorded, labelled `label()`, where
    /// the current command buffer is profiled.
    fn stamp(&mut self, label: impl FnOnce() -> String) {
        let Some(batch) = self.current.as_mut() else { return };
        let Some(p) = batch.prof.as_mut() else { return };
        let q = p.labels.len() as u32 + 1;
        if q >= PROFILE_QUERIES {
            self.device.inner.profile_untimed();
            return;
        }
        // SAFETY: `cmd` is recording; the pool was reset earlier in it and query q is
        // below its count and not written before in this command buffer.
        unsafe {
            self.device.inner.raw.cmd_write_timestamp(batch.cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, p.pool, q)
        };
        p.labels.push(Arc::from(label()));
    }

    /// Makes every earlier compute/transfer write visible to later compute/transfer
    /// commands (the barrier between dependent commands).
    fn command_barrier(&self, cmd: vk::CommandBuffer) {
        self.full_barrier(
            cmd,
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::AccessFlags::SHADER_READ
                | vk::AccessFlags::SHADER_WRITE
                | vk::AccessFlags::TRANSFER_READ
                | vk::AccessFlags::TRANSFER_WRITE,
        );
    }

    fn full_barrier(&self, cmd: vk::CommandBuffer, dst_stage: vk::PipelineStageFlags, dst_access: vk::AccessFlags) {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(dst_access);
        // SAFETY: `cmd` is in the recording state and owned by this stream.
        unsafe {
            self.raw().cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                dst_stage,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            );
        }
    }

    /// Inserts a barrier if any access conflicts with one since the last barrier, then
    /// records the accesses.
    fn track(&mut self, accesses: &[(u64, u64, u64, Access)]) -> Result<()> {
        let cmd = self.batch()?.cmd;
        if accesses.iter().any(|&(id, s, e, a)| self.hazards.conflicts(id, s, e, a)) {
            self.command_barrier(cmd);
            self.hazards.clear();
            self.stats.barriers += 1;
        }
        for &(id, s, e, a) in accesses {
            self.hazards.record(id, s, e, a);
        }
        Ok(())
    }

    fn check_buffer(&self, b: &Buffer) -> Result<()> {
        if !Arc::ptr_eq(&b.inner.device, &self.device.inner) {
            return Err(Error::InvalidDispatch {
                kernel: "(stream)".into(),
                reason: format!("buffer {} belongs to another device", b.id()),
            });
        }
        Ok(())
    }

    /// Records a dispatch of `pipeline` over `groups` workgroups, binding `args[i]` to
    /// binding `i` and setting the push-constant block to `push` (exactly the kernel's
    /// push-constant size, in bytes).
    ///
    /// # Errors
    /// [`Error::InvalidDispatch`] when the arguments do not match the kernel (binding
    /// count, push-constant size, ranges, alignment, group counts over the device
    /// limit, buffers of another device); [`Error::OutOfBounds`] for a range past a
    /// buffer's end.
    pub fn dispatch(
        &mut self,
        pipeline: &Arc<Pipeline>,
        args: &[BufferArg<'_>],
        push: &[u8],
        groups: [u32; 3],
    ) -> Result<()> {
        let kernel = pipeline.kernel();
        let iface = kernel.interface();
        let caps = &self.device.inner.caps;
        let bad = |reason: String| Error::InvalidDispatch { kernel: kernel.name().to_string(), reason };
        if pipeline.device_id != Arc::as_ptr(&self.device.inner) as usize {
            return Err(bad("the pipeline was created on another device".into()));
        }
        if args.len() != iface.bindings.len() {
            return Err(bad(format!("takes {} buffers, got {}", iface.bindings.len(), args.len())));
        }
        if push.len() != iface.push_constant_size as usize {
            return Err(bad(format!("takes {} bytes of push constants, got {}", iface.push_constant_size, push.len())));
        }
        for (d, (&g, &max)) in groups.iter().zip(&caps.limits.max_workgroup_count).enumerate() {
            if g > max {
                return Err(bad(format!("{g} workgroups in dimension {d} exceed the device limit {max}")));
            }
        }
        let mut accesses = Vec::with_capacity(args.len());
        let mut infos = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            self.check_buffer(a.buffer)?;
            let size = match a.size {
                Some(s) => s,
                None => a.buffer.size().checked_sub(a.offset).ok_or(Error::OutOfBounds {
                    offset: a.offset,
                    len: 0,
                    size: a.buffer.size(),
                })?,
            };
            if a.offset.checked_add(size).is_none_or(|end| end > a.buffer.size()) {
                return Err(Error::OutOfBounds { offset: a.offset, len: size, size: a.buffer.size() });
            }
            if a.offset % caps.limits.min_storage_buffer_offset_alignment.max(1) != 0 {
                return Err(bad(format!(
                    "binding {i}: offset {} is not a multiple of minStorageBufferOffsetAlignment {}",
                    a.offset, caps.limits.min_storage_buffer_offset_alignment
                )));
            }
            if size > caps.limits.max_storage_buffer_range {
                return Err(bad(format!(
                    "binding {i}: {size} bytes exceed the device's maxStorageBufferRange of {} bytes",
                    caps.limits.max_storage_buffer_range
                )));
            }
            // Vulkan needs a non-empty range; an empty binding gets the (unused) rest of
            // the allocation.
            let (off, range) = if size == 0 { (0, vk::WHOLE_SIZE) } else { (a.offset, size) };
            infos.push(vk::DescriptorBufferInfo { buffer: a.buffer.handle(), offset: off, range });
            accesses.push((a.buffer.id(), a.offset, a.offset + size, iface.bindings[i].access));
        }
        if groups.contains(&0) {
            return Ok(());
        }
        self.track(&accesses)?;
        let set = if pipeline.push_descriptors { None } else { Some(self.alloc_set(pipeline.set_layout)?) };
        let writes: Vec<vk::WriteDescriptorSet<'_>> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                let w = vk::WriteDescriptorSet::default()
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(std::slice::from_ref(info));
                match set {
                    Some(s) => w.dst_set(s),
                    None => w,
                }
            })
            .collect();
        let batch = self.current.as_mut().expect("track() began a batch");
        let cmd = batch.cmd;
        let raw = &self.device.inner.raw;
        // SAFETY: `cmd` is recording; the pipeline, its layout and the buffers are live
        // and kept alive by the batch until its submission completes; the descriptor
        // writes match the layout (one storage buffer per binding, validated ranges);
        // push data is exactly the layout's range size; group counts are within limits.
        unsafe {
            raw.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.raw);
            match set {
                None => {
                    let pd = self
                        .device
                        .inner
                        .push_descriptor
                        .as_ref()
                        .expect("push-descriptor pipelines need the extension");
                    pd.cmd_push_descriptor_set(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.layout, 0, &writes);
                }
                Some(s) => {
                    raw.update_descriptor_sets(&writes, &[]);
                    raw.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.layout, 0, &[s], &[]);
                }
            }
            if !push.is_empty() {
                raw.cmd_push_constants(cmd, pipeline.layout, vk::ShaderStageFlags::COMPUTE, 0, push);
            }
            raw.cmd_dispatch(cmd, groups[0], groups[1], groups[2]);
        }
        batch.commands += 1;
        batch.buffers.extend(args.iter().map(|a| a.buffer.clone()));
        if !batch.pipelines.iter().any(|p| Arc::ptr_eq(p, pipeline)) {
            batch.pipelines.push(pipeline.clone());
        }
        self.stats.dispatches += 1;
        self.stamp(|| format!("{} [{}x{}x{}]{}", kernel.name(), groups[0], groups[1], groups[2], pipeline.spec_label));
        Ok(())
    }

    fn alloc_set(&mut self, layout: vk::DescriptorSetLayout) -> Result<vk::DescriptorSet> {
        let raw = self.device.inner.raw.clone();
        let layouts = [layout];
        if let Some(&pool) = self.current.as_ref().and_then(|b| b.desc_pools.last()) {
            let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(pool).set_layouts(&layouts);
            // SAFETY: the pool belongs to this stream's current batch, used by this thread.
            match unsafe { raw.allocate_descriptor_sets(&info) } {
                Ok(s) => return Ok(s[0]),
                Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL) => {}
                Err(e) => return Err(Error::vk("vkAllocateDescriptorSets")(e)),
            }
        }
        let pool = match self.free_desc_pools.pop() {
            Some(p) => p,
            None => {
                let sizes = [vk::DescriptorPoolSize {
                    ty: vk::DescriptorType::STORAGE_BUFFER,
                    descriptor_count: DESC_POOL_BUFFERS,
                }];
                let info = vk::DescriptorPoolCreateInfo::default().max_sets(DESC_POOL_SETS).pool_sizes(&sizes);
                // SAFETY: the device is live.
                unsafe { raw.create_descriptor_pool(&info, None) }.map_err(Error::vk("vkCreateDescriptorPool"))?
            }
        };
        self.current.as_mut().expect("batch is open").desc_pools.push(pool);
        let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(pool).set_layouts(&layouts);
        // SAFETY: a fresh or reset pool owned by this stream.
        unsafe { raw.allocate_descriptor_sets(&info) }.map(|s| s[0]).map_err(Error::vk("vkAllocateDescriptorSets"))
    }

    /// Records a copy of `len` bytes from `src[src_offset..]` to `dst[dst_offset..]`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for ranges past either buffer's end;
    /// [`Error::InvalidDispatch`] for buffers of another device.
    pub fn copy(&mut self, src: &Buffer, src_offset: u64, dst: &Buffer, dst_offset: u64, len: u64) -> Result<()> {
        self.check_buffer(src)?;
        self.check_buffer(dst)?;
        for (b, off) in [(src, src_offset), (dst, dst_offset)] {
            if off.checked_add(len).is_none_or(|e| e > b.size()) {
                return Err(Error::OutOfBounds { offset: off, len, size: b.size() });
            }
        }
        if len == 0 {
            return Ok(());
        }
        self.track(&[
            (src.id(), src_offset, src_offset + len, Access::Read),
            (dst.id(), dst_offset, dst_offset + len, Access::Write),
        ])?;
        let batch = self.current.as_mut().expect("track() began a batch");
        // SAFETY: recording command buffer; both buffers live (kept by the batch), have
        // TRANSFER usage, and the ranges are in bounds.
        unsafe {
            self.device.inner.raw.cmd_copy_buffer(
                batch.cmd,
                src.handle(),
                dst.handle(),
                &[vk::BufferCopy { src_offset, dst_offset, size: len }],
            );
        }
        batch.commands += 1;
        batch.buffers.push(src.clone());
        batch.buffers.push(dst.clone());
        self.stats.transfers += 1;
        self.stamp(|| "copy".into());
        Ok(())
    }

    /// Records filling `len` bytes of `buffer` from `offset` with the 32-bit `value`
    /// (offset and length multiples of 4).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] past the end; [`Error::InvalidDispatch`] for unaligned
    /// ranges or a buffer of another device.
    pub fn fill(&mut self, buffer: &Buffer, offset: u64, len: u64, value: u32) -> Result<()> {
        self.check_buffer(buffer)?;
        if offset.checked_add(len).is_none_or(|e| e > buffer.size()) {
            return Err(Error::OutOfBounds { offset, len, size: buffer.size() });
        }
        if !offset.is_multiple_of(4) || !len.is_multiple_of(4) {
            return Err(Error::InvalidDispatch {
                kernel: "fill".into(),
                reason: format!("offset {offset} and length {len} must be multiples of 4"),
            });
        }
        if len == 0 {
            return Ok(());
        }
        self.track(&[(buffer.id(), offset, offset + len, Access::Write)])?;
        let batch = self.current.as_mut().expect("track() began a batch");
        // SAFETY: recording command buffer; live buffer with TRANSFER_DST usage; range
        // in bounds and 4-byte aligned.
        unsafe { self.device.inner.raw.cmd_fill_buffer(batch.cmd, buffer.handle(), offset, len, value) };
        batch.commands += 1;
        batch.buffers.push(buffer.clone());
        self.stats.transfers += 1;
        self.stamp(|| "fill".into());
        Ok(())
    }

    /// Ends the command buffer being recorded (closing barrier to the host).
    fn end_current(&mut self) -> Result<Option<Batch>> {
        let Some(batch) = self.current.take() else { return Ok(None) };
        self.full_barrier(batch.cmd, vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ);
        // SAFETY: the command buffer is recording and owned by this stream.
        unsafe { self.raw().end_command_buffer(batch.cmd) }.map_err(Error::vk("vkEndCommandBuffer"))?;
        self.hazards.clear();
        Ok(Some(batch))
    }

    /// Submits everything recorded since the last submission as one command buffer and
    /// returns its point on the timeline. Recording can go on at once.
    ///
    /// # Errors
    /// [`Error::Vulkan`] / [`Error::DeviceLost`] from the submission.
    pub fn submit(&mut self) -> Result<Submission> {
        let last = self.in_flight.back().map_or(0, |b| b.value);
        let Some(mut batch) = self.end_current()? else {
            return Ok(Submission { device: self.device.clone(), value: last });
        };
        if batch.commands == 0 {
            // Nothing to run: recycle the command buffer unsubmitted.
            self.recycle(batch)?;
            return Ok(Submission { device: self.device.clone(), value: last });
        }
        let value = self.device.inner.submit(QueueKind::Compute, batch.cmd)?;
        for b in &batch.buffers {
            b.inner.last_use.fetch_max(value, Ordering::AcqRel);
        }
        batch.value = value;
        if let Some(p) = batch.prof.take() {
            self.device.inner.profile_submitted(value, p);
        }
        self.in_flight.push_back(batch);
        self.stats.submissions += 1;
        Ok(Submission { device: self.device.clone(), value })
    }

    /// Drops everything recorded since the last submission without running it (a step
    /// recorded ahead of time that is no longer wanted). Submitted work is unaffected.
    ///
    /// # Errors
    /// [`Error::Vulkan`] when the command buffer cannot be ended or its descriptor pools
    /// cannot be reset.
    pub fn discard(&mut self) -> Result<()> {
        match self.end_current()? {
            // Never submitted, so nothing pending uses it.
            Some(batch) => self.recycle(batch),
            None => Ok(()),
        }
    }

    /// Returns a batch's command buffer, descriptor pools (reset) and query pool (of a
    /// batch never submitted; a submitted one's went to the device's profiler) to the
    /// free lists. The caller guarantees the batch is not pending: never submitted, or its
    /// submission has completed.
    fn recycle(&mut self, mut b: Batch) -> Result<()> {
        if let Some(p) = b.prof.take() {
            self.device.inner.profile_release(p.pool);
        }
        for p in b.desc_pools.drain(..) {
            // SAFETY: the pool's sets were used only by `b.cmd`, which is not pending
            // (the caller's guarantee).
            unsafe { self.device.inner.raw.reset_descriptor_pool(p, vk::DescriptorPoolResetFlags::empty()) }
                .map_err(Error::vk("vkResetDescriptorPool"))?;
            self.free_desc_pools.push(p);
        }
        // Not pending: `batch()` begins it again, which resets it.
        self.free_cmds.push(b.cmd);
        Ok(())
    }

    /// Submits and waits for completion.
    ///
    /// # Errors
    /// As [`Stream::submit`] and [`Submission::wait`].
    pub fn finish_and_wait(&mut self) -> Result<()> {
        let s = self.submit()?;
        s.wait()?;
        self.retire()
    }

    /// Releases the command buffers, descriptor pools and buffer references of
    /// completed submissions.
    fn retire(&mut self) -> Result<()> {
        let done = self.device.inner.completed(&self.device.inner.compute)?;
        while self.in_flight.front().is_some_and(|b| b.value <= done) {
            let b = self.in_flight.pop_front().expect("checked non-empty");
            // Its submission has completed.
            self.recycle(b)?;
        }
        self.device.inner.profile_collect()
    }

    /// Ends recording and returns the recorded work as a [`Recording`] that can be
    /// submitted again and again. Earlier submissions of this stream are waited for.
    ///
    /// # Errors
    /// As [`Stream::submit`].
    pub fn into_recording(mut self) -> Result<Recording> {
        let batch = self.end_current()?;
        for b in &self.in_flight {
            self.device.inner.wait_queue(&self.device.inner.compute, b.value)?;
        }
        self.retire()?;
        let batch = match batch {
            Some(b) => b,
            None => {
                // An empty recording: begin and end an empty command buffer.
                self.batch()?;
                self.end_current()?.expect("just begun")
            }
        };
        // Hand the pool and the batch to the recording; what is left is destroyed by
        // Stream::drop.
        let pool = std::mem::replace(&mut self.pool, vk::CommandPool::null());
        let free_cmds = std::mem::take(&mut self.free_cmds);
        if !free_cmds.is_empty() {
            // SAFETY: these command buffers are not pending (retired or never submitted).
            unsafe { self.device.inner.raw.free_command_buffers(pool, &free_cmds) };
        }
        Ok(Recording { device: self.device.clone(), pool, batch, last: 0 })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let inner = &self.device.inner;
        if let Some(last) = self.in_flight.back().map(|b| b.value) {
            if inner.wait_queue(&inner.compute, last).is_err() {
                // SAFETY: the device is live; on a failed wait drain the whole device
                // before freeing what the GPU may still use.
                let _ = unsafe { inner.raw.device_wait_idle() };
            }
        }
        let pools: Vec<vk::DescriptorPool> = self
            .free_desc_pools
            .drain(..)
            .chain(self.in_flight.iter_mut().flat_map(|b| b.desc_pools.drain(..)))
            .chain(self.current.iter_mut().flat_map(|b| b.desc_pools.drain(..)))
            .collect();
        // SAFETY: no submission of this stream is pending (waited above); destroying the
        // pool frees its command buffers.
        unsafe {
            for p in pools {
                inner.raw.destroy_descriptor_pool(p, None);
            }
            if self.pool != vk::CommandPool::null() {
                inner.raw.destroy_command_pool(self.pool, None);
            }
            if let Some(p) = self.current.as_mut().and_then(|b| b.prof.take()) {
                // Never submitted: free for another command buffer.
                inner.profile_release(p.pool);
            }
        }
    }
}

/// A recorded command buffer that can be submitted repeatedly. It keeps its buffers
/// and pipelines alive; change what it computes by writing its parameter buffers
/// between submissions ([`Buffer::write`] waits for a pending replay first).
pub struct Recording {
    device: Device,
    pool: vk::CommandPool,
    batch: Batch,
    last: u64,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording").field("commands", &self.batch.commands).field("last", &self.last).finish()
    }
}

impl Recording {
    /// Submits the recorded work again (waiting first for its previous submission,
    /// since a command buffer cannot be pending twice).
    ///
    /// # Errors
    /// As [`Stream::submit`] and [`Submission::wait`].
    pub fn submit(&mut self) -> Result<Submission> {
        self.device.inner.wait_compute_value(self.last)?;
        if self.batch.commands == 0 {
            return Ok(Submission { device: self.device.clone(), value: self.last });
        }
        let value = self.device.inner.submit(QueueKind::Compute, self.batch.cmd)?;
        for b in &self.batch.buffers {
            b.inner.last_use.fetch_max(value, Ordering::AcqRel);
        }
        self.last = value;
        Ok(Submission { device: self.device.clone(), value })
    }

    /// Number of commands (dispatches, copies, fills) recorded.
    pub fn commands(&self) -> u64 {
        self.batch.commands
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let inner = &self.device.inner;
        if inner.wait_queue(&inner.compute, self.last).is_err() {
            // SAFETY: the device is live.
            let _ = unsafe { inner.raw.device_wait_idle() };
        }
        // SAFETY: the recording's last submission has completed; the pools are owned.
        unsafe {
            for p in self.batch.desc_pools.drain(..) {
                inner.raw.destroy_descriptor_pool(p, None);
            }
            if let Some(p) = self.batch.prof.take() {
                inner.raw.destroy_query_pool(p.pool, None);
            }
            inner.raw.destroy_command_pool(self.pool, None);
        }
    }
}
