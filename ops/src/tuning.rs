//! Kernel choice from [`Capabilities`]: per-architecture launch parameters. Ops read
//! nothing else about the device, so tests drive every table entry with a fake
//! `Capabilities`.

use vkml_hal::caps::ArchClass;
use vkml_hal::Capabilities;

/// How to launch the fused quantized mat-vec (`mul_mat_vec.comp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatVecConfig {
    /// Invocations per workgroup (one workgroup per output row); a power of two ≤ 128.
    pub workgroup: u32,
    /// Reduce with subgroup arithmetic (needs `arithmetic` in the subgroup operations).
    pub subgroup_reduce: bool,
    /// Use the vectorised kernel (`mul_mat_vec_vec4.comp`: 4 elements per invocation and
    /// step) where the type has one and `k % 4 == 0`; else the per-element kernel.
    pub vec4: bool,
}

/// Invocations per workgroup of the element-wise kernels (dequantize, get_rows).
pub const ELEMENTWISE_WORKGROUP: u32 = 256;

/// The mat-vec launch for a device: one hardware wave or a small multiple of it
/// (NVIDIA warps of 32 → 128; AMD wave64 → 64, RDNA → 64; Intel SIMD8–32 → 64; Apple 32
/// → 64; mobile and CPU → 64), subgroup reduction wherever subgroup arithmetic exists.
pub fn mat_vec_config(caps: &Capabilities) -> MatVecConfig {
    let workgroup = match caps.arch {
        ArchClass::NvidiaTensorCore | ArchClass::Nvidia => 128,
        ArchClass::AmdGcn | ArchClass::AmdRdna => 64,
        ArchClass::Intel | ArchClass::Apple => 64,
        ArchClass::Adreno | ArchClass::Mali | ArchClass::Cpu | ArchClass::Other => 64,
    };
    // Never below one subgroup, never above the shader's 128-entry reduction buffer.
    let workgroup = workgroup.max(caps.subgroup.size.next_power_of_two()).min(128);
    MatVecConfig { workgroup, subgroup_reduce: caps.subgroup.operations.contains(&"arithmetic"), vec4: true }
}
