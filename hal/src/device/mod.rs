//! The logical device: queues and their timeline semaphores, memory, the pipeline cache
//! and the kernel registry. The files: `create.rs` opens it, `queue.rs` submits and waits,
//! `profile.rs` times dispatches, `pipeline_cache.rs` keeps the cache on disk.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ash::vk;
use parking_lot::Mutex;

use crate::caps::Capabilities;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::instance::{DeviceSelector, Instance, InstanceOptions};
use crate::memory::{Buffer, Memory, MemoryKind, MemoryStats};
use crate::pipeline::{Kernel, Pipeline, PipelineKey};
use crate::shader::ShaderFrontend;

/// Options for opening a device.
#[derive(Debug, Clone, Default)]
pub struct DeviceOptions {
    /// Use staging buffers even where device-local memory is host-visible (UMA), so the
    /// discrete-GPU path can be exercised on lavapipe.
    pub force_staging: bool,
    /// Use pooled descriptor sets even where `VK_KHR_push_descriptor` is available.
    pub disable_push_descriptors: bool,
    /// Do transfers on the compute queue even where a dedicated transfer queue exists.
    pub disable_transfer_queue: bool,
    /// Directory of the persisted pipeline cache; default `$VKML_CACHE_DIR`, else the
    /// user cache dir (`~/.cache/vkml` on Linux). The cache is not persisted when no
    /// directory can be determined.
    pub cache_dir: Option<PathBuf>,
    /// Bytes of freed buffers kept for reuse; default a quarter of the device-local
    /// budget, at most 16 GiB. A step's scratch returns all at once when its command
    /// buffer retires and is taken again by the next: a cache smaller than that frees and
    /// reallocates the excess every step (a 512-token llama-8b prompt's recording took
    /// 63 ms instead of 2 ms on an H200 with 2 GiB). Cached buffers are released when an
    /// allocation would otherwise fail.
    pub buffer_cache_bytes: Option<u64>,
    /// Have the driver keep each compute pipeline's compiler statistics (registers,
    /// shared memory, instruction counts: whatever it reports) for
    /// [`Device::pipeline_statistics`], through VK_KHR_pipeline_executable_properties.
    /// Off by default (capturing may cost compile time); where the driver lacks the
    /// extension the device opens without it.
    pub pipeline_statistics: bool,
    /// Most bytes vkml allocates from each memory heap (VMA's `pHeapSizeLimit`):
    /// allocations past it fail as out of memory, as on a device with that much memory.
    /// The probed capabilities (and so the memory budgets that model loads check first)
    /// are unchanged. For keeping vkml under a size on a shared GPU, and for testing
    /// out-of-memory paths. `None`: the heaps' own sizes.
    pub heap_size_limit: Option<u64>,
}

/// One compiler statistic of a pipeline executable (`VkPipelineExecutableStatisticKHR`),
/// as the driver names and describes it; the value formatted from its declared type
/// (bool, integer or float). Which statistics exist, and their units, are the driver's.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineStatistic {
    /// The executable (shader stage) it belongs to, by the driver's name.
    pub executable: String,
    /// Short name, e.g. a register count.
    pub name: String,
    /// The driver's description.
    pub description: String,
    /// The value.
    pub value: String,
}

/// A logical device. Cheap to clone (reference counted). Buffers, kernels, pipelines and
/// streams keep it alive; the last one to go tears it down (waiting for the GPU,
/// freeing every allocation, saving the pipeline cache).
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("ordinal", &self.inner.ordinal).field("name", &self.inner.caps.name).finish()
    }
}

/// Which queue a submission went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// The compute queue.
    Compute,
    /// The dedicated transfer queue.
    Transfer,
}

pub(crate) struct Queue {
    pub(crate) family: u32,
    raw: Mutex<vk::Queue>,
    pub(crate) timeline: vk::Semaphore,
    last_submitted: AtomicU64,
}

pub(crate) struct DeviceInner {
    pub(crate) instance: Instance,
    pub(crate) caps: Capabilities,
    pub(crate) ordinal: usize,
    pub(crate) raw: ash::Device,
    pub(crate) compute: Queue,
    pub(crate) transfer: Option<Queue>,
    pub(crate) push_descriptor: Option<ash::khr::push_descriptor::Device>,
    /// Set where [`DeviceOptions::pipeline_statistics`] asked for statistics and the
    /// driver has VK_KHR_pipeline_executable_properties with `pipelineExecutableInfo`.
    pub(crate) pipeline_exec: Option<ash::khr::pipeline_executable_properties::Device>,
    pub(crate) memory: ManuallyDrop<Memory>,
    pub(crate) sharing_families: Vec<u32>,
    pub(crate) host_visible_device_local: bool,
    pub(crate) max_buffer_size: u64,
    pub(crate) pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
    pub(crate) kernels: Mutex<HashMap<String, Kernel>>,
    pub(crate) pipeline_cache: vk::PipelineCache,
    pipeline_cache_path: Option<PathBuf>,
    pub(crate) pipeline_cache_loaded: usize,
    transfer_pool: Mutex<vk::CommandPool>,
    pub(crate) wait_timeout_ns: u64,
    pub(crate) profiler: Profiler,
}

/// GPU time of one kernel (or of `copy` / `fill` commands) over the commands profiled
/// since profiling was switched on or last read ([`Device::set_profiling`],
/// [`Device::take_profile`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    /// The kernel's name and its dispatch's workgroup counts, e.g.
    /// `mul_mat_cm.q4_0 [32x4x1]` (so one kernel at two shapes is two entries); `copy`
    /// and `fill` for transfers.
    pub name: String,
    /// Commands recorded with it.
    pub calls: u64,
    /// Summed GPU time, seconds: for each command, the time between the timestamp
    /// written after the command before it and the one written after it (Vulkan
    /// timestamps at `BOTTOM_OF_PIPE`, `timestampPeriod` nanoseconds per tick). Commands
    /// that the driver runs overlapped share their time unevenly, so one kernel's figure
    /// is only exact where a barrier separates it from its neighbours; the sum over all
    /// kernels is the command buffers' GPU time.
    pub seconds: f64,
}

/// The timestamp queries of one profiled command buffer: query 0 is written after the
/// opening barrier, query i + 1 after the command labelled `labels[i]`.
pub(crate) struct BatchProfile {
    pub(crate) pool: vk::QueryPool,
    pub(crate) labels: Vec<Arc<str>>,
}

/// Profiling state shared by the device's streams.
#[derive(Default)]
pub(crate) struct Profiler {
    pub(crate) on: AtomicBool,
    /// Per label: (commands, GPU nanoseconds).
    totals: Mutex<HashMap<Arc<str>, (u64, f64)>>,
    /// Submitted profiled command buffers, by compute-timeline value, not yet read.
    pending: Mutex<Vec<(u64, BatchProfile)>>,
    /// Query pools not in use by any command buffer.
    free_pools: Mutex<Vec<vk::QueryPool>>,
}

/// Timestamps per profiled command buffer; commands past it are counted, not timed.
pub(crate) const PROFILE_QUERIES: u32 = 8192;
/// The label of commands past a command buffer's [`PROFILE_QUERIES`].
const UNTIMED: &str = "(untimed: past the command buffer's timestamp queries)";

/// Process-wide count of devices torn down with live allocations (a leak detector that
/// tests read; stays 0 in a correct program).
pub static LEAKED_DEVICES: AtomicU64 = AtomicU64::new(0);

impl Device {
    /// Opens the device with enumeration index `ordinal`, on a new instance (validation
    /// per `VKML_VALIDATION`).
    ///
    /// # Errors
    /// [`Error::NoLoader`], [`Error::BadOrdinal`], [`Error::UnsupportedDevice`], or a
    /// Vulkan error from device creation.
    pub fn new(ordinal: usize) -> Result<Device> {
        Self::open(&DeviceSelector::Ordinal(ordinal), DeviceOptions::default())
    }

    /// Opens the device `VKML_DEVICE` names (an index or part of a name), or the best
    /// device (discrete > integrated > virtual > CPU) when it is unset.
    ///
    /// # Errors
    /// As [`Device::new`], plus [`Error::NoDevice`] and [`Error::DeviceNotFound`].
    pub fn from_env() -> Result<Device> {
        Self::open(&DeviceSelector::from_env(), DeviceOptions::default())
    }

    /// Opens a device on a new instance (validation per `VKML_VALIDATION`).
    ///
    /// # Errors
    /// As [`Instance::new`] and [`Instance::create_device`].
    pub fn open(selector: &DeviceSelector, options: DeviceOptions) -> Result<Device> {
        let instance = Instance::new(&InstanceOptions::from_env())?;
        instance.create_device(selector, options)
    }

    /// The device's capabilities.
    pub fn caps(&self) -> &Capabilities {
        &self.inner.caps
    }

    /// Enumeration index of the device.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The instance the device was created from.
    pub fn instance(&self) -> &Instance {
        &self.inner.instance
    }

    /// Whether device-local buffers are written and read in place (UMA, not forced to
    /// stage).
    pub fn is_uma(&self) -> bool {
        self.inner.host_visible_device_local
    }

    /// Whether dispatches bind buffers with push descriptors.
    pub fn uses_push_descriptors(&self) -> bool {
        self.inner.push_descriptor.is_some()
    }

    /// Whether a dedicated transfer queue is in use.
    pub fn has_transfer_queue(&self) -> bool {
        self.inner.transfer.is_some()
    }

    /// Allocates a buffer of `size` bytes (0 allowed); contents are undefined.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] with the requested size and the heap's size, budget and
    /// usage when the request cannot be met.
    pub fn alloc(&self, size: u64, kind: MemoryKind) -> Result<Buffer> {
        Buffer::new(&self.inner, size, kind)
    }

    /// Allocates a device-local buffer holding `data`.
    ///
    /// # Errors
    /// As [`Device::alloc`] and [`Buffer::write`].
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let b = self.alloc(bytes.len() as u64, MemoryKind::DeviceLocal)?;
        b.write(0, bytes)?;
        Ok(b)
    }

    /// Memory statistics (VMA's live allocations and blocks, and the recycle cache).
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.memory.stats()
    }

    /// Frees every buffer held in the recycle cache.
    pub fn release_cached_buffers(&self) {
        self.inner.memory.release_cached();
    }

    /// Compiles (or passes through) `source` with `frontend`, reflects its interface and
    /// registers it under `name`, replacing an earlier registration of that name.
    ///
    /// # Errors
    /// [`Error::Shader`] with the compiler's message (file, line) or the reflection
    /// problem.
    pub fn register_kernel(&self, name: &str, frontend: &dyn ShaderFrontend, source: &[u8]) -> Result<Kernel> {
        let words = frontend.to_spirv(name, source)?;
        let kernel = Kernel::from_spirv(name, words)?;
        self.inner.kernels.lock().insert(name.to_string(), kernel.clone());
        Ok(kernel)
    }

    /// A kernel by name: one registered with [`Device::register_kernel`], else a
    /// build-time shader of `vkml_shaders` (e.g. `"affine.f32"`).
    ///
    /// # Errors
    /// [`Error::UnknownKernel`] when neither exists.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let mut kernels = self.inner.kernels.lock();
        if let Some(k) = kernels.get(name) {
            return Ok(k.clone());
        }
        // Built-in kernels are cached on first use: making one hashes its SPIR-V (the
        // pipeline-cache key), which cost ~10 µs per dispatch when done on every lookup.
        let k = Kernel::builtin(name)?;
        kernels.insert(name.to_string(), k.clone());
        Ok(k)
    }

    /// Waits until all work submitted so far on every queue has finished.
    ///
    /// # Errors
    /// [`Error::DeviceLost`], [`Error::Timeout`], or [`Error::Validation`] when
    /// validation is on and reported errors.
    pub fn synchronize(&self) -> Result<()> {
        let c = self.inner.compute.last_submitted.load(Ordering::Acquire);
        self.inner.wait_queue(&self.inner.compute, c)?;
        if let Some(t) = &self.inner.transfer {
            self.inner.wait_queue(t, t.last_submitted.load(Ordering::Acquire))?;
        }
        self.inner.instance.check_validation()
    }

    pub(crate) fn get_pipeline(&self, kernel: &Kernel, key: PipelineKey) -> Result<Arc<Pipeline>> {
        if let Some(p) = self.inner.pipelines.lock().get(&key) {
            return Ok(p.clone());
        }
        let p = Arc::new(Pipeline::create(&self.inner, kernel, &key)?);
        Ok(self.inner.pipelines.lock().entry(key).or_insert(p).clone())
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // SAFETY: this is the last reference to the device: no buffer, stream or kernel
        // refers to it any more. Wait for the GPU, then destroy children before the
        // device, the allocator's pools before the allocator.
        unsafe {
            let _ = self.raw.device_wait_idle();
            let _ = self.save_pipeline_cache();
            for (_, p) in self.pipelines.lock().drain() {
                p.destroy(&self.raw);
            }
            self.raw.destroy_pipeline_cache(self.pipeline_cache, None);
            self.raw.destroy_command_pool(*self.transfer_pool.lock(), None);
            let pending = self.profiler.pending.lock().drain(..).map(|(_, p)| p.pool).collect::<Vec<_>>();
            for q in self.profiler.free_pools.lock().drain(..).chain(pending) {
                self.raw.destroy_query_pool(q, None);
            }
            self.memory.release_cached();
            let stats = self.memory.stats();
            if stats.live_allocations != 0 {
                LEAKED_DEVICES.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    "vkml device dropped with {} live allocations ({} bytes)",
                    stats.live_allocations,
                    stats.allocation_bytes
                );
            }
            ManuallyDrop::drop(&mut self.memory);
            self.raw.destroy_semaphore(self.compute.timeline, None);
            if let Some(t) = &self.transfer {
                self.raw.destroy_semaphore(t.timeline, None);
            }
            self.raw.destroy_device(None);
        }
    }
}

mod create;
mod pipeline_cache;
mod profile;
mod queue;
