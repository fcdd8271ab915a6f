//! `Capabilities`: everything kernel choice needs to know about a device, probed once
//! from the driver. Kernel choice in vkml-ops reads only this struct, so tests can hand
//! it a fake one.
//!
//! Sources: Vulkan 1.3 specification, chapter "Limits" and "Features"
//! (`VkPhysicalDeviceVulkan11/12Properties`, `VkPhysicalDeviceSubgroupSizeControlProperties`,
//! `VkPhysicalDeviceShaderIntegerDotProductProperties`, `VkPhysicalDeviceMaintenance4Properties`),
//! `VK_KHR_cooperative_matrix`, `VK_NV_cooperative_matrix2`, `VK_KHR_shader_bfloat16`,
//! `VK_EXT_memory_budget`, `VK_KHR_push_descriptor`.

use std::ffi::{c_void, CStr};

use ash::vk;
use serde::Serialize;

/// GPU vendor, from `VkPhysicalDeviceProperties::vendorID` (PCI ids; Khronos ids for
/// vendors without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// NVIDIA (0x10DE).
    Nvidia,
    /// AMD (0x1002).
    Amd,
    /// Intel (0x8086).
    Intel,
    /// Apple (0x106B), usually through MoltenVK.
    Apple,
    /// Qualcomm Adreno (0x5143).
    Qualcomm,
    /// ARM Mali (0x13B5).
    Arm,
    /// Imagination (0x1010).
    ImgTec,
    /// Mesa software renderers (lavapipe), Khronos id 0x10005.
    Mesa,
    /// Anything else.
    Other,
}

impl Vendor {
    /// Classifies a `vendorID`.
    pub fn from_id(id: u32) -> Vendor {
        match id {
            0x10DE => Vendor::Nvidia,
            0x1002 | 0x1022 => Vendor::Amd,
            0x8086 => Vendor::Intel,
            0x106B => Vendor::Apple,
            0x5143 => Vendor::Qualcomm,
            0x13B5 => Vendor::Arm,
            0x1010 => Vendor::ImgTec,
            0x10005 => Vendor::Mesa,
            _ => Vendor::Other,
        }
    }
}

/// Architecture class used to pick per-vendor tuning tables.
///
/// Derived from vendor, device type and subgroup sizes: NVIDIA with cooperative matrices
/// has tensor cores (Volta and later); AMD that can run 32-wide subgroups is RDNA, one
/// fixed at 64 is GCN/CDNA; a CPU device is a software rasteriser (lavapipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchClass {
    /// NVIDIA with tensor cores exposed through cooperative matrices.
    NvidiaTensorCore,
    /// NVIDIA without cooperative matrices.
    Nvidia,
    /// AMD RDNA (wave32 capable).
    AmdRdna,
    /// AMD GCN / CDNA (wave64 only).
    AmdGcn,
    /// Intel GPUs.
    Intel,
    /// Apple GPUs (MoltenVK).
    Apple,
    /// Qualcomm Adreno.
    Adreno,
    /// ARM Mali.
    Mali,
    /// A CPU implementation (lavapipe, SwiftShader).
    Cpu,
    /// Unknown.
    Other,
}

/// `VkPhysicalDeviceType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceType {
    /// A discrete GPU.
    Discrete,
    /// A GPU sharing memory with the host.
    Integrated,
    /// A virtualised GPU.
    Virtual,
    /// A CPU implementation.
    Cpu,
    /// Other.
    Other,
}

impl DeviceType {
    pub(crate) fn from_vk(t: vk::PhysicalDeviceType) -> Self {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceType::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceType::Cpu,
            _ => DeviceType::Other,
        }
    }

    /// Preference when choosing the best device: discrete > integrated > virtual > CPU.
    pub fn preference(self) -> u32 {
        match self {
            DeviceType::Discrete => 4,
            DeviceType::Integrated => 3,
            DeviceType::Virtual => 2,
            DeviceType::Cpu => 1,
            DeviceType::Other => 0,
        }
    }
}

/// Subgroup properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubgroupCaps {
    /// Default subgroup size (`subgroupSize`).
    pub size: u32,
    /// Smallest size a pipeline can require (`minSubgroupSize`).
    pub min_size: u32,
    /// Largest size a pipeline can require (`maxSubgroupSize`).
    pub max_size: u32,
    /// `subgroupSizeControl` feature, and compute is in `requiredSubgroupSizeStages`.
    pub size_control: bool,
    /// `computeFullSubgroups` feature.
    pub full_subgroups: bool,
    /// Operations supported in compute shaders (`basic`, `vote`, `arithmetic`, `ballot`,
    /// `shuffle`, `shuffle_relative`, `clustered`, `quad`).
    pub operations: Vec<&'static str>,
}

/// Integer dot product support (`VK_KHR_shader_integer_dot_product`, core in 1.3) and
/// which forms the hardware accelerates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct IntegerDotCaps {
    /// `shaderIntegerDotProduct`.
    pub supported: bool,
    /// `integerDotProduct4x8BitPackedSignedAccelerated`.
    pub packed_4x8_signed_accelerated: bool,
    /// `integerDotProduct4x8BitPackedUnsignedAccelerated`.
    pub packed_4x8_unsigned_accelerated: bool,
    /// `integerDotProduct4x8BitPackedMixedSignednessAccelerated`.
    pub packed_4x8_mixed_accelerated: bool,
    /// `integerDotProduct8BitSignedAccelerated`.
    pub int8_signed_accelerated: bool,
    /// `integerDotProduct16BitSignedAccelerated`.
    pub int16_signed_accelerated: bool,
    /// `integerDotProductAccumulatingSaturating4x8BitPackedSignedAccelerated`.
    pub accumulating_4x8_signed_accelerated: bool,
}

/// One `VkCooperativeMatrixPropertiesKHR` entry: a supported `M x N x K` shape with its
/// component types (`A` is `M x K`, `B` is `K x N`, `C` and the result `M x N`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CoopMatShape {
    /// Rows of A, C and the result.
    pub m: u32,
    /// Columns of B, C and the result.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Component type of A (`f16`, `bf16`, `f32`, `s8`, `u8`, `s32`, ...).
    pub a: &'static str,
    /// Component type of B.
    pub b: &'static str,
    /// Component type of C.
    pub c: &'static str,
    /// Component type of the result.
    pub result: &'static str,
    /// Saturating accumulation.
    pub saturating: bool,
    /// Scope (`subgroup`, `workgroup`, ...).
    pub scope: &'static str,
}

/// `VK_NV_cooperative_matrix2` features and properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct NvCoopMat2Caps {
    /// `cooperativeMatrixWorkgroupScope`.
    pub workgroup_scope: bool,
    /// `cooperativeMatrixFlexibleDimensions`.
    pub flexible_dimensions: bool,
    /// `cooperativeMatrixReductions`.
    pub reductions: bool,
    /// `cooperativeMatrixConversions`.
    pub conversions: bool,
    /// `cooperativeMatrixPerElementOperations`.
    pub per_element_operations: bool,
    /// `cooperativeMatrixTensorAddressing`.
    pub tensor_addressing: bool,
    /// `cooperativeMatrixBlockLoads`.
    pub block_loads: bool,
    /// `cooperativeMatrixWorkgroupScopeMaxWorkgroupSize` (invocations).
    pub workgroup_scope_max_workgroup_size: u32,
    /// `cooperativeMatrixFlexibleDimensionsMaxDimension`.
    pub flexible_dimensions_max_dimension: u32,
    /// `cooperativeMatrixWorkgroupScopeReservedSharedMemory` (bytes).
    pub workgroup_scope_reserved_shared_memory: u32,
}

/// Arithmetic and storage types usable in shaders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ShaderTypeCaps {
    /// `shaderFloat16` (f16 arithmetic).
    pub float16: bool,
    /// `shaderFloat64`.
    pub float64: bool,
    /// `shaderInt8` (int8 arithmetic).
    pub int8: bool,
    /// `shaderInt16`.
    pub int16: bool,
    /// `shaderInt64`.
    pub int64: bool,
    /// `VK_KHR_shader_bfloat16` `shaderBFloat16Type`.
    pub bfloat16: bool,
    /// `shaderBFloat16DotProduct`.
    pub bfloat16_dot: bool,
    /// `shaderBFloat16CooperativeMatrix`.
    pub bfloat16_cooperative_matrix: bool,
    /// `storageBuffer8BitAccess`.
    pub storage_buffer_8bit: bool,
    /// `storageBuffer16BitAccess`.
    pub storage_buffer_16bit: bool,
}

/// Device limits relevant to compute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ComputeLimits {
    /// `maxStorageBufferRange`, bytes: the largest range one binding can address.
    pub max_storage_buffer_range: u64,
    /// `maxBufferSize` (maintenance4), bytes; `maxMemoryAllocationSize` where absent.
    pub max_buffer_size: u64,
    /// `maxMemoryAllocationSize`, bytes.
    pub max_memory_allocation_size: u64,
    /// `maxComputeSharedMemorySize`, bytes.
    pub max_shared_memory: u32,
    /// `maxComputeWorkGroupInvocations`.
    pub max_workgroup_invocations: u32,
    /// `maxComputeWorkGroupSize`.
    pub max_workgroup_size: [u32; 3],
    /// `maxComputeWorkGroupCount`.
    pub max_workgroup_count: [u32; 3],
    /// `maxPushConstantsSize`, bytes.
    pub max_push_constants_size: u32,
    /// `maxPushDescriptors` (0 without `VK_KHR_push_descriptor`).
    pub max_push_descriptors: u32,
    /// `maxPerStageDescriptorStorageBuffers`.
    pub max_storage_buffers_per_stage: u32,
    /// `minStorageBufferOffsetAlignment`, bytes.
    pub min_storage_buffer_offset_alignment: u64,
    /// `nonCoherentAtomSize`, bytes.
    pub non_coherent_atom_size: u64,
    /// `timestampPeriod`, nanoseconds per tick, times 1000 (integer for Eq).
    pub timestamp_period_ps: u64,
}

/// One memory heap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeapInfo {
    /// Heap size in bytes.
    pub size: u64,
    /// `VK_MEMORY_HEAP_DEVICE_LOCAL_BIT`.
    pub device_local: bool,
    /// Budget in bytes from `VK_EXT_memory_budget` (the heap size where absent).
    pub budget: u64,
    /// Bytes in use by this process at probe time (0 where unknown).
    pub usage: u64,
    /// Property flags of the memory types in this heap, e.g. `DEVICE_LOCAL|HOST_VISIBLE`.
    pub types: Vec<String>,
}

/// Memory of the device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct MemoryCaps {
    /// Heaps, indexed as Vulkan indexes them.
    pub heaps: Vec<HeapInfo>,
    /// Unified memory: an integrated or CPU device whose device-local memory is also
    /// host-visible; buffers are then written and read in place, without staging.
    pub uma: bool,
    /// Bytes of device-local memory (largest device-local heap).
    pub device_local_bytes: u64,
    /// Budget of that heap in bytes.
    pub device_local_budget: u64,
    /// `VK_EXT_memory_budget` is available.
    pub budget_extension: bool,
}

/// Queue family used for each role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct QueueCaps {
    /// Queue family index of the compute queue.
    pub compute_family: u32,
    /// Queue family index of a dedicated transfer queue (transfer, no compute/graphics),
    /// where the device has one.
    pub transfer_family: Option<u32>,
    /// All families as `index: FLAGS xCOUNT`.
    pub families: Vec<String>,
    /// `timestampValidBits` of the compute family: 0 where it cannot write timestamps
    /// (then [`crate::Device::set_profiling`] is refused), else 36 to 64.
    pub compute_timestamp_bits: u32,
}

/// Everything kernel choice needs to know about one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Device name.
    pub name: String,
    /// Device type.
    pub device_type: DeviceType,
    /// Vendor.
    pub vendor: Vendor,
    /// `vendorID`.
    pub vendor_id: u32,
    /// `deviceID`.
    pub device_id: u32,
    /// Architecture class for tuning tables.
    pub arch: ArchClass,
    /// Supported Vulkan version, `major.minor.patch`.
    pub api_version: String,
    /// Raw `apiVersion`.
    pub api_version_raw: u32,
    /// Driver id name (`VkDriverId`), e.g. `NVIDIA_PROPRIETARY`, `MESA_LLVMPIPE`.
    pub driver_id: String,
    /// `driverName`.
    pub driver_name: String,
    /// `driverInfo`.
    pub driver_info: String,
    /// Raw `driverVersion`.
    pub driver_version_raw: u32,
    /// `driverVersion` decoded with the vendor's convention.
    pub driver_version: String,
    /// `deviceUUID`, hex.
    pub device_uuid: String,
    /// `pipelineCacheUUID`, hex.
    pub pipeline_cache_uuid: String,
    /// Subgroups.
    pub subgroup: SubgroupCaps,
    /// Shader arithmetic and storage types.
    pub types: ShaderTypeCaps,
    /// Integer dot product.
    pub integer_dot: IntegerDotCaps,
    /// `VK_KHR_cooperative_matrix` shapes (empty when unsupported).
    pub cooperative_matrix: Vec<CoopMatShape>,
    /// `VK_NV_cooperative_matrix2`, where supported.
    pub nv_cooperative_matrix2: Option<NvCoopMat2Caps>,
    /// Compute limits.
    pub limits: ComputeLimits,
    /// Memory heaps, UMA and budget.
    pub memory: MemoryCaps,
    /// Queue families.
    pub queues: QueueCaps,
    /// `VK_KHR_push_descriptor` is available.
    pub push_descriptor: bool,
    /// Streaming multiprocessors / compute units / shader cores: how many workgroups run
    /// at once, to size small dispatches to the whole GPU.
    pub compute_units: ComputeUnits,
    /// `timelineSemaphore` feature.
    pub timeline_semaphore: bool,
    /// `vulkanMemoryModel` feature.
    pub vulkan_memory_model: bool,
    /// `bufferDeviceAddress` feature.
    pub buffer_device_address: bool,
    /// Why vkml cannot use this device, or `None` when it can.
    pub unusable: Option<String>,
}

/// The device's count of independent compute cores, where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ComputeUnits {
    /// NVIDIA streaming multiprocessors, AMD compute units, ARM shader cores, CPU threads.
    pub count: u32,
    /// `VK_NV_shader_sm_builtins` (`shaderSMCount`), `VK_AMD_shader_core_properties`
    /// (engines × arrays per engine × CUs per array), `VK_ARM_shader_core_builtins`
    /// (`shaderCoreCount`), `cpu threads` (a CPU implementation: the host's threads), or
    /// `estimate` (a per-type default where the driver tells nothing: 16 for a discrete GPU,
    /// 8 for others).
    pub source: String,
}

impl Capabilities {
    /// Whether any cooperative-matrix shape takes A and B of component type `ab` and
    /// accumulates in `acc` (`"f16"`, `"bf16"`, `"s8"`, `"f32"`, `"s32"`).
    pub fn has_coopmat(&self, ab: &str, acc: &str) -> bool {
        self.cooperative_matrix.iter().any(|s| s.a == ab && s.b == ab && s.c == acc && s.scope == "subgroup")
    }
}

// ---- structures ash 0.38 (Vulkan headers 1.3.281) predates ----

pub(crate) const NV_COOPMAT2_EXT: &CStr = c"VK_NV_cooperative_matrix2";
pub(crate) const KHR_BF16_EXT: &CStr = c"VK_KHR_shader_bfloat16";

/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV` (VK_NV_cooperative_matrix2).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct CoopMat2FeaturesNV {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub workgroup_scope: vk::Bool32,
    pub flexible_dimensions: vk::Bool32,
    pub reductions: vk::Bool32,
    pub conversions: vk::Bool32,
    pub per_element_operations: vk::Bool32,
    pub tensor_addressing: vk::Bool32,
    pub block_loads: vk::Bool32,
}
impl Default for CoopMat2FeaturesNV {
    fn default() -> Self {
        Self {
            s_type: vk::StructureType::from_raw(1_000_593_000),
            p_next: std::ptr::null_mut(),
            workgroup_scope: 0,
            flexible_dimensions: 0,
            reductions: 0,
            conversions: 0,
            per_element_operations: 0,
            tensor_addressing: 0,
            block_loads: 0,
        }
    }
}
// SAFETY: the struct starts with sType/pNext like every Vulkan structure, and the spec
// lists VkPhysicalDeviceCooperativeMatrix2FeaturesNV as extending VkPhysicalDeviceFeatures2
// and VkDeviceCreateInfo.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for CoopMat2FeaturesNV {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for CoopMat2FeaturesNV {}

/// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct CoopMat2PropertiesNV {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub workgroup_scope_max_workgroup_size: u32,
    pub flexible_dimensions_max_dimension: u32,
    pub workgroup_scope_reserved_shared_memory: u32,
}
impl Default for CoopMat2PropertiesNV {
    fn default() -> Self {
        Self {
            s_type: vk::StructureType::from_raw(1_000_593_002),
            p_next: std::ptr::null_mut(),
            workgroup_scope_max_workgroup_size: 0,
            flexible_dimensions_max_dimension: 0,
            workgroup_scope_reserved_shared_memory: 0,
        }
    }
}
// SAFETY: sType/pNext header; the spec lists it as extending VkPhysicalDeviceProperties2.
unsafe impl vk::ExtendsPhysicalDeviceProperties2 for CoopMat2PropertiesNV {}

/// `VkPhysicalDeviceShaderBfloat16FeaturesKHR` (VK_KHR_shader_bfloat16).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bfloat16FeaturesKHR {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub bfloat16_type: vk::Bool32,
    pub bfloat16_dot_product: vk::Bool32,
    pub bfloat16_cooperative_matrix: vk::Bool32,
}
impl Default for Bfloat16FeaturesKHR {
    fn default() -> Self {
        Self {
            s_type: vk::StructureType::from_raw(1_000_141_000),
            p_next: std::ptr::null_mut(),
            bfloat16_type: 0,
            bfloat16_dot_product: 0,
            bfloat16_cooperative_matrix: 0,
        }
    }
}
// SAFETY: sType/pNext header; extends VkPhysicalDeviceFeatures2 and VkDeviceCreateInfo.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Bfloat16FeaturesKHR {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Bfloat16FeaturesKHR {}

/// Name of a `VkComponentTypeKHR`, including values newer than ash 0.38
/// (`VK_COMPONENT_TYPE_BFLOAT16_KHR` = 1000141000, the float8 types of
/// `VK_EXT_shader_float8` = 1000491000/1000491001).
pub(crate) fn component_name(t: vk::ComponentTypeKHR) -> &'static str {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => "f16",
        vk::ComponentTypeKHR::FLOAT32 => "f32",
        vk::ComponentTypeKHR::FLOAT64 => "f64",
        vk::ComponentTypeKHR::SINT8 => "s8",
        vk::ComponentTypeKHR::SINT16 => "s16",
        vk::ComponentTypeKHR::SINT32 => "s32",
        vk::ComponentTypeKHR::SINT64 => "s64",
        vk::ComponentTypeKHR::UINT8 => "u8",
        vk::ComponentTypeKHR::UINT16 => "u16",
        vk::ComponentTypeKHR::UINT32 => "u32",
        vk::ComponentTypeKHR::UINT64 => "u64",
        t if t.as_raw() == 1_000_141_000 => "bf16",
        t if t.as_raw() == 1_000_491_000 => "e4m3",
        t if t.as_raw() == 1_000_491_001 => "e5m2",
        _ => "unknown",
    }
}

pub(crate) fn scope_name(s: vk::ScopeKHR) -> &'static str {
    match s {
        vk::ScopeKHR::DEVICE => "device",
        vk::ScopeKHR::WORKGROUP => "workgroup",
        vk::ScopeKHR::SUBGROUP => "subgroup",
        vk::ScopeKHR::QUEUE_FAMILY => "queue_family",
        _ => "unknown",
    }
}

/// Decodes `driverVersion` by vendor convention (NVIDIA 10.8.8.6 bits; Intel on Windows
/// 18.14 bits; everyone else the Vulkan version encoding).
pub(crate) fn driver_version_string(vendor: Vendor, v: u32) -> String {
    match vendor {
        Vendor::Nvidia => format!("{}.{}.{}.{}", v >> 22, (v >> 14) & 0xff, (v >> 6) & 0xff, v & 0x3f),
        Vendor::Intel if cfg!(windows) => format!("{}.{}", v >> 14, v & 0x3fff),
        _ => version_string(v),
    }
}

pub(crate) fn version_string(v: u32) -> String {
    format!("{}.{}.{}", vk::api_version_major(v), vk::api_version_minor(v), vk::api_version_patch(v))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn subgroup_operations(flags: vk::SubgroupFeatureFlags) -> Vec<&'static str> {
    [
        (vk::SubgroupFeatureFlags::BASIC, "basic"),
        (vk::SubgroupFeatureFlags::VOTE, "vote"),
        (vk::SubgroupFeatureFlags::ARITHMETIC, "arithmetic"),
        (vk::SubgroupFeatureFlags::BALLOT, "ballot"),
        (vk::SubgroupFeatureFlags::SHUFFLE, "shuffle"),
        (vk::SubgroupFeatureFlags::SHUFFLE_RELATIVE, "shuffle_relative"),
        (vk::SubgroupFeatureFlags::CLUSTERED, "clustered"),
        (vk::SubgroupFeatureFlags::QUAD, "quad"),
    ]
    .into_iter()
    .filter(|(f, _)| flags.contains(*f))
    .map(|(_, n)| n)
    .collect()
}

pub(crate) fn memory_flags_string(f: vk::MemoryPropertyFlags) -> String {
    let names = [
        (vk::MemoryPropertyFlags::DEVICE_LOCAL, "DEVICE_LOCAL"),
        (vk::MemoryPropertyFlags::HOST_VISIBLE, "HOST_VISIBLE"),
        (vk::MemoryPropertyFlags::HOST_COHERENT, "HOST_COHERENT"),
        (vk::MemoryPropertyFlags::HOST_CACHED, "HOST_CACHED"),
        (vk::MemoryPropertyFlags::LAZILY_ALLOCATED, "LAZILY_ALLOCATED"),
        (vk::MemoryPropertyFlags::PROTECTED, "PROTECTED"),
    ];
    let v: Vec<&str> = names.iter().filter(|(b, _)| f.contains(*b)).map(|(_, n)| *n).collect();
    if v.is_empty() {
        "NONE".into()
    } else {
        v.join("|")
    }
}

pub(crate) fn classify_arch(
    vendor: Vendor,
    device_type: DeviceType,
    subgroup: &SubgroupCaps,
    coopmat: bool,
) -> ArchClass {
    if device_type == DeviceType::Cpu {
        return ArchClass::Cpu;
    }
    match vendor {
        Vendor::Nvidia if coopmat => ArchClass::NvidiaTensorCore,
        Vendor::Nvidia => ArchClass::Nvidia,
        Vendor::Amd if subgroup.min_size <= 32 => ArchClass::AmdRdna,
        Vendor::Amd => ArchClass::AmdGcn,
        Vendor::Intel => ArchClass::Intel,
        Vendor::Apple => ArchClass::Apple,
        Vendor::Qualcomm => ArchClass::Adreno,
        Vendor::Arm => ArchClass::Mali,
        _ => ArchClass::Other,
    }
}
