//! Opening the logical device on an adapter: features, queues, memory, the pipeline cache.

use std::collections::HashMap;
use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ash::vk;
use parking_lot::Mutex;

use crate::caps::{Bfloat16FeaturesKHR, CoopMat2FeaturesNV, KHR_BF16_EXT, NV_COOPMAT2_EXT};
use crate::error::{Error, Result};
use crate::instance::{Adapter, Instance};
use crate::memory::{Memory, MemoryConfig};

use super::pipeline_cache::pipeline_cache_header_matches;
use super::*;

impl Device {
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
}
