//! The logical device: queues and their timeline semaphores, memory, the pipeline cache
//! and the kernel registry.

use std::collections::HashMap;
use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ash::vk;
use parking_lot::Mutex;

use crate::caps::{Bfloat16FeaturesKHR, Capabilities, CoopMat2FeaturesNV, KHR_BF16_EXT, NV_COOPMAT2_EXT};
use crate::error::{Error, Result};
use crate::instance::{Adapter, DeviceSelector, Instance, InstanceOptions};
use crate::memory::{Buffer, Memory, MemoryConfig, MemoryKind, MemoryStats};
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

    /// Creates the logical device for `adapter`, enabling every feature vkml's kernels
    /// can use that the device offers.
    ///
    /// # Errors
    /// [`Error::UnsupportedDevice`] below Vulkan 1.2 or without timeline semaphores; a
    /// Vulkan error when creation fails.
    pub fn from_adapter(instance: &Instance, adapter: &Adapter, options: DeviceOptions) -> Result<Device> {
        let caps = adapter.caps.clone();
        if let Some(reason) = &caps.unusable {
            return Err(Error::UnsupportedDevice { device: caps.name.clone(), reason: reason.clone() });
        }
        let raw_inst = &instance.inner.raw;
        let pd = adapter.physical;
        let api = caps.api_version_raw.min(instance.inner.api_version);
        let is13 = api >= vk::API_VERSION_1_3;
        // SAFETY: pd belongs to the live instance.
        let exts = unsafe { raw_inst.enumerate_device_extension_properties(pd) }
            .map_err(Error::vk("vkEnumerateDeviceExtensionProperties"))?;
        let has = |n: &CStr| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(n));

        let mut ext_names: Vec<*const std::ffi::c_char> = Vec::new();
        let use_push = caps.push_descriptor && !options.disable_push_descriptors;
        if use_push {
            ext_names.push(ash::khr::push_descriptor::NAME.as_ptr());
        }
        let opt_exts: [(&CStr, bool); 8] = [
            // The spec requires enabling it where a device exposes it (MoltenVK, other
            // non-conformant implementations listed through portability enumeration).
            (ash::khr::portability_subset::NAME, true),
            (ash::ext::memory_budget::NAME, true),
            (ash::ext::subgroup_size_control::NAME, !is13),
            (ash::khr::shader_integer_dot_product::NAME, !is13),
            (ash::khr::maintenance4::NAME, !is13),
            (ash::khr::cooperative_matrix::NAME, true),
            (NV_COOPMAT2_EXT, true),
            (KHR_BF16_EXT, true),
        ];
        for (name, wanted) in opt_exts {
            if wanted && has(name) {
                ext_names.push(name.as_ptr());
            }
        }
        let mut f_exec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let use_exec = options.pipeline_statistics && has(ash::khr::pipeline_executable_properties::NAME) && {
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f_exec);
            // SAFETY: pd belongs to the live instance (Vulkan >= 1.2 was checked by the
            // probe, so vkGetPhysicalDeviceFeatures2 exists); f2 chains one valid struct.
            unsafe { raw_inst.get_physical_device_features2(pd, &mut f2) };
            f_exec.pipeline_executable_info == vk::TRUE
        };
        if use_exec {
            ext_names.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        }
        let enabled = |n: &CStr| {
            ext_names.iter().any(|&p| {
                // SAFETY: every pointer in ext_names comes from a 'static CStr.
                let name = unsafe { CStr::from_ptr(p) };
                name == n
            })
        };

        // Features: enable what the probe found supported.
        let t = &caps.types;
        let core =
            vk::PhysicalDeviceFeatures::default().shader_float64(t.float64).shader_int64(t.int64).shader_int16(t.int16);
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(t.storage_buffer_16bit)
            .uniform_and_storage_buffer16_bit_access(false);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(t.float16)
            .shader_int8(t.int8)
            .storage_buffer8_bit_access(t.storage_buffer_8bit)
            .timeline_semaphore(true)
            .vulkan_memory_model(caps.vulkan_memory_model)
            .vulkan_memory_model_device_scope(caps.vulkan_memory_model)
            .buffer_device_address(caps.buffer_device_address);
        let mut f_sg = vk::PhysicalDeviceSubgroupSizeControlFeatures::default()
            .subgroup_size_control(caps.subgroup.size_control)
            .compute_full_subgroups(caps.subgroup.full_subgroups);
        let mut f_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(caps.integer_dot.supported);
        let mut f_m4 = vk::PhysicalDeviceMaintenance4Features::default().maintenance4(true);
        let mut f_cm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut f_cm2 = CoopMat2FeaturesNV::default();
        if let Some(nv) = &caps.nv_cooperative_matrix2 {
            let b = |v: bool| if v { vk::TRUE } else { vk::FALSE };
            f_cm2.workgroup_scope = b(nv.workgroup_scope);
            f_cm2.flexible_dimensions = b(nv.flexible_dimensions);
            f_cm2.reductions = b(nv.reductions);
            f_cm2.conversions = b(nv.conversions);
            f_cm2.per_element_operations = b(nv.per_element_operations);
            f_cm2.tensor_addressing = b(nv.tensor_addressing);
            f_cm2.block_loads = b(nv.block_loads);
        }
        let mut f_bf16 = Bfloat16FeaturesKHR {
            bfloat16_type: t.bfloat16.into(),
            bfloat16_dot_product: t.bfloat16_dot.into(),
            bfloat16_cooperative_matrix: t.bfloat16_cooperative_matrix.into(),
            ..Default::default()
        };
        let mut features2 =
            vk::PhysicalDeviceFeatures2::default().features(core).push_next(&mut f11).push_next(&mut f12);
        if is13 || enabled(ash::ext::subgroup_size_control::NAME) {
            features2 = features2.push_next(&mut f_sg);
        }
        if is13 || enabled(ash::khr::shader_integer_dot_product::NAME) {
            features2 = features2.push_next(&mut f_dot);
        }
        if is13 || enabled(ash::khr::maintenance4::NAME) {
            features2 = features2.push_next(&mut f_m4);
        }
        if enabled(ash::khr::cooperative_matrix::NAME) && !caps.cooperative_matrix.is_empty() {
            features2 = features2.push_next(&mut f_cm);
        }
        if enabled(NV_COOPMAT2_EXT) {
            features2 = features2.push_next(&mut f_cm2);
        }
        if enabled(KHR_BF16_EXT) {
            features2 = features2.push_next(&mut f_bf16);
        }
        if use_exec {
            features2 = features2.push_next(&mut f_exec);
        }

        let compute_family = caps.queues.compute_family;
        let transfer_family = if options.disable_transfer_queue { None } else { caps.queues.transfer_family };
        let prio = [1.0f32];
        let mut queue_infos =
            vec![vk::DeviceQueueCreateInfo::default().queue_family_index(compute_family).queue_priorities(&prio)];
        if let Some(tf) = transfer_family {
            queue_infos.push(vk::DeviceQueueCreateInfo::default().queue_family_index(tf).queue_priorities(&prio));
        }
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_infos)
            .enabled_extension_names(&ext_names)
            .push_next(&mut features2);
        // SAFETY: pd belongs to the live instance; every enabled extension is supported
        // and every enabled feature was reported supported by the probe.
        let raw = unsafe { raw_inst.create_device(pd, &info, None) }.map_err(Error::vk("vkCreateDevice"))?;

        // From here on, a failure must destroy what was created: build step by step.
        let make_queue = |family: u32| -> Result<Queue> {
            // SAFETY: the family was requested with one queue at device creation.
            let q = unsafe { raw.get_device_queue(family, 0) };
            let mut ti =
                vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
            // SAFETY: the device is live and timelineSemaphore is enabled.
            let sem = unsafe { raw.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut ti), None) }
                .map_err(Error::vk("vkCreateSemaphore"))?;
            Ok(Queue { family, raw: Mutex::new(q), timeline: sem, last_submitted: AtomicU64::new(0) })
        };
        let destroy_partial = |qs: &[&Queue]| {
            // SAFETY: nothing has been submitted; the semaphores and device are unused.
            unsafe {
                for q in qs {
                    raw.destroy_semaphore(q.timeline, None);
                }
                raw.destroy_device(None);
            }
        };
        let compute = match make_queue(compute_family) {
            Ok(q) => q,
            Err(e) => {
                destroy_partial(&[]);
                return Err(e);
            }
        };
        let transfer = match transfer_family.map(make_queue).transpose() {
            Ok(t) => t,
            Err(e) => {
                destroy_partial(&[&compute]);
                return Err(e);
            }
        };
        let sharing_families: Vec<u32> = std::iter::once(compute_family).chain(transfer_family).collect();
        let host_visible_device_local = caps.memory.uma && !options.force_staging;
        let cache_limit = options
            .buffer_cache_bytes
            .unwrap_or_else(|| (caps.memory.device_local_budget / 4).clamp(64 << 20, 16 << 30));
        let memory = match Memory::new(
            raw_inst,
            &raw,
            pd,
            &MemoryConfig {
                api_version: api,
                budget_ext: caps.memory.budget_extension,
                host_visible_device_local,
                sharing_families: &sharing_families,
                cache_limit,
                heap_limit: options.heap_size_limit,
            },
        ) {
            Ok(m) => m,
            Err(e) => {
                let qs: Vec<&Queue> = std::iter::once(&compute).chain(transfer.as_ref()).collect();
                destroy_partial(&qs);
                return Err(e);
            }
        };
        let cache_dir = options
            .cache_dir
            .clone()
            .or_else(|| std::env::var_os("VKML_CACHE_DIR").map(PathBuf::from))
            .or_else(|| dirs::cache_dir().map(|d| d.join("vkml")));
        let pipeline_cache_path = cache_dir
            .map(|d| d.join("pipelines").join(format!("{}-{:08x}.bin", caps.device_uuid, caps.driver_version_raw)));
        let initial = pipeline_cache_path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .filter(|data| pipeline_cache_header_matches(data, &caps))
            .unwrap_or_default();
        // SAFETY: the device is live; `initial` is empty or carries a header that matches
        // this device (checked above), which the driver validates further.
        let pipeline_cache =
            unsafe { raw.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default().initial_data(&initial), None) }
                .or_else(|_| {
                    // SAFETY: as above, with no initial data.
                    unsafe { raw.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None) }
                })
                .map_err(Error::vk("vkCreatePipelineCache"));
        let pipeline_cache = match pipeline_cache {
            Ok(c) => c,
            Err(e) => {
                drop(memory);
                let qs: Vec<&Queue> = std::iter::once(&compute).chain(transfer.as_ref()).collect();
                destroy_partial(&qs);
                return Err(e);
            }
        };
        let pool_family = transfer.as_ref().map_or(compute_family, |t| t.family);
        // SAFETY: the device is live; the family exists.
        let transfer_pool = unsafe {
            raw.create_command_pool(
                &vk::CommandPoolCreateInfo::default()
                    .queue_family_index(pool_family)
                    .flags(vk::CommandPoolCreateFlags::TRANSIENT),
                None,
            )
        }
        .map_err(Error::vk("vkCreateCommandPool"));
        let transfer_pool = match transfer_pool {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: the cache is unused.
                unsafe { raw.destroy_pipeline_cache(pipeline_cache, None) };
                drop(memory);
                let qs: Vec<&Queue> = std::iter::once(&compute).chain(transfer.as_ref()).collect();
                destroy_partial(&qs);
                return Err(e);
            }
        };
        let push_descriptor = use_push.then(|| ash::khr::push_descriptor::Device::new(raw_inst, &raw));
        let pipeline_exec = use_exec.then(|| ash::khr::pipeline_executable_properties::Device::new(raw_inst, &raw));
        let wait_timeout_ns = std::env::var("VKML_WAIT_TIMEOUT_S")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(600)
            .saturating_mul(1_000_000_000);
        let max_buffer_size = if caps.limits.max_buffer_size == 0 { u64::MAX } else { caps.limits.max_buffer_size };
        let inner = DeviceInner {
            instance: instance.clone(),
            ordinal: adapter.ordinal,
            raw,
            compute,
            transfer,
            push_descriptor,
            pipeline_exec,
            memory: ManuallyDrop::new(memory),
            sharing_families,
            host_visible_device_local,
            max_buffer_size,
            pipelines: Mutex::new(HashMap::new()),
            kernels: Mutex::new(HashMap::new()),
            pipeline_cache,
            pipeline_cache_path,
            pipeline_cache_loaded: initial.len(),
            transfer_pool: Mutex::new(transfer_pool),
            wait_timeout_ns,
            profiler: Profiler::default(),
            caps,
        };
        tracing::info!(device = %inner.caps.name, ordinal = inner.ordinal, "vkml device opened");
        Ok(Device { inner: Arc::new(inner) })
    }

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

    /// The device's capabilities.
    pub fn caps(&self) -> &Capabilities {
        &self.inner.caps
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

    /// Bytes of pipeline-cache data loaded from disk when the device was opened.
    pub fn pipeline_cache_loaded_bytes(&self) -> usize {
        self.inner.pipeline_cache_loaded
    }

    /// Where the pipeline cache is persisted, if anywhere.
    pub fn pipeline_cache_path(&self) -> Option<&std::path::Path> {
        self.inner.pipeline_cache_path.as_deref()
    }

    /// Writes the pipeline cache to disk now (it is also written when the device drops).
    ///
    /// # Errors
    /// [`Error::Vulkan`] when the data cannot be read back from the driver; I/O errors are
    /// logged, not returned (the cache is an optimisation).
    pub fn save_pipeline_cache(&self) -> Result<()> {
        self.inner.save_pipeline_cache()
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

    fn save_pipeline_cache(&self) -> Result<()> {
        let Some(path) = &self.pipeline_cache_path else { return Ok(()) };
        // SAFETY: the cache is a live object of this device.
        let data = unsafe { self.raw.get_pipeline_cache_data(self.pipeline_cache) }
            .map_err(Error::vk("vkGetPipelineCacheData"))?;
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, &data)?;
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            tracing::warn!("could not save the pipeline cache to {}: {e}", path.display());
        }
        Ok(())
    }
}

/// Checks a pipeline-cache blob's header (Vulkan spec, "Pipeline Cache", table
/// "Layout for pipeline cache header version VK_PIPELINE_CACHE_HEADER_VERSION_ONE")
/// against the device before handing it to the driver.
fn pipeline_cache_header_matches(data: &[u8], caps: &Capabilities) -> bool {
    if data.len() < 32 {
        return false;
    }
    let u32_at = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
    u32_at(0) >= 32
        && u32_at(4) == 1
        && u32_at(8) == caps.vendor_id
        && u32_at(12) == caps.device_id
        && crate::caps::hex(&data[16..32]) == caps.pipeline_cache_uuid
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
