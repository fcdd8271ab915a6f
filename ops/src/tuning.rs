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

/// Invocations per workgroup of the element-wise kernels (dequantize, get_rows, and the
/// strided ops of [`crate::elementwise`]).
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

/// The subgroup size the cooperative-matrix mat-mat (`mul_mat_cm.comp`) runs with, and
/// whether the pipeline must require it; `None` where the device lacks what that kernel
/// needs: a 16x16x16 f16 x f16 + f32 → f32 subgroup-scope shape (`VK_KHR_cooperative_matrix`)
/// and subgroups of exactly 32 (the kernel tiles 8 subgroups of 32 over 256 invocations),
/// plus f16 arithmetic (`shaderFloat16`) and 48 KiB of shared memory.
pub fn coopmat_subgroup_size(caps: &Capabilities) -> Option<(u32, bool)> {
    let shape = caps.cooperative_matrix.iter().any(|s| {
        (s.m, s.n, s.k) == (16, 16, 16)
            && s.a == "f16"
            && s.b == "f16"
            && s.c == "f32"
            && s.result == "f32"
            && s.scope == "subgroup"
    });
    let sg = &caps.subgroup;
    if !shape || !caps.types.float16 || caps.limits.max_shared_memory < 48 * 1024 {
        return None;
    }
    if sg.min_size == 32 && sg.max_size == 32 {
        Some((32, false))
    } else if sg.size_control && sg.full_subgroups && (sg.min_size..=sg.max_size).contains(&32) {
        Some((32, true))
    } else {
        None
    }
}

/// Whether the kernels that reduce over a row or a block of keys (`norm.comp`,
/// `softmax.comp`, `flash_attn.comp`, through `include/reduce.glsl`) use subgroup
/// arithmetic: `subgroupAdd` / `subgroupMax` within each subgroup, then one
/// shared-memory step across the workgroup's subgroups, instead of the portable
/// shared-memory tree with log2(workgroup) barriers. Needs `arithmetic` in the subgroup
/// operations; any subgroup size works.
pub fn subgroup_reduce(caps: &Capabilities) -> bool {
    caps.subgroup.operations.contains(&"arithmetic")
}

/// Whether a decode step should quantize its activations to Q8_1 once
/// ([`crate::quant::quantize_q8_1`]) and run the [`crate::quant::DOT_TYPES`] matrices through
/// [`crate::quant::mat_vec_q8_1`]: where packed 4x8-bit signed dot products are hardware
/// accelerated and the block-wise kernel applies. On the H100 that path reads Q8_0 at
/// 82–85 % and Q4_0 at 69–81 % of copy bandwidth against 62–76 % and 51–53 % for f32
/// activations (benches/RESULTS.md). Results then carry the Q8_1 rounding of `x`, as
/// ggml's MMVQ path does.
pub fn q8_1_activations(caps: &Capabilities) -> bool {
    caps.integer_dot.supported && caps.integer_dot.packed_4x8_signed_accelerated && row_subgroup_size(caps).is_some()
}

/// The fewest tokens for which a prompt's projections run as quantized mat-mats
/// ([`crate::quant::mat_mat`]) rather than batched mat-vecs ([`crate::quant::mat_vec`], up
/// to [`crate::quant::MAX_MAT_VEC_BATCH`] tokens per dispatch). GPUs: just past the
/// mat-vec batch, where tiles in shared memory start to pay. CPU implementations
/// (lavapipe): never; there each workgroup runs on one thread, and the 64 x 64 scalar
/// tiles ran a SmolLM2-135M prompt at 6 tokens/s against about 20 for batched mat-vecs
/// (benches/RESULTS.md).
pub fn mat_mat_min_tokens(caps: &Capabilities) -> usize {
    match caps.arch {
        ArchClass::Cpu => usize::MAX,
        _ => crate::quant::MAX_MAT_VEC_BATCH + 1,
    }
}
