//! Per-dispatch GPU timestamps ([`Device::set_profiling`], [`Device::take_profile`]) and
//! pipeline statistics.

use std::ffi::CStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ash::vk;

use crate::error::{Error, Result};

use super::*;

impl Device {
    /// Switches GPU profiling on or off for this device's streams. While it is on, each
    /// command buffer a [`crate::Stream`] begins gets a timestamp query pool and writes a
    /// timestamp after every dispatch, copy and fill; when its submission completes the
    /// times are summed per kernel name for [`Device::take_profile`]. The timestamps may
    /// serialize commands the driver would otherwise overlap, so profiled runs are
    /// slower; use them to see where time goes, not for throughput figures.
    ///
    /// # Errors
    /// [`Error::MissingFeature`] where the compute queue family has no
    /// `timestampValidBits` or the device reports a `timestampPeriod` of 0.
    pub fn set_profiling(&self, on: bool) -> Result<()> {
        let caps = &self.inner.caps;
        if on && (caps.queues.compute_timestamp_bits == 0 || caps.limits.timestamp_period_ps == 0) {
            return Err(Error::MissingFeature {
                feature: "timestamps on the compute queue (timestampValidBits > 0)".into(),
                needed_by: "Device::set_profiling".into(),
                device: caps.name.clone(),
            });
        }
        self.inner.profiler.on.store(on, Ordering::Release);
        Ok(())
    }

    /// Whether profiling is on ([`Device::set_profiling`]).
    pub fn profiling(&self) -> bool {
        self.inner.profiler.on.load(Ordering::Acquire)
    }

    /// The GPU time per kernel summed since profiling was switched on or this was last
    /// called (which resets the sums), slowest first. Only completed submissions count:
    /// wait for the work (e.g. [`crate::Stream::finish_and_wait`]) before reading.
    pub fn take_profile(&self) -> Vec<KernelTime> {
        // A read error leaves those command buffers' times out; the sums stay usable.
        if let Err(e) = self.inner.profile_collect() {
            tracing::warn!("profile: {e}");
        }
        let totals = std::mem::take(&mut *self.inner.profiler.totals.lock());
        let mut v: Vec<KernelTime> = totals
            .into_iter()
            .map(|(name, (calls, ns))| KernelTime { name: name.to_string(), calls, seconds: ns * 1e-9 })
            .collect();
        v.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then_with(|| a.name.cmp(&b.name)));
        v
    }

    /// The driver's compiler statistics of `pipeline` (VK_KHR_pipeline_executable_properties:
    /// for each executable, `vkGetPipelineExecutableStatisticsKHR`), e.g. registers per
    /// invocation, to see what bounds a kernel's occupancy.
    ///
    /// # Errors
    /// [`Error::MissingFeature`] where the device was opened without
    /// [`DeviceOptions::pipeline_statistics`] or the driver lacks the extension;
    /// [`Error::InvalidDispatch`] for a pipeline of another device; Vulkan errors.
    pub fn pipeline_statistics(&self, pipeline: &crate::Pipeline) -> Result<Vec<PipelineStatistic>> {
        let Some(exec) = &self.inner.pipeline_exec else {
            return Err(Error::MissingFeature {
                feature: "VK_KHR_pipeline_executable_properties, enabled by DeviceOptions::pipeline_statistics".into(),
                needed_by: "Device::pipeline_statistics".into(),
                device: self.inner.caps.name.clone(),
            });
        };
        if pipeline.device_id != Arc::as_ptr(&self.inner) as usize {
            return Err(Error::InvalidDispatch {
                kernel: pipeline.kernel().name().to_string(),
                reason: "the pipeline was created on another device".into(),
            });
        }
        let text = |c: &[std::ffi::c_char]| {
            // SAFETY: the driver writes NUL-terminated strings into these fixed arrays.
            unsafe { CStr::from_ptr(c.as_ptr()) }.to_string_lossy().into_owned()
        };
        let info = vk::PipelineInfoKHR::default().pipeline(pipeline.raw);
        // SAFETY: the pipeline is alive (borrowed) and was created on this device with
        // CAPTURE_STATISTICS (set at creation whenever pipeline_exec exists).
        let execs = unsafe { exec.get_pipeline_executable_properties(&info) }
            .map_err(Error::vk("vkGetPipelineExecutablePropertiesKHR"))?;
        let mut out = Vec::new();
        for (i, e) in execs.iter().enumerate() {
            let info = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline.raw).executable_index(i as u32);
            // SAFETY: as above; the index is below the executable count just read.
            let stats = unsafe { exec.get_pipeline_executable_statistics(&info) }
                .map_err(Error::vk("vkGetPipelineExecutableStatisticsKHR"))?;
            for st in stats {
                // SAFETY: the union member read is the one `format` declares.
                let value = unsafe {
                    match st.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (st.value.b32 != 0).to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => st.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => st.value.u64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => st.value.f64.to_string(),
                        _ => "?".into(),
                    }
                };
                out.push(PipelineStatistic {
                    executable: text(&e.name),
                    name: text(&st.name),
                    description: text(&st.description),
                    value,
                });
            }
        }
        Ok(out)
    }
}

impl DeviceInner {
    /// A timestamp query pool of [`PROFILE_QUERIES`] queries not in use by any command
    /// buffer (to be reset by the command buffer that uses it).
    pub(crate) fn profile_pool(&self) -> Result<vk::QueryPool> {
        if let Some(p) = self.profiler.free_pools.lock().pop() {
            return Ok(p);
        }
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(PROFILE_QUERIES);
        // SAFETY: the device is live.
        unsafe { self.raw.create_query_pool(&info, None) }.map_err(Error::vk("vkCreateQueryPool"))
    }

    /// Returns a pool whose command buffer was never submitted (or has completed and
    /// been read) to the free list.
    pub(crate) fn profile_release(&self, pool: vk::QueryPool) {
        self.profiler.free_pools.lock().push(pool);
    }

    /// Counts a command recorded past its command buffer's queries.
    pub(crate) fn profile_untimed(&self) {
        self.profiler.totals.lock().entry(Arc::from(UNTIMED)).or_default().0 += 1;
    }

    /// Takes the queries of a command buffer submitted at compute-timeline `value`.
    pub(crate) fn profile_submitted(&self, value: u64, p: BatchProfile) {
        self.profiler.pending.lock().push((value, p));
    }

    /// Adds the timestamps of every completed profiled command buffer to the sums and
    /// frees their pools.
    pub(crate) fn profile_collect(&self) -> Result<()> {
        let done = {
            let mut pending = self.profiler.pending.lock();
            if pending.is_empty() {
                return Ok(());
            }
            let completed = self.completed(&self.compute)?;
            let (done, wait): (Vec<_>, Vec<_>) = pending.drain(..).partition(|(v, _)| *v <= completed);
            *pending = wait;
            done
        };
        let bits = self.caps.queues.compute_timestamp_bits;
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let ns_per_tick = self.caps.limits.timestamp_period_ps as f64 / 1000.0;
        let mut first_err = None;
        for (_, p) in done {
            let mut ts = vec![0u64; p.labels.len() + 1];
            // SAFETY: queries 0..=labels.len() were reset and written by a command buffer
            // whose submission has completed (its timeline value is reached), so WAIT
            // returns at once; the pool is owned by the profiler.
            let read = unsafe {
                self.raw.get_query_pool_results(
                    p.pool,
                    0,
                    &mut ts,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            };
            match read {
                Ok(()) => {
                    let mut totals = self.profiler.totals.lock();
                    for (i, label) in p.labels.iter().enumerate() {
                        let ticks = ts[i + 1].wrapping_sub(ts[i]) & mask;
                        let e = totals.entry(label.clone()).or_default();
                        e.0 += 1;
                        e.1 += ticks as f64 * ns_per_tick;
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(Error::vk("vkGetQueryPoolResults")(e));
                }
            }
            self.profile_release(p.pool);
        }
        first_err.map_or(Ok(()), Err)
    }
}
