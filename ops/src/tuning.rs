//! Kernel choice from [`Capabilities`]: per-architecture launch parameters. Ops read
//! nothing else about the device, so tests drive every table entry with a fake
//! `Capabilities`.

use vkml_hal::caps::ArchClass;
use vkml_hal::Capabilities;

/// How to launch the fused quantized mat-vec (`mul_mat_vec*.comp`; see `quant`'s module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatVecConfig {
    /// Invocations per workgroup (one workgroup per output row); a power of two ≤ 128.
    pub workgroup: u32,
    /// Reduce with subgroup arithmetic (needs `arithmetic` in the subgroup operations).
    pub subgroup_reduce: bool,
    /// Use the vectorised kernel (`mul_mat_vec_vec4.comp`: 4 elements per invocation and
    /// step) where the type has one and `k % 4 == 0`; else the per-element kernel.
    pub vec4: bool,
    /// Use the block-wise kernels (one subgroup per `rows_per_subgroup` rows, each lane
    /// decoding 32-element slices of blocks with 32-bit loads; 256-element super-blocks
    /// are shared by 8 lanes) for the types in `quant::BLOCK_TYPES` (shader per type:
    /// `quant::block_kernel`), where [`row_subgroup_size`] finds a usable subgroup size.
    /// Takes precedence over `vec4`; other types keep the per-workgroup kernels.
    pub subgroup_rows: bool,
    /// Rows per subgroup in the block-wise kernel (1..=8): each `x` load serves this many rows.
    pub rows_per_subgroup: u32,
    /// Quantize `x` to Q8_1 on the GPU and use packed 4x8-bit integer dot products
    /// (`mul_mat_vec_dot.comp`) for the types that have it, where the block-wise kernel
    /// applies. Changes results by the Q8_1 rounding of `x` (as ggml's MMVQ path does);
    /// off by default until `x` is quantized once per step and shared (see `mat_vec_config`).
    pub integer_dot: bool,
}

/// The subgroup size the block-wise mat-vec kernels run with, and whether the pipeline must
/// require it: a fixed size (`min == max`), else the largest size where the device can
/// require it with full subgroups. `None` without subgroup arithmetic or size control.
pub fn row_subgroup_size(caps: &Capabilities) -> Option<(u32, bool)> {
    let s = &caps.subgroup;
    if !s.operations.contains(&"arithmetic") || s.size == 0 {
        return None;
    }
    if s.min_size == s.max_size {
        Some((s.size, false))
    } else if s.size_control && s.full_subgroups {
        Some((s.max_size, true))
    } else {
        None
    }
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
    let subgroup_reduce = caps.subgroup.operations.contains(&"arithmetic");
    let rows_per_subgroup = match caps.arch {
        // H100, batch 1, 4096x4096 Q4_0: 1 row 530 GB/s, 2 rows 960 GB/s, 4 rows 1580 GB/s
        // (benches/RESULTS.md): x loads, shared by the rows, dominate.
        ArchClass::NvidiaTensorCore | ArchClass::Nvidia | ArchClass::AmdRdna | ArchClass::AmdGcn => 4,
        _ => 1,
    };
    MatVecConfig {
        workgroup,
        subgroup_reduce,
        vec4: true,
        subgroup_rows: row_subgroup_size(caps).is_some(),
        rows_per_subgroup,
        // Off by default: each mat_vec call quantizes x itself today, and on the H100
        // that extra dispatch and barrier cost more than the int8 loads save
        // (benches/RESULTS.md). It pays once x is quantized once per decode step.
        integer_dot: false,
    }
}
