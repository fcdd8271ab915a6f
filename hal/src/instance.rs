//! The Vulkan instance, validation layers, adapter enumeration and device selection.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use ash::vk;
use parking_lot::Mutex;

use crate::caps::*;
use crate::device::{Device, DeviceOptions};
use crate::error::{Error, Result};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Options for [`Instance::new`].
#[derive(Debug, Clone, Default)]
pub struct InstanceOptions {
    /// Enable `VK_LAYER_KHRONOS_validation` and collect its errors (see
    /// [`Instance::take_validation_errors`]); every later wait also returns
    /// [`Error::Validation`] if an error was reported.
    pub validation: bool,
}

impl InstanceOptions {
    /// Options from the environment: `VKML_VALIDATION=1` enables validation.
    pub fn from_env() -> Self {
        let validation = std::env::var("VKML_VALIDATION").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        Self { validation }
    }
}

/// A Vulkan instance. Cheap to clone (reference counted); devices keep it alive.
#[derive(Clone)]
pub struct Instance {
    pub(crate) inner: Arc<InstanceInner>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("api_version", &version_string(self.inner.api_version))
            .field("validation", &self.inner.debug.is_some())
            .finish()
    }
}

pub(crate) struct InstanceInner {
    pub(crate) entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    pub(crate) api_version: u32,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    // Boxed so that its address, handed to the debug messenger, is stable.
    log: Box<ValidationLog>,
}

#[derive(Default)]
struct ValidationLog {
    errors: Mutex<Vec<String>>,
}

/// One physical device as enumerated, with its probed capabilities.
#[derive(Debug, Clone)]
pub struct Adapter {
    /// Index in the loader's enumeration order (the ordinal `Device::new` takes).
    pub ordinal: usize,
    pub(crate) physical: vk::PhysicalDevice,
    /// Probed capabilities.
    pub caps: Capabilities,
}

/// Which device to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The best usable device: discrete > integrated > virtual > CPU, then the most
    /// device-local memory.
    Best,
    /// By enumeration index.
    Ordinal(usize),
    /// The first device whose name contains this text (case-insensitive).
    Name(String),
}

impl DeviceSelector {
    /// From `VKML_DEVICE`: unset or empty is [`DeviceSelector::Best`], a number an
    /// ordinal, anything else a name.
    pub fn from_env() -> Self {
        match std::env::var("VKML_DEVICE") {
            Ok(v) if !v.trim().is_empty() => Self::parse(v.trim()),
            _ => DeviceSelector::Best,
        }
    }

    /// Parses an index or a name.
    pub fn parse(s: &str) -> Self {
        match s.parse::<usize>() {
            Ok(i) => DeviceSelector::Ordinal(i),
            Err(_) => DeviceSelector::Name(s.to_string()),
        }
    }
}

/// The Vulkan loader, loaded once per process and never unloaded: instances come and go
/// (every test opens its own, possibly on several threads at once), and loading and
/// unloading libvulkan each time only adds churn of the process's shared libraries.
fn loader() -> Result<ash::Entry> {
    static LOADER: std::sync::OnceLock<std::result::Result<ash::Entry, String>> = std::sync::OnceLock::new();
    LOADER
        .get_or_init(|| {
            // SAFETY: loading the system's libvulkan runs its initialisers; that is the
            // documented way to use the loader and has no further preconditions. The
            // library stays loaded for the life of the process (the static holds it).
            unsafe { ash::Entry::load() }.map_err(|e| e.to_string())
        })
        .clone()
        .map_err(Error::NoLoader)
}

impl Instance {
    /// Loads the Vulkan loader and creates an instance (API 1.3 where the loader has it,
    /// else 1.2), with validation when `options.validation`.
    ///
    /// # Errors
    /// [`Error::NoLoader`] when libvulkan cannot be loaded; [`Error::MissingLayer`] when
    /// validation is asked for but not installed; [`Error::Vulkan`] on other failures.
    pub fn new(options: &InstanceOptions) -> Result<Instance> {
        let entry = loader()?;
        // SAFETY: entry is a loaded loader; the call has no preconditions.
        let loader_version = unsafe { entry.try_enumerate_instance_version() }
            .map_err(Error::vk("vkEnumerateInstanceVersion"))?
            .unwrap_or(vk::API_VERSION_1_0);
        if loader_version < vk::API_VERSION_1_2 {
            return Err(Error::NoDevice {
                detail: format!(
                    " (the Vulkan loader only offers {}; update libvulkan1)",
                    version_string(loader_version)
                ),
            });
        }
        let api_version = loader_version.min(vk::API_VERSION_1_3);

        // SAFETY: no preconditions.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }
            .map_err(Error::vk("vkEnumerateInstanceLayerProperties"))?;
        // SAFETY: no preconditions.
        let exts = unsafe { entry.enumerate_instance_extension_properties(None) }
            .map_err(Error::vk("vkEnumerateInstanceExtensionProperties"))?;
        let has_ext = |name: &CStr| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(name));

        let mut layer_names = Vec::new();
        let mut ext_names = Vec::new();
        if options.validation {
            if !layers.iter().any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER)) {
                return Err(Error::MissingLayer {
                    layer: "VK_LAYER_KHRONOS_validation",
                    hint: "Debian/Ubuntu: apt-get install vulkan-validationlayers; or unset VKML_VALIDATION",
                });
            }
            layer_names.push(VALIDATION_LAYER.as_ptr());
            ext_names.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        let mut flags = vk::InstanceCreateFlags::empty();
        if has_ext(ash::khr::portability_enumeration::NAME) {
            // MoltenVK and other non-conformant implementations only show up with this.
            ext_names.push(ash::khr::portability_enumeration::NAME.as_ptr());
            flags |= vk::InstanceCreateFlags::ENUMERATE_PORTABILITY_KHR;
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"vkml")
            .engine_name(c"vkml")
            .engine_version(vk::make_api_version(0, 0, 1, 0))
            .api_version(api_version);
        let mut log = Box::<ValidationLog>::default();
        let mut messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(debug_callback))
            .user_data(std::ptr::from_mut::<ValidationLog>(&mut log).cast());
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_names)
            .enabled_extension_names(&ext_names)
            .flags(flags);
        if options.validation {
            // Also catches errors of vkCreateInstance/vkDestroyInstance themselves.
            info = info.push_next(&mut messenger_info);
        }
        // SAFETY: every pointer in `info` (names, app info, messenger info whose user data
        // is the boxed log that outlives the instance) is valid for the call.
        let raw = unsafe { entry.create_instance(&info, None) }.map_err(|e| match e {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => {
                Error::NoDevice { detail: " (the Vulkan loader found no driver)".into() }
            }
            e => Error::vk("vkCreateInstance")(e),
        })?;
        let debug = if options.validation {
            let du = ash::ext::debug_utils::Instance::new(&entry, &raw);
            // SAFETY: `raw` has VK_EXT_debug_utils enabled; user data points at the boxed
            // log, which lives in InstanceInner until after the messenger is destroyed.
            match unsafe { du.create_debug_utils_messenger(&messenger_info, None) } {
                Ok(m) => Some((du, m)),
                Err(e) => {
                    // SAFETY: nothing was created from `raw` yet.
                    unsafe { raw.destroy_instance(None) };
                    return Err(Error::vk("vkCreateDebugUtilsMessengerEXT")(e));
                }
            }
        } else {
            None
        };
        Ok(Instance { inner: Arc::new(InstanceInner { entry, raw, api_version, debug, log }) })
    }

    /// Whether validation layers are on.
    pub fn validation_enabled(&self) -> bool {
        self.inner.debug.is_some()
    }

    /// Drains the validation errors reported so far.
    pub fn take_validation_errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.inner.log.errors.lock())
    }

    pub(crate) fn check_validation(&self) -> Result<()> {
        if self.inner.debug.is_none() {
            return Ok(());
        }
        let errs = self.take_validation_errors();
        if errs.is_empty() {
            Ok(())
        } else {
            Err(Error::Validation(errs))
        }
    }

    /// How many physical devices the loader reports (usable or not): the ordinals run
    /// from 0 below it.
    ///
    /// # Errors
    /// [`Error::Vulkan`] when enumeration fails.
    pub fn device_count(&self) -> Result<usize> {
        // SAFETY: the instance is alive (we hold it).
        let pds =
            unsafe { self.inner.raw.enumerate_physical_devices() }.map_err(Error::vk("vkEnumeratePhysicalDevices"))?;
        Ok(pds.len())
    }

    /// Every physical device the loader reports, with probed capabilities (devices below
    /// Vulkan 1.2 are listed with `caps.unusable` set).
    ///
    /// # Errors
    /// [`Error::Vulkan`] when enumeration fails.
    pub fn adapters(&self) -> Result<Vec<Adapter>> {
        // SAFETY: the instance is alive (we hold it).
        let pds =
            unsafe { self.inner.raw.enumerate_physical_devices() }.map_err(Error::vk("vkEnumeratePhysicalDevices"))?;
        pds.into_iter()
            .enumerate()
            .map(|(ordinal, physical)| Ok(Adapter { ordinal, physical, caps: probe(&self.inner, physical)? }))
            .collect()
    }

    /// Picks an adapter.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there is no usable device, [`Error::BadOrdinal`] for an
    /// ordinal past the end, [`Error::DeviceNotFound`] for a name that matches nothing,
    /// [`Error::UnsupportedDevice`] for a chosen device that cannot run vkml.
    pub fn select(&self, selector: &DeviceSelector) -> Result<Adapter> {
        let adapters = self.adapters()?;
        let listing =
            || adapters.iter().map(|a| format!("{}: {}", a.ordinal, a.caps.name)).collect::<Vec<_>>().join(", ");
        let chosen = match selector {
            DeviceSelector::Best => adapters
                .iter()
                .filter(|a| a.caps.unusable.is_none())
                .max_by_key(|a| {
                    (a.caps.device_type.preference(), a.caps.memory.device_local_bytes, std::cmp::Reverse(a.ordinal))
                })
                .ok_or_else(|| Error::NoDevice {
                    detail: if adapters.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (seen but unusable: {})",
                            adapters
                                .iter()
                                .map(|a| format!("{}: {}", a.caps.name, a.caps.unusable.as_deref().unwrap_or("?")))
                                .collect::<Vec<_>>()
                                .join("; ")
                        )
                    },
                })?,
            DeviceSelector::Ordinal(i) => {
                adapters.get(*i).ok_or(Error::BadOrdinal { ordinal: *i, count: adapters.len() })?
            }
            DeviceSelector::Name(name) => {
                let needle = name.to_lowercase();
                adapters
                    .iter()
                    .find(|a| a.caps.name.to_lowercase().contains(&needle))
                    .ok_or_else(|| Error::DeviceNotFound { query: name.clone(), available: listing() })?
            }
        };
        if let Some(reason) = &chosen.caps.unusable {
            return Err(Error::UnsupportedDevice { device: chosen.caps.name.clone(), reason: reason.clone() });
        }
        Ok(chosen.clone())
    }

    /// Opens a logical device on the selected adapter.
    ///
    /// # Errors
    /// As [`Instance::select`] and [`Device::from_adapter`].
    pub fn create_device(&self, selector: &DeviceSelector, options: DeviceOptions) -> Result<Device> {
        let adapter = self.select(selector)?;
        Device::from_adapter(self, &adapter, options)
    }
}

impl Drop for InstanceInner {
    fn drop(&mut self) {
        // SAFETY: every device created from this instance holds an `Instance` clone, so
        // none is alive now; the messenger was created from this instance.
        unsafe {
            if let Some((du, m)) = self.debug.take() {
                du.destroy_debug_utils_messenger(m, None);
            }
            self.raw.destroy_instance(None);
        }
    }
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // Never unwind into the driver.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the layer passes a valid callback-data pointer for the call's duration,
        // and `user` is the boxed ValidationLog that outlives the messenger.
        let (msg, log) = unsafe {
            let msg = if data.is_null() || (*data).p_message.is_null() {
                String::from("(no message)")
            } else {
                CStr::from_ptr((*data).p_message).to_string_lossy().into_owned()
            };
            (msg, user.cast::<ValidationLog>().as_ref())
        };
        if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
            tracing::error!(target: "vkml::validation", "{msg}");
            eprintln!("[vkml validation error] {msg}");
            if let Some(log) = log {
                log.errors.lock().push(msg);
            }
        } else if types.contains(vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE) {
            tracing::debug!(target: "vkml::validation", "{msg}");
        } else {
            tracing::warn!(target: "vkml::validation", "{msg}");
        }
    });
    vk::FALSE
}

/// Probes one physical device.
pub(crate) fn probe(inst: &InstanceInner, pd: vk::PhysicalDevice) -> Result<Capabilities> {
    let raw = &inst.raw;
    // SAFETY (for every query in this function): `pd` was enumerated from `raw`, which
    // is alive, and every structure chained below belongs to an extension the device
    // supports or to its core version, as checked before chaining.
    // SAFETY: see above.
    let props = unsafe { raw.get_physical_device_properties(pd) };
    // SAFETY: see above.
    let exts = unsafe { raw.enumerate_device_extension_properties(pd) }
        .map_err(Error::vk("vkEnumerateDeviceExtensionProperties"))?;
    let has = |name: &CStr| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(name));
    let name = props.device_name_as_c_str().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let vendor = Vendor::from_id(props.vendor_id);
    let device_type = DeviceType::from_vk(props.device_type);
    let api = props.api_version.min(inst.api_version);
    let is13 = api >= vk::API_VERSION_1_3;

    let mut caps = Capabilities {
        name,
        device_type,
        vendor,
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        arch: ArchClass::Other,
        api_version: version_string(props.api_version),
        api_version_raw: props.api_version,
        driver_id: String::new(),
        driver_name: String::new(),
        driver_info: String::new(),
        driver_version_raw: props.driver_version,
        driver_version: driver_version_string(vendor, props.driver_version),
        device_uuid: String::new(),
        pipeline_cache_uuid: hex(&props.pipeline_cache_uuid),
        subgroup: SubgroupCaps {
            size: 0,
            min_size: 0,
            max_size: 0,
            size_control: false,
            full_subgroups: false,
            operations: vec![],
        },
        types: ShaderTypeCaps::default(),
        integer_dot: IntegerDotCaps::default(),
        cooperative_matrix: vec![],
        nv_cooperative_matrix2: None,
        limits: ComputeLimits::default(),
        memory: MemoryCaps::default(),
        queues: QueueCaps::default(),
        compute_units: ComputeUnits::default(),
        push_descriptor: has(ash::khr::push_descriptor::NAME),
        timeline_semaphore: false,
        vulkan_memory_model: false,
        buffer_device_address: false,
        unusable: None,
    };
    let l = &props.limits;
    caps.limits = ComputeLimits {
        max_storage_buffer_range: u64::from(l.max_storage_buffer_range),
        max_buffer_size: 0,
        max_memory_allocation_size: 0,
        max_shared_memory: l.max_compute_shared_memory_size,
        max_workgroup_invocations: l.max_compute_work_group_invocations,
        max_workgroup_size: l.max_compute_work_group_size,
        max_workgroup_count: l.max_compute_work_group_count,
        max_push_constants_size: l.max_push_constants_size,
        max_push_descriptors: 0,
        max_storage_buffers_per_stage: l.max_per_stage_descriptor_storage_buffers,
        min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
        non_coherent_atom_size: l.non_coherent_atom_size,
        timestamp_period_ps: (f64::from(l.timestamp_period) * 1000.0) as u64,
    };
    caps.queues = probe_queues(raw, pd);

    if api < vk::API_VERSION_1_2 {
        caps.unusable = Some(format!("supports Vulkan {}; vkml needs 1.2 or later", caps.api_version));
        caps.memory = probe_memory(raw, pd, false, device_type);
        return Ok(caps);
    }

    // ---- properties ----
    let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
    let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
    let mut p_maint3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut p_sg = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
    let mut p_dot = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
    let mut p_maint4 = vk::PhysicalDeviceMaintenance4Properties::default();
    let mut p_push = vk::PhysicalDevicePushDescriptorPropertiesKHR::default();
    let mut p_cm2 = CoopMat2PropertiesNV::default();
    let mut p_sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
    let mut p_amd = vk::PhysicalDeviceShaderCorePropertiesAMD::default();
    let mut p_arm = vk::PhysicalDeviceShaderCoreBuiltinsPropertiesARM::default();
    let has_sm = has(ash::nv::shader_sm_builtins::NAME);
    let has_amd = has(ash::amd::shader_core_properties::NAME);
    let has_arm = has(ash::arm::shader_core_builtins::NAME);
    let has_sg = is13 || has(ash::ext::subgroup_size_control::NAME);
    let has_dot = is13 || has(ash::khr::shader_integer_dot_product::NAME);
    let has_maint4 = is13 || has(ash::khr::maintenance4::NAME);
    let has_cm = has(ash::khr::cooperative_matrix::NAME);
    let has_cm2 = has_cm && has(NV_COOPMAT2_EXT);
    let has_bf16 = has(KHR_BF16_EXT);
    {
        let mut p2 =
            vk::PhysicalDeviceProperties2::default().push_next(&mut p11).push_next(&mut p12).push_next(&mut p_maint3);
        if has_sg {
            p2 = p2.push_next(&mut p_sg);
        }
        if has_dot {
            p2 = p2.push_next(&mut p_dot);
        }
        if has_maint4 {
            p2 = p2.push_next(&mut p_maint4);
        }
        if caps.push_descriptor {
            p2 = p2.push_next(&mut p_push);
        }
        if has_cm2 {
            p2 = p2.push_next(&mut p_cm2);
        }
        if has_sm {
            p2 = p2.push_next(&mut p_sm);
        }
        if has_amd {
            p2 = p2.push_next(&mut p_amd);
        }
        if has_arm {
            p2 = p2.push_next(&mut p_arm);
        }
        // SAFETY: see above; each chained struct's extension was checked.
        unsafe { raw.get_physical_device_properties2(pd, &mut p2) };
    }
    caps.driver_id = format!("{:?}", p12.driver_id);
    caps.driver_name = cstr_array(&p12.driver_name);
    caps.driver_info = cstr_array(&p12.driver_info);
    caps.device_uuid = hex(&p11.device_uuid);
    caps.limits.max_memory_allocation_size = p_maint3.max_memory_allocation_size;
    caps.limits.max_buffer_size =
        if has_maint4 { p_maint4.max_buffer_size } else { p_maint3.max_memory_allocation_size };
    caps.limits.max_push_descriptors = if caps.push_descriptor { p_push.max_push_descriptors } else { 0 };
    let amd_cus =
        p_amd.shader_engine_count * p_amd.shader_arrays_per_engine_count * p_amd.compute_units_per_shader_array;
    let (count, source) = if has_sm && p_sm.shader_sm_count > 0 {
        (p_sm.shader_sm_count, "VK_NV_shader_sm_builtins")
    } else if has_amd && amd_cus > 0 {
        (amd_cus, "VK_AMD_shader_core_properties")
    } else if has_arm && p_arm.shader_core_count > 0 {
        (p_arm.shader_core_count, "VK_ARM_shader_core_builtins")
    } else if device_type == DeviceType::Cpu {
        (std::thread::available_parallelism().map_or(1, |n| n.get() as u32), "cpu threads")
    } else if device_type == DeviceType::Discrete {
        (16, "estimate")
    } else {
        (8, "estimate")
    };
    caps.compute_units = ComputeUnits { count, source: source.into() };

    // ---- features ----
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f_sg = vk::PhysicalDeviceSubgroupSizeControlFeatures::default();
    let mut f_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    let mut f_cm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut f_cm2 = CoopMat2FeaturesNV::default();
    let mut f_bf16 = Bfloat16FeaturesKHR::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default();
    {
        let mut chain = vk::PhysicalDeviceFeatures2::default().push_next(&mut f11).push_next(&mut f12);
        if has_sg {
            chain = chain.push_next(&mut f_sg);
        }
        if has_dot {
            chain = chain.push_next(&mut f_dot);
        }
        if has_cm {
            chain = chain.push_next(&mut f_cm);
        }
        if has_cm2 {
            chain = chain.push_next(&mut f_cm2);
        }
        if has_bf16 {
            chain = chain.push_next(&mut f_bf16);
        }
        // SAFETY: see above; each chained struct's extension was checked.
        unsafe { raw.get_physical_device_features2(pd, &mut chain) };
        f2.features = chain.features;
    }
    let b = |v: vk::Bool32| v == vk::TRUE;

    let compute_stage_sg = p_sg.required_subgroup_size_stages.contains(vk::ShaderStageFlags::COMPUTE);
    caps.subgroup = SubgroupCaps {
        size: p11.subgroup_size,
        min_size: if has_sg { p_sg.min_subgroup_size } else { p11.subgroup_size },
        max_size: if has_sg { p_sg.max_subgroup_size } else { p11.subgroup_size },
        size_control: has_sg && b(f_sg.subgroup_size_control) && compute_stage_sg,
        full_subgroups: has_sg && b(f_sg.compute_full_subgroups),
        operations: if p11.subgroup_supported_stages.contains(vk::ShaderStageFlags::COMPUTE) {
            subgroup_operations(p11.subgroup_supported_operations)
        } else {
            vec![]
        },
    };
    caps.types = ShaderTypeCaps {
        float16: b(f12.shader_float16),
        float64: b(f2.features.shader_float64),
        int8: b(f12.shader_int8),
        int16: b(f2.features.shader_int16),
        int64: b(f2.features.shader_int64),
        bfloat16: has_bf16 && b(f_bf16.bfloat16_type),
        bfloat16_dot: has_bf16 && b(f_bf16.bfloat16_dot_product),
        bfloat16_cooperative_matrix: has_bf16 && b(f_bf16.bfloat16_cooperative_matrix),
        storage_buffer_8bit: b(f12.storage_buffer8_bit_access),
        storage_buffer_16bit: b(f11.storage_buffer16_bit_access),
    };
    caps.integer_dot = IntegerDotCaps {
        supported: has_dot && b(f_dot.shader_integer_dot_product),
        packed_4x8_signed_accelerated: b(p_dot.integer_dot_product4x8_bit_packed_signed_accelerated),
        packed_4x8_unsigned_accelerated: b(p_dot.integer_dot_product4x8_bit_packed_unsigned_accelerated),
        packed_4x8_mixed_accelerated: b(p_dot.integer_dot_product4x8_bit_packed_mixed_signedness_accelerated),
        int8_signed_accelerated: b(p_dot.integer_dot_product8_bit_signed_accelerated),
        int16_signed_accelerated: b(p_dot.integer_dot_product16_bit_signed_accelerated),
        accumulating_4x8_signed_accelerated: b(
            p_dot.integer_dot_product_accumulating_saturating4x8_bit_packed_signed_accelerated
        ),
    };
    caps.timeline_semaphore = b(f12.timeline_semaphore);
    caps.vulkan_memory_model = b(f12.vulkan_memory_model);
    caps.buffer_device_address = b(f12.buffer_device_address);

    if has_cm && b(f_cm.cooperative_matrix) {
        let cm = ash::khr::cooperative_matrix::Instance::new(&inst.entry, raw);
        // SAFETY: the device supports VK_KHR_cooperative_matrix (checked).
        let list = unsafe { cm.get_physical_device_cooperative_matrix_properties(pd) }
            .map_err(Error::vk("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"))?;
        caps.cooperative_matrix = list
            .iter()
            .map(|p| CoopMatShape {
                m: p.m_size,
                n: p.n_size,
                k: p.k_size,
                a: component_name(p.a_type),
                b: component_name(p.b_type),
                c: component_name(p.c_type),
                result: component_name(p.result_type),
                saturating: b(p.saturating_accumulation),
                scope: scope_name(p.scope),
            })
            .collect();
    }
    if has_cm2 {
        caps.nv_cooperative_matrix2 = Some(NvCoopMat2Caps {
            workgroup_scope: b(f_cm2.workgroup_scope),
            flexible_dimensions: b(f_cm2.flexible_dimensions),
            reductions: b(f_cm2.reductions),
            conversions: b(f_cm2.conversions),
            per_element_operations: b(f_cm2.per_element_operations),
            tensor_addressing: b(f_cm2.tensor_addressing),
            block_loads: b(f_cm2.block_loads),
            workgroup_scope_max_workgroup_size: p_cm2.workgroup_scope_max_workgroup_size,
            flexible_dimensions_max_dimension: p_cm2.flexible_dimensions_max_dimension,
            workgroup_scope_reserved_shared_memory: p_cm2.workgroup_scope_reserved_shared_memory,
        });
    }
    caps.memory = probe_memory(raw, pd, has(ash::ext::memory_budget::NAME), device_type);
    caps.arch = classify_arch(vendor, device_type, &caps.subgroup, !caps.cooperative_matrix.is_empty());
    if !caps.timeline_semaphore {
        caps.unusable = Some("no timelineSemaphore feature".into());
    }
    Ok(caps)
}

fn cstr_array(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn probe_queues(raw: &ash::Instance, pd: vk::PhysicalDevice) -> QueueCaps {
    // SAFETY: pd was enumerated from the live instance `raw`.
    let fams = unsafe { raw.get_physical_device_queue_family_properties(pd) };
    let compute = |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0;
    // Prefer the graphics+compute family (full-rate on every vendor), else any compute.
    let compute_family = fams
        .iter()
        .position(|f| compute(f) && f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
        .or_else(|| fams.iter().position(compute))
        .unwrap_or(0) as u32;
    let transfer_family = fams
        .iter()
        .position(|f| {
            f.queue_flags.contains(vk::QueueFlags::TRANSFER)
                && !f.queue_flags.intersects(vk::QueueFlags::COMPUTE | vk::QueueFlags::GRAPHICS)
                && f.queue_count > 0
        })
        .map(|i| i as u32);
    let families = fams
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut names = vec![];
            for (flag, n) in [
                (vk::QueueFlags::GRAPHICS, "GRAPHICS"),
                (vk::QueueFlags::COMPUTE, "COMPUTE"),
                (vk::QueueFlags::TRANSFER, "TRANSFER"),
                (vk::QueueFlags::SPARSE_BINDING, "SPARSE"),
            ] {
                if f.queue_flags.contains(flag) {
                    names.push(n);
                }
            }
            format!("{i}: {} x{}", names.join("|"), f.queue_count)
        })
        .collect();
    let compute_timestamp_bits = fams.get(compute_family as usize).map_or(0, |f| f.timestamp_valid_bits);
    QueueCaps { compute_family, transfer_family, families, compute_timestamp_bits }
}

fn probe_memory(raw: &ash::Instance, pd: vk::PhysicalDevice, budget_ext: bool, device_type: DeviceType) -> MemoryCaps {
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut mp2 = vk::PhysicalDeviceMemoryProperties2::default();
    if budget_ext {
        mp2 = mp2.push_next(&mut budget);
    }
    // SAFETY: pd is from the live instance; the budget struct is chained only when the
    // device supports VK_EXT_memory_budget.
    unsafe { raw.get_physical_device_memory_properties2(pd, &mut mp2) };
    let mp = mp2.memory_properties;
    let heaps: Vec<HeapInfo> = (0..mp.memory_heap_count as usize)
        .map(|h| {
            let heap = mp.memory_heaps[h];
            let types = (0..mp.memory_type_count as usize)
                .filter(|&t| mp.memory_types[t].heap_index as usize == h)
                .map(|t| memory_flags_string(mp.memory_types[t].property_flags))
                .collect();
            HeapInfo {
                size: heap.size,
                device_local: heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
                budget: if budget_ext { budget.heap_budget[h] } else { heap.size },
                usage: if budget_ext { budget.heap_usage[h] } else { 0 },
                types,
            }
        })
        .collect();
    let largest =
        heaps.iter().enumerate().filter(|(_, h)| h.device_local).max_by_key(|(_, h)| h.size).map_or(0, |(i, _)| i);
    let host_visible_device_local = (0..mp.memory_type_count as usize).any(|t| {
        let f = mp.memory_types[t].property_flags;
        f.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE)
            && mp.memory_types[t].heap_index as usize == largest
    });
    MemoryCaps {
        uma: matches!(device_type, DeviceType::Integrated | DeviceType::Cpu) && host_visible_device_local,
        device_local_bytes: heaps.get(largest).map_or(0, |h| h.size),
        device_local_budget: heaps.get(largest).map_or(0, |h| h.budget),
        budget_extension: budget_ext,
        heaps,
    }
}
