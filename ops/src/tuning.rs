//! Kernel choice from [`Capabilities`]: per-architecture launch parameters. Ops read
//! nothing else about the device, so tests drive every table entry with a fake
//! `Capabilities`.

use vkml_hal::caps::ArchClass;
use vkml_hal::{Capabilities, PipelineOptions};

use crate::dtype::Dtype;

mod switches;
pub use switches::{
    decode_attn_overrides, decode_attn_rule, mat_vec_overrides, moe_route_in_gate_up, moe_sums, MoeSums,
};

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
    /// Rows per subgroup in the integer-dot kernel (`mul_mat_vec_dot.comp`, 1..=8). Its `x`
    /// is Q8_1 (1.1 bytes per value, against 4 for f32), so sharing `x` loads across rows
    /// matters less than having more subgroups in flight.
    pub dot_rows_per_subgroup: u32,
    /// Quantize `x` to Q8_1 on the GPU and use packed 4x8-bit integer dot products
    /// (`mul_mat_vec_dot.comp`) for the types that have it, where the block-wise kernel
    /// applies. Changes results by the Q8_1 rounding of `x` (as ggml's MMVQ path does).
    /// [`mat_vec_config`] turns it on where [`q8_1_activations`] holds.
    pub integer_dot: bool,
    /// MXFP4 on the integer-dot kernel too (its codes' magnitudes by bit arithmetic, then
    /// negated bytewise by their signs); else MXFP4 keeps the block-wise kernel on f32 `x`.
    /// H200, gpt-oss-20b tg128 (benches/RESULTS.md, issue 31, twenty-sixth and twenty-seventh
    /// sessions): 364.3 / 364.8 t/s on the block kernel; 404.3 / 404.2 on the integer-dot
    /// kernel with a shared-memory table of code pairs, 436.3 / 436.2 by the bit arithmetic;
    /// the 4096² mat-vec alone 6.1 µs on the block kernel, 5.3 on the integer-dot kernel.
    pub integer_dot_mxfp4: bool,
    /// One-row integer-dot mat-vecs quantize their f32 `x` themselves
    /// (`mul_mat_vec_dot.*_x_f32`: each workgroup into shared memory, the RMS norm folded in
    /// where there is one) instead of a quantize or norm dispatch before them, where
    /// [`crate::quant::dot_quantizes_x`] holds. Their workgroups take
    /// `dot_x_workgroup` invocations and `dot_x_rows_per_subgroup` rows per subgroup, so
    /// that each quantization of `x` serves many rows.
    pub dot_x_in_kernel: bool,
    /// Rows per subgroup of the kernels that quantize `x` themselves (1..=8).
    pub dot_x_rows_per_subgroup: u32,
    /// The same for a wide, short matrix ([`DOT_X_WIDE_ROWS`] rows or more of at most
    /// [`DOT_X_WIDE_MAX_K`]: a vocabulary head over a small hidden size), whose workgroups'
    /// quantization of the short `x` costs as much as their rows.
    pub dot_x_rows_per_subgroup_wide: u32,
    /// Invocations per workgroup of the kernels that quantize `x` themselves (a power of
    /// two, 32..=1024, at least the subgroup size).
    pub dot_x_workgroup: u32,
    /// The block-wise and vec4 mat-vecs that fold an RMS norm take it in one pass
    /// (`include/mat_vec_norm.glsl`'s `MV_NORM_ONE_PASS`: x times the weight, the product
    /// scaled at the end, the sum of squares taken by each subgroup, or in the vec4 kernel's
    /// product loop) instead of a workgroup reduction over x before the product. On by default: on an H200 it gave qwen3moe-30b-a3b
    /// tg128 +0.3 % and gpt-oss-20b +0.4 % (benches/RESULTS.md, twenty-fourth session).
    pub norm_one_pass: bool,
    /// Invocations per workgroup of the vec4 mat-vec that normalises x itself (one row per
    /// workgroup, few rows: a MoE router, [`crate::quant::vec4_fuses_norm`]); a power of
    /// two from the subgroup size to 1024, taken as at most 128 of the device's smallest
    /// subgroups (the kernel keeps one partial per subgroup in shared memory for 128).
    pub vec4_norm_workgroup: u32,
}

/// Matrices of at most this many weights count as small for [`block_rows_per_subgroup`]:
/// latency-bound rather than bandwidth-bound in a decode step (SmolLM2's largest, the
/// stacked gate|up, has 1.8 M; a 4096 x 4096 projection 16.8 M).
pub const SMALL_MAT_VEC_WEIGHTS: usize = 1 << 22;

/// Rows per subgroup of the block-wise mat-vec kernels for a `rows` x `k` matrix in
/// workgroups of `subgroups` subgroups: `cfg.rows_per_subgroup`, halved (down to 1) while
/// the grid would have fewer workgroups than the device has compute units
/// (`Capabilities::compute_units`), four times as many for a small matrix
/// ([`SMALL_MAT_VEC_WEIGHTS`]): a latency-bound matrix spreads over the whole GPU rather
/// than over a few of its SMs, while large ones keep the rows that share each x load.
/// H200, tg128 (benches/RESULTS.md, issue 29, twelfth session): SmolLM2-135M Q4_1 (576-row
/// projections on 36 of 132 SMs at 4 rows) 713 -> 932 t/s with one wave, 964 with four.
pub fn block_rows_per_subgroup(caps: &Capabilities, cfg: &MatVecConfig, rows: usize, k: usize, subgroups: u32) -> u32 {
    let waves = if rows.saturating_mul(k) <= SMALL_MAT_VEC_WEIGHTS { 4 } else { 1 };
    let target = caps.compute_units.count.max(1) as usize * waves;
    let mut nr = cfg.rows_per_subgroup.max(1);
    while nr > 1 && rows.div_ceil((subgroups.max(1) * nr) as usize) < target {
        nr /= 2;
    }
    nr
}

/// Rows per subgroup of an expert mat-vec with the gated products (two matrix rows, gate
/// and up, per output row) where the plain one would take `nr`: half as many, so that a
/// subgroup reads as many matrix rows (H100, qwen3moe-30b-a3b tg128 on the Q4_0 block
/// kernel: 4 rows 187.2 t/s, 2 rows 198.8, 1 row 188.7; benches/RESULTS.md), except for
/// MXFP4 on NVIDIA, whose f32 x loads on the block kernel (`MatVecConfig::integer_dot_mxfp4`
/// off) cost more than its 4.25-bit weights and pay to be shared by more rows (H200,
/// gpt-oss-20b tg128: its routed gate|up 56.9 µs per layer at 2 rows, 44.5 at 4;
/// benches/RESULTS.md, issue 31, twenty-first session).
pub fn expert_glu_rows_per_subgroup(caps: &Capabilities, ty: vkml_quant::GgmlType, nr: u32) -> u32 {
    let nvidia = matches!(caps.arch, ArchClass::NvidiaTensorCore | ArchClass::Nvidia);
    if nvidia && ty == vkml_quant::GgmlType::MXFP4 {
        nr.max(1)
    } else {
        (nr / 2).max(1)
    }
}

/// Storage buffers the block-wise and integer-dot mat-vec kernels bind
/// (`include/mul_mat_vec_block.glsl`: matrix, x, y, norm weight, the post-norm epilogue's
/// residual, weight and count, the expert ids of `quant::mat_vec_id` and the four MoE
/// buffers of `include/mat_vec_moe.glsl`; the integer-dot kernels one more, their Q8_1
/// output).
pub const BLOCK_MAT_VEC_BINDINGS: u32 = 13;

/// The subgroup size the block-wise mat-vec kernels run with, and whether the pipeline must
/// require it: a fixed size (`min == max`), else the largest size where the device can
/// require it with full subgroups. `None` without subgroup arithmetic or size control, or
/// with fewer than [`BLOCK_MAT_VEC_BINDINGS`] storage buffers per stage (Vulkan's minimum
/// is 4): the per-workgroup kernels run there.
pub fn row_subgroup_size(caps: &Capabilities) -> Option<(u32, bool)> {
    let s = &caps.subgroup;
    if !s.operations.contains(&"arithmetic") || s.size == 0 {
        return None;
    }
    if caps.limits.max_storage_buffers_per_stage < BLOCK_MAT_VEC_BINDINGS {
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
        // lavapipe (2 cores), SmolLM2-135M Q4_1, ms of GPU time per decode step at 1 / 4 / 8
        // rows: 1118 / 479 / 363, a 16-token prompt 6 800 / - / 1 324 (benches/RESULTS.md,
        // twenty-fourth session): each lane's x loads are gathers there, so sharing them
        // across rows is worth more than spreading rows over the 2 cores.
        ArchClass::Cpu => 8,
        _ => 1,
    };
    let dot_rows_per_subgroup = match caps.arch {
        // H100, batch 1, Q8_1 x (benches/RESULTS.md): 1 row per subgroup reads Q4_0 at
        // 84 / 85 / 89 % of copy bandwidth (4096x4096, 4096x14336, 14336x4096) and Q8_0 at
        // 92 / 89 / 90 %, against 81–85 / 74 / 86–87 % and 83 / 85–86 / 83–85 % with 4.
        ArchClass::NvidiaTensorCore | ArchClass::Nvidia => 1,
        _ => rows_per_subgroup,
    };
    // The integer-dot kernels quantizing x themselves: each workgroup quantizes all of x,
    // so it should serve many rows. H200, tg128 (benches/RESULTS.md, issue 29, twelfth
    // session), workgroup / rows per subgroup: llama-1b Q4_0 128/1 492, 256/2 744, 512/1
    // 814, 1024/1 818, 1024/2 714 t/s; llama-8b 128/1 126, 256/2 289, 512/2 344, 1024/1
    // 351, 1024/2 310 t/s (against 629 and 296 with a quantize dispatch first). Other
    // GPUs: not measured; 32-64 rows per workgroup as there.
    // Wide, short matrices: H100, tg128 at 1 / 2 / 4 / 8 rows per subgroup of the head
    // alone (benches/RESULTS.md, issue 29, thirteenth session): gemma3-270m (262 144 x
    // 640) 937 / 968 / 989 / 928 t/s (the head 129 / 89 / 68 / 80 µs), gemma3-1b (262 144 x
    // 1152) 570 / 582 / 589 / 583, llama-1b (32 000 x 2048) 928 at each; llama-8b's head
    // (128 256 x 4096) 348 / 343 / 342 / 293, so k above 2048 keeps one row.
    let (dot_x_workgroup, dot_x_rows_per_subgroup, dot_x_rows_per_subgroup_wide) = match caps.arch {
        ArchClass::NvidiaTensorCore | ArchClass::Nvidia => (1024, 1, 4),
        _ => (256, 2, 2),
    };
    // The vec4 kernel normalising x itself, one row per workgroup (a MoE router: 128 rows
    // of 2048 f32 for qwen3moe-30b-a3b): its x and the row are read once, so the more
    // invocations the fewer serial rounds of loads. H200 tg128 (benches/RESULTS.md,
    // twenty-fifth session), 128 / 256 / 512 / 1024 invocations: qwen3moe 306.8 / 312.6 /
    // 315.2 / 315.5 t/s (the router 8.0 -> 6.2 µs per layer); gpt-oss 349.4 at 128, 358.6
    // at 1024. Other GPUs: not measured, the mat-vec workgroup.
    let vec4_norm_workgroup = match caps.arch {
        ArchClass::NvidiaTensorCore | ArchClass::Nvidia => {
            1024u32.min(1 << caps.limits.max_workgroup_invocations.max(1).ilog2())
        }
        _ => workgroup,
    };
    let cfg = MatVecConfig {
        workgroup,
        subgroup_reduce,
        vec4: true,
        subgroup_rows: row_subgroup_size(caps).is_some(),
        rows_per_subgroup,
        dot_rows_per_subgroup,
        // Each mat_vec call quantizes its x first (one more dispatch and barrier); with
        // every output stage on the integer-dot kernel that still pays on the H100:
        // tg128 of synthetic Llama-3-8B Q4_0 166 -> 209 t/s, of TinyLlama-1.1B Q4_0
        // 445 -> 479 t/s (benches/RESULTS.md).
        integer_dot: q8_1_activations(caps),
        integer_dot_mxfp4: true,
        dot_x_in_kernel: true,
        dot_x_rows_per_subgroup,
        dot_x_rows_per_subgroup_wide,
        // The largest power of two the device allows, if it is below the table's.
        dot_x_workgroup: dot_x_workgroup.min(1 << caps.limits.max_workgroup_invocations.max(1).ilog2()),
        norm_one_pass: true,
        vec4_norm_workgroup,
    };
    // (read once per process: mat_vec_config runs for every mat-vec recorded)
    static SPEC: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    mat_vec_overrides(cfg, SPEC.get_or_init(|| std::env::var("VKML_MAT_VEC").ok()).as_deref(), caps)
}

/// Invocations of a `sample` workgroup (one per row of logits,
/// [`crate::sampling::sample_rows`]): the largest power of two the device allows up to
/// 1024 on GPUs, whose one row runs on one compute unit; 256 on CPU implementations
/// (lavapipe runs a workgroup's invocations on one thread). The kernel needs 64 at least.
pub fn sample_workgroup(caps: &Capabilities) -> u32 {
    let cap = match caps.arch {
        ArchClass::Cpu => 256,
        _ => 1024,
    };
    cap.min(1 << caps.limits.max_workgroup_invocations.max(1).ilog2())
}

/// Rows from which a matrix is wide for [`MatVecConfig::dot_x_rows_per_subgroup_wide`].
pub const DOT_X_WIDE_ROWS: usize = 16384;
/// Largest row length of a wide matrix for [`MatVecConfig::dot_x_rows_per_subgroup_wide`].
pub const DOT_X_WIDE_MAX_K: usize = 2048;

/// Rows per subgroup of the x-quantizing integer-dot mat-vec for a `rows` x `k` matrix:
/// [`MatVecConfig::dot_x_rows_per_subgroup_wide`] for a wide, short one, else
/// [`MatVecConfig::dot_x_rows_per_subgroup`].
pub fn dot_x_rows_per_subgroup(cfg: &MatVecConfig, rows: usize, k: usize) -> u32 {
    if rows >= DOT_X_WIDE_ROWS && k <= DOT_X_WIDE_MAX_K {
        cfg.dot_x_rows_per_subgroup_wide
    } else {
        cfg.dot_x_rows_per_subgroup
    }
}

/// Largest KV split of a one-query attention call ([`attn_splits`]).
pub const MAX_ATTN_SPLITS: usize = 32;

/// Positions per KV split of a one-query attention call ([`attn_splits`]; a replayed decode
/// step's attention applies the same rule on the GPU).
pub const ATTN_SPLIT_POSITIONS: usize = 8;

/// The workgroup shape and KV split rule of a decode step's attention
/// ([`crate::attention::flash_attn_rope_decode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeAttnConfig {
    /// Subgroups per workgroup (of the smallest size): each takes every `subgroups`-th key
    /// of the workgroup's split.
    pub subgroups: usize,
    /// Keys seen per KV split.
    pub split_positions: usize,
    /// Most splits.
    pub max_splits: usize,
    /// Most query values (heads × head dim) per workgroup; 0: a KV head's whole group of
    /// query heads in one workgroup. Otherwise each workgroup takes the largest divisor of
    /// the group whose values fit (at least one head), and the group's workgroups of a split
    /// each read the same keys and values ([`DecodeAttnConfig::heads_per_workgroup`]).
    pub query_values: usize,
}

impl DecodeAttnConfig {
    /// The splits over `seen` keys: one per `split_positions`, 1 to `max_splits`.
    pub fn splits(&self, seen: usize) -> usize {
        seen.div_ceil(self.split_positions).clamp(1, self.max_splits)
    }

    /// The query heads per workgroup for a KV head's group of `g` heads of dim `d`: `g`
    /// where `query_values` is 0, else the largest divisor of `g` whose `heads × d` values
    /// fit in `query_values`, at least 1.
    pub fn heads_per_workgroup(&self, g: usize, d: usize) -> usize {
        if self.query_values == 0 {
            return g;
        }
        (1..=g).rev().find(|&h| g.is_multiple_of(h) && h * d <= self.query_values).unwrap_or(1)
    }
}

/// Four subgroups per workgroup, a split per [`ATTN_SPLIT_POSITIONS`] keys, at most
/// [`MAX_ATTN_SPLITS`]: the `rope_*` variants, and the rule of [`attn_splits`].
pub const DECODE_ATTN_NARROW: DecodeAttnConfig = DecodeAttnConfig {
    subgroups: 4,
    split_positions: ATTN_SPLIT_POSITIONS,
    max_splits: MAX_ATTN_SPLITS,
    query_values: 0,
};

/// Sixteen subgroups per workgroup, a split per 16 keys, at most 16: the `rope_*_wide{256,512}`
/// variants. H100, tg128 (`vkml bench`, benches/RESULTS.md, issue 29, fourteenth session),
/// narrow (per 8) against wide per 8 / 16 / 32 / 64 keys: SmolLM2 941 against 986 / 1 003 /
/// 994 / 979 t/s, llama-1b 919 against 1 001 / 1 013 / 991 / 964, llama-8b 340 against 356
/// / 359 / 356 / 353; tg512 of llama-8b 321 against 345 (per 16, 32 splits) and 352 (per 32,
/// 16 splits): hence per 16 with at most 16 splits. At most 128 query values per
/// workgroup (one head of 128, two of 64): H200, tg128 (benches/RESULTS.md, issue 31,
/// twenty-sixth session), heads per workgroup 1 / 2 / 4 / the whole group of 8:
/// qwen3moe-30b-a3b (d 128) 361.5 / 357.6 / 350.8 / 318.7 t/s; gpt-oss-20b (d 64) 361.0 /
/// 365.0 / 363.6 / 355.8; llama-8b (d 128, groups of 4) 408.2 / 406.0 / 399.3 (4).
pub const DECODE_ATTN_WIDE: DecodeAttnConfig =
    DecodeAttnConfig { subgroups: 16, split_positions: 16, max_splits: 16, query_values: 128 };

/// Whether the decode attention takes [`DECODE_ATTN_WIDE`] on this architecture where its
/// group fits (`crate::attention` checks the workgroup and shared memory): measured on
/// NVIDIA; on CPU implementations (lavapipe) so that the tests run it; elsewhere not
/// measured, [`DECODE_ATTN_NARROW`].
pub fn decode_attn_wide(caps: &Capabilities) -> bool {
    matches!(caps.arch, ArchClass::NvidiaTensorCore | ArchClass::Nvidia | ArchClass::Cpu)
}

/// Workgroups the KV length of one (query, KV head) pair is split over in
/// [`crate::attention::flash_attn`] (FlashDecoding): one per 8 positions, at most
/// [`MAX_ATTN_SPLITS`], for a single query (decode); 1 for prompts, whose many queries
/// already fill the device. H200, tg128 with the in-place merge that issues its loads
/// together (benches/RESULTS.md, issue 29, twelfth session): per 4 / 8 / 16 / 32 / 64
/// positions, SmolLM2 978 / 983 / 964 / 882 / 813 t/s, llama-1b 944 / 965 / 933 / 861 /
/// 747, llama-8b 381 / 386 / 379 / 364 / 341; tg1024 (mostly at the cap) the same within
/// 1 % at per 8 and per 16, and 4-10 % slower with at most 64 splits. (Earlier, H100 with
/// the serial merge: per 16 best, 32 splits at most.) `VKML_DECODE_ATTN` overrides the
/// decode rule here too ([`decode_attn_rule`]), as it does for the fused decode attention.
pub fn attn_splits(t_q: usize, kv_len: usize) -> usize {
    if t_q == 1 {
        decode_attn_rule(DECODE_ATTN_NARROW).splits(kv_len)
    } else {
        1
    }
}

/// The subgroup size the cooperative-matrix mat-mat (`mul_mat_cm.comp`) runs with, and
/// whether the pipeline must require it; `None` where the device lacks what that kernel
/// needs: a 16x16x16 f16 x f16 + f32 → f32 subgroup-scope shape (`VK_KHR_cooperative_matrix`)
/// and subgroups of exactly 32 (the kernel tiles 4 subgroups of 32 over 128 invocations),
/// plus f16 arithmetic (`shaderFloat16`) and 48 KiB of shared memory: the requirements of
/// the F16 float matmul's cooperative-matrix kernels ([`float_coopmat_subgroup`]); and
/// subgroup arithmetic ([`subgroup_reduce`]: the head norms of the rotary epilogue's
/// prologue, include/mul_mat_rope.glsl, which every device with these matrices offers).
pub fn coopmat_subgroup_size(caps: &Capabilities) -> Option<(u32, bool)> {
    float_coopmat_subgroup(caps, Dtype::F16).filter(|_| subgroup_reduce(caps))
}

/// Pipeline options for the kernels that tile subgroups of 32 over f16 cooperative
/// matrices (`mul_mat_cm*.comp`, `flash_attn_cm.comp`) with `spec_constants`: subgroups of
/// 32 required where the device could run another size ([`coopmat_subgroup_size`]), full
/// subgroups where it offers them. `None` where [`coopmat_subgroup_size`] is.
pub fn coopmat_pipeline_options(caps: &Capabilities, spec_constants: Vec<(u32, u32)>) -> Option<PipelineOptions> {
    let (sg, require) = coopmat_subgroup_size(caps)?;
    Some(PipelineOptions {
        spec_constants,
        required_subgroup_size: require.then_some(sg),
        full_subgroups: caps.subgroup.full_subgroups,
    })
}

/// Whether the cooperative-matrix mat-mat (`mul_mat_cm.comp`, `mul_mat_cm256.comp`) walks
/// its tiles in row-tile-major order (specialization constant 0): the token tiles of one
/// row tile then run side by side and read that weight tile from memory once, the rest
/// from L2. On the H100 at 14336x4096 / 4096x14336 by 512 tokens (benches/RESULTS.md) that
/// took Q4_0 from 79 / 89 to 99-101 / 100-102 TFLOP/s and Q4_K from 74 / 83 to 84-85 / 89
/// on the first 128-row kernel, and Q8_0 on the 256-row kernel from 156 / 178 to 160 / 181
/// (2026-11-24, fourth session; Q8_0 had been the exception on the 128-row kernel). The
/// int8 kernel takes the same order. Elsewhere (not measured) the grid order stays.
pub fn mat_mat_row_raster(caps: &Capabilities) -> bool {
    caps.arch == ArchClass::NvidiaTensorCore
}

/// Whether the cooperative-matrix mat-mat may run `mul_mat_cm256.comp` (256-row x
/// 128-token tiles, 8 subgroups, BK = 16 steps; built for Q8_0) instead of
/// `mul_mat_cm.comp` (128 x 128), halving the activation traffic from L2 per product;
/// [`crate::quant::mat_mat_kernel`] takes it only for grids of 128 tall tiles or more.
/// On the H100 (benches/RESULTS.md, 2026-11-24, fourth session), at 14336x4096x512 it ran
/// Q8_0 at 158-160 TFLOP/s against 131-133 on 128-row tiles, but a Q4_0 variant at
/// 158-161 against 158-159 (no gain) and a Q4_K one (each step's words staged apart) at 86
/// against 131 (`benches/lab/mm_t256.comp`), so only Q8_0 takes it. Elsewhere (not measured) the 128-row kernel stays.
pub fn mat_mat_tall_tile(caps: &Capabilities, ty: vkml_quant::GgmlType) -> bool {
    caps.arch == ArchClass::NvidiaTensorCore && ty == vkml_quant::GgmlType::Q8_0
}

/// Whether the cooperative-matrix mat-mat (`mul_mat_cm.comp`) runs warp-specialized
/// (its specialization constants 1 = 256 invocations and 2 = true): 4 subgroups load and
/// decode the next step into shared memory while the other 4 multiply the current one,
/// instead of 4 subgroups doing both in turn. It pays where decoding is a large share of a
/// step: on the H100 (benches/RESULTS.md, 2026-11-24, fourth session) Q4_K and Q4_0 gain,
/// Q8_0 gains nothing (it takes `mul_mat_cm256.comp` on big grids: [`mat_mat_tall_tile`])
/// and F16 loses 5-9 %. Q4_1, Q5_0 and Q5_1 gain or stay even (Q4_1 139 / 159 -> 161 /
/// 161); Q5_K and Q6_K (coalesced since the fifth session) gain about 30 % and 12 %
/// (plain: 48 / 52 and 36 / 40 TFLOP/s, warp-specialized 61 / 68 and 40 / 46; Q2_K,
/// coalesced too, runs 134 / 157 warp-specialized); the types decoded element by element
/// (Q3_K, IQ*, ...) run within 5 % either way. Elsewhere (not measured) the plain order
/// stays.
pub fn mat_mat_warp_specialized(caps: &Capabilities, ty: vkml_quant::GgmlType) -> bool {
    use vkml_quant::GgmlType;
    match caps.arch {
        ArchClass::NvidiaTensorCore => !matches!(ty, GgmlType::F16 | GgmlType::Q8_0),
        _ => false,
    }
}

/// Whether, warp-specialized, the multiplying subgroups also copy x into shared memory
/// (specialization constant 3), leaving the producing ones only the weights. On the H100
/// that took Q4_K from 125-129 to 130-152 TFLOP/s (14336x4096 / 4096x14336 by 512
/// tokens), but cost Q4_0, Q4_1, Q5_0 and Q5_1 more at 14336 rows than it gave at 4096,
/// so those keep x with the producers; the other types follow Q4_K (Q5_K and Q6_K
/// measured 3-7 % faster with it than with x by the producers; the generic per-element
/// decode within 5 % either way).
pub fn mat_mat_x_by_multipliers(caps: &Capabilities, ty: vkml_quant::GgmlType) -> bool {
    use vkml_quant::GgmlType;
    mat_mat_warp_specialized(caps, ty)
        && !matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1)
}

/// The specialization constants `quant::mat_mat_with` gives the mat-mat `kernel` (the
/// name [`crate::quant::mat_mat_kernel`] returns) for weights of type `ty`: for
/// `mul_mat_cm`, 0 = [`mat_mat_row_raster`], 1 = the workgroup size (128, or 256
/// warp-specialized), 2 = [`mat_mat_warp_specialized`] and 3 =
/// [`mat_mat_x_by_multipliers`]; for `mul_mat_cm256` and `mul_mat_cm_i8` only 0; none for
/// the others.
pub fn mat_mat_spec_constants(caps: &Capabilities, kernel: &str, ty: vkml_quant::GgmlType) -> Vec<(u32, u32)> {
    let raster = u32::from(mat_mat_row_raster(caps));
    match kernel {
        "mul_mat_cm" => {
            let ws = mat_mat_warp_specialized(caps, ty);
            let xm = mat_mat_x_by_multipliers(caps, ty);
            vec![(0, raster), (1, if ws { 256 } else { 128 }), (2, u32::from(ws)), (3, u32::from(xm))]
        }
        "mul_mat_cm256" | "mul_mat_cm_i8" => vec![(0, raster)],
        _ => Vec::new(),
    }
}

/// The 16-row or 16-token strips per subgroup that `mul_mat_cm.comp`'s staged epilogues
/// (the gated product, the rotation and cache append: include/mul_mat_cm.glsl) pass through
/// shared memory at once (specialization constant 12): 2 (32 KiB of its 40 KiB), halving
/// the passes and barriers of 1. On the H100 (benches/RESULTS.md, sixteenth session)
/// llama-8b Q4_0's prompt took 49.99-50.19 ms of GPU time with 2 against 50.31 with 1.
pub fn mat_mat_epilogue_tiles(_caps: &Capabilities) -> u32 {
    2
}

/// Whether the int8 cooperative-matrix mat-mat (`mul_mat_cm_i8.comp`,
/// [`crate::quant::MatMatPath::CoopMatInt8`]) runs here: a 16x16x32 s8 x s8 + s32
/// subgroup shape (not saturating), `shaderInt8`, and everything
/// [`coopmat_subgroup_size`] needs (the 16x16x16 f16 shape carries the block scales).
pub fn coopmat_int8(caps: &Capabilities) -> bool {
    let shape = caps.cooperative_matrix.iter().any(|s| {
        (s.m, s.n, s.k) == (16, 16, 32)
            && s.a == "s8"
            && s.b == "s8"
            && s.c == "s32"
            && s.result == "s32"
            && !s.saturating
            && s.scope == "subgroup"
    });
    shape && caps.types.int8 && coopmat_subgroup_size(caps).is_some()
}

/// Whether the workgroup-scope cooperative-matrix mat-mat (`mul_mat_cm2.comp`,
/// [`crate::quant::MatMatPath::CoopMat2`]) runs here: `VK_NV_cooperative_matrix2` with
/// workgroup scope (for 256 invocations), flexible dimensions, tensor addressing and block
/// loads, `bufferDeviceAddress` (its decode callbacks take buffer references), 16-bit
/// storage and integers, plus everything [`coopmat_subgroup_size`] needs.
pub fn coopmat2(caps: &Capabilities) -> bool {
    let Some(nv) = &caps.nv_cooperative_matrix2 else { return false };
    nv.workgroup_scope
        && nv.flexible_dimensions
        && nv.tensor_addressing
        && nv.block_loads
        && nv.workgroup_scope_max_workgroup_size >= 256
        && caps.buffer_device_address
        && caps.types.storage_buffer_16bit
        && caps.types.int16
        && coopmat_subgroup_size(caps).is_some()
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

/// The kernel of a float matmul ([`crate::matmul::matmul`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulPath {
    /// `matmul.comp`: `tile x tile` outputs per workgroup through shared memory, 4 x 4 per
    /// invocation. Runs everywhere, every float dtype.
    Tiled {
        /// Output rows and columns per workgroup (a multiple of 4; `(tile / 4)^2`
        /// invocations).
        tile: u32,
    },
    /// `matmul_sg.comp`: for at most [`MATMUL_SUBGROUP_MAX_ROWS`] rows, one subgroup per
    /// output column, lanes over k, combined with `subgroupAdd` (F32, F16, BF16; needs
    /// subgroup arithmetic).
    Subgroup {
        /// Invocations per workgroup (a multiple of the largest subgroup size).
        workgroup: u32,
    },
    /// `matmul_cm.comp` / `matmul_cm4.comp`: 128 x 128 tiles on 16x16x16 cooperative
    /// matrices (F16, and BF16 where the device has bf16 cooperative matrices), subgroups
    /// of 32.
    CoopMat {
        /// Whether the pipeline must require the subgroup size 32.
        require_subgroup_size: bool,
    },
}

/// Most rows of `a` for which [`MatmulPath::Subgroup`] is chosen.
pub const MATMUL_SUBGROUP_MAX_ROWS: usize = 8;

/// The matmul kernel for `dt` and `m` rows of `a` on a device: the per-architecture table
///
/// | arch | tiled tile | subgroup workgroup | cooperative matrices |
/// |---|---|---|---|
/// | NVIDIA (tensor cores or not) | 64 | 128 | F16 / BF16, m > 8 |
/// | AMD RDNA, GCN | 64 | 256 | F16 / BF16, m > 8 |
/// | Intel | 64 | 128 | F16 / BF16, m > 8 |
/// | Apple (MoltenVK) | 32 | 128 | F16 / BF16, m > 8 |
/// | Adreno, Mali | 32 | 64 | F16 / BF16, m > 8 |
/// | CPU (lavapipe), other | 32 | 64 | F16 / BF16, m > 8 |
///
/// Cooperative matrices where [`float_coopmat_subgroup`] finds a fitting shape for `dt`
/// (whatever the architecture: the table only sizes the other kernels); else the subgroup
/// kernel for `m <= 8` rows where the device has subgroup arithmetic and `dt` is not F64;
/// else the tiled kernel. Tiles of 64 (256 invocations) suit GPUs with large register
/// files and 32 KiB+ of shared memory per workgroup; 32 (64 invocations) suits mobile
/// GPUs, Apple's 32-wide SIMD groups, and CPU implementations, where one workgroup runs
/// on one thread and smaller tiles spread a modest matmul over more cores. The subgroup
/// workgroup is at least the largest subgroup size.
pub fn matmul_config(caps: &Capabilities, dt: Dtype, m: usize) -> MatmulPath {
    let (tile, sg_workgroup) = match caps.arch {
        ArchClass::NvidiaTensorCore | ArchClass::Nvidia => (64, 128),
        ArchClass::AmdRdna | ArchClass::AmdGcn => (64, 256),
        ArchClass::Intel => (64, 128),
        ArchClass::Apple => (32, 128),
        ArchClass::Adreno | ArchClass::Mali => (32, 64),
        ArchClass::Cpu | ArchClass::Other => (32, 64),
    };
    if m > MATMUL_SUBGROUP_MAX_ROWS {
        if let Some((_, require)) = float_coopmat_subgroup(caps, dt) {
            return MatmulPath::CoopMat { require_subgroup_size: require };
        }
    }
    let sg = &caps.subgroup;
    let largest = sg.max_size.max(sg.size);
    if m <= MATMUL_SUBGROUP_MAX_ROWS
        && dt != Dtype::F64
        && sg.operations.contains(&"arithmetic")
        && largest > 0
        && largest <= caps.limits.max_workgroup_invocations
    {
        return MatmulPath::Subgroup { workgroup: sg_workgroup.max(largest) };
    }
    MatmulPath::Tiled { tile }
}

/// The subgroup size the cooperative-matrix matmul runs with for `dt` and whether the
/// pipeline must require it; `None` where the device lacks a 16x16x16 subgroup-scope
/// shape with A and B of `dt` (F16 with `shaderFloat16`, or BF16 with
/// `shaderBFloat16CooperativeMatrix`) accumulating in f32, subgroups of 32, or 48 KiB of
/// shared memory.
pub fn float_coopmat_subgroup(caps: &Capabilities, dt: Dtype) -> Option<(u32, bool)> {
    let ab = match dt {
        Dtype::F16 if caps.types.float16 => "f16",
        Dtype::BF16 if caps.types.float16 && caps.types.bfloat16 && caps.types.bfloat16_cooperative_matrix => "bf16",
        _ => return None,
    };
    let shape = caps.cooperative_matrix.iter().any(|s| {
        (s.m, s.n, s.k) == (16, 16, 16)
            && s.a == ab
            && s.b == ab
            && s.c == "f32"
            && s.result == "f32"
            && s.scope == "subgroup"
    });
    let sg = &caps.subgroup;
    if !shape || caps.limits.max_shared_memory < 48 * 1024 {
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

#[cfg(test)]
mod tests {
    use vkml_hal::caps::{
        ComputeLimits, CoopMatShape, DeviceType, MemoryCaps, QueueCaps, ShaderTypeCaps, SubgroupCaps, Vendor,
    };

    use super::*;

    /// A fake device of `arch` with subgroups `(default, min, max)`, subgroup arithmetic,
    /// and (with `coopmat`) an f16 and a bf16 16x16x16 cooperative-matrix shape.
    pub(super) fn fake(arch: ArchClass, vendor: Vendor, sg: (u32, u32, u32), coopmat: bool) -> Capabilities {
        let shape = |t: &'static str| CoopMatShape {
            m: 16,
            n: 16,
            k: 16,
            a: t,
            b: t,
            c: "f32",
            result: "f32",
            saturating: false,
            scope: "subgroup",
        };
        Capabilities {
            name: format!("fake {arch:?}"),
            device_type: if arch == ArchClass::Cpu { DeviceType::Cpu } else { DeviceType::Discrete },
            vendor,
            vendor_id: 0,
            device_id: 0,
            arch,
            api_version: "1.3.0".into(),
            api_version_raw: 0,
            driver_id: String::new(),
            driver_name: String::new(),
            driver_info: String::new(),
            driver_version_raw: 0,
            driver_version: String::new(),
            device_uuid: String::new(),
            pipeline_cache_uuid: String::new(),
            subgroup: SubgroupCaps {
                size: sg.0,
                min_size: sg.1,
                max_size: sg.2,
                size_control: sg.1 != sg.2,
                full_subgroups: true,
                operations: vec!["basic", "arithmetic"],
            },
            types: ShaderTypeCaps {
                float16: true,
                float64: true,
                int64: true,
                bfloat16: coopmat,
                bfloat16_cooperative_matrix: coopmat,
                storage_buffer_16bit: true,
                ..Default::default()
            },
            integer_dot: Default::default(),
            cooperative_matrix: if coopmat { vec![shape("f16"), shape("bf16")] } else { vec![] },
            nv_cooperative_matrix2: None,
            limits: ComputeLimits {
                max_shared_memory: 48 * 1024,
                max_workgroup_invocations: 1024,
                max_workgroup_count: [65535; 3],
                max_storage_buffers_per_stage: 16,
                ..Default::default()
            },
            memory: MemoryCaps::default(),
            queues: QueueCaps::default(),
            compute_units: vkml_hal::caps::ComputeUnits { count: 132, source: "VK_NV_shader_sm_builtins".into() },
            push_descriptor: true,
            timeline_semaphore: true,
            vulkan_memory_model: true,
            buffer_device_address: false,
            unusable: None,
        }
    }

    /// One row per table entry: the tiled tile for a large F32 product, the subgroup
    /// workgroup for a one-row product, and the path for a large F16 product.
    #[test]
    fn matmul_table() {
        let cases = [
            (ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), true, 64, 128, true),
            (ArchClass::Nvidia, Vendor::Nvidia, (32, 32, 32), false, 64, 128, false),
            (ArchClass::AmdRdna, Vendor::Amd, (64, 32, 64), true, 64, 256, true),
            (ArchClass::AmdGcn, Vendor::Amd, (64, 64, 64), false, 64, 256, false),
            (ArchClass::Intel, Vendor::Intel, (32, 8, 32), false, 64, 128, false),
            (ArchClass::Apple, Vendor::Apple, (32, 32, 32), false, 32, 128, false),
            (ArchClass::Adreno, Vendor::Qualcomm, (64, 64, 128), false, 32, 128, false),
            (ArchClass::Mali, Vendor::Arm, (16, 16, 16), false, 32, 64, false),
            (ArchClass::Cpu, Vendor::Mesa, (8, 8, 8), false, 32, 64, false),
            (ArchClass::Other, Vendor::Other, (32, 32, 32), false, 32, 64, false),
        ];
        for (arch, vendor, sg, coopmat, tile, sg_wg, cm) in cases {
            let caps = fake(arch, vendor, sg, coopmat);
            assert_eq!(matmul_config(&caps, Dtype::F32, 512), MatmulPath::Tiled { tile }, "{arch:?} tiled");
            assert_eq!(matmul_config(&caps, Dtype::F64, 1), MatmulPath::Tiled { tile }, "{arch:?} f64 skips subgroups");
            assert_eq!(
                matmul_config(&caps, Dtype::F32, 1),
                MatmulPath::Subgroup { workgroup: sg_wg },
                "{arch:?} subgroup"
            );
            let big = matmul_config(&caps, Dtype::F16, 512);
            if cm {
                // AMD RDNA can require 32 within 32..=64; NVIDIA runs 32 only.
                let require = sg.1 != sg.2;
                assert_eq!(big, MatmulPath::CoopMat { require_subgroup_size: require }, "{arch:?} coopmat");
                assert_eq!(matmul_config(&caps, Dtype::BF16, 512), big, "{arch:?} bf16 coopmat");
            } else {
                assert_eq!(big, MatmulPath::Tiled { tile }, "{arch:?} without coopmat");
            }
        }
    }

    /// Rows per subgroup of the x-quantizing dot kernel: the wide entry for heads over a
    /// small hidden size only (NVIDIA: 4 against 1).
    #[test]
    fn dot_x_rows_per_subgroup_table() {
        let cfg = mat_vec_config(&fake(ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), true));
        assert_eq!((cfg.dot_x_rows_per_subgroup, cfg.dot_x_rows_per_subgroup_wide), (1, 4));
        assert_eq!(dot_x_rows_per_subgroup(&cfg, 262_144, 640), 4);
        assert_eq!(dot_x_rows_per_subgroup(&cfg, 32_000, 2048), 4);
        assert_eq!(dot_x_rows_per_subgroup(&cfg, 128_256, 4096), 1);
        assert_eq!(dot_x_rows_per_subgroup(&cfg, 2048, 640), 1);
        let amd = mat_vec_config(&fake(ArchClass::AmdRdna, Vendor::Amd, (64, 32, 64), false));
        assert_eq!(dot_x_rows_per_subgroup(&amd, 262_144, 640), 2);
    }

    /// The sampling workgroup per table entry, and below a device's invocation limit.
    /// The decode attention's form per architecture (wide where measured, and on CPU
    /// implementations for the tests), and its split rules.
    #[test]
    fn decode_attention_table() {
        let cases = [
            (ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), true),
            (ArchClass::Nvidia, Vendor::Nvidia, (32, 32, 32), true),
            (ArchClass::AmdRdna, Vendor::Amd, (64, 32, 64), false),
            (ArchClass::AmdGcn, Vendor::Amd, (64, 64, 64), false),
            (ArchClass::Intel, Vendor::Intel, (32, 8, 32), false),
            (ArchClass::Apple, Vendor::Apple, (32, 32, 32), false),
            (ArchClass::Adreno, Vendor::Qualcomm, (64, 64, 128), false),
            (ArchClass::Mali, Vendor::Arm, (16, 16, 16), false),
            (ArchClass::Cpu, Vendor::Mesa, (8, 8, 8), true),
            (ArchClass::Other, Vendor::Other, (32, 32, 32), false),
        ];
        for (arch, vendor, sg, wide) in cases {
            assert_eq!(decode_attn_wide(&fake(arch, vendor, sg, false)), wide, "{arch:?}");
        }
        assert_eq!([1, 8, 9, 64, 256, 257, 4096].map(|n| DECODE_ATTN_NARROW.splits(n)), [1, 1, 2, 8, 32, 32, 32]);
        assert_eq!([1, 16, 17, 64, 256, 257, 4096].map(|n| DECODE_ATTN_WIDE.splits(n)), [1, 1, 2, 4, 16, 16, 16]);
        // Query heads per workgroup (group, head dim): at most 128 values on the wide rule.
        let heads = |c: DecodeAttnConfig| {
            [(8, 128), (8, 64), (3, 64), (4, 32), (8, 16), (6, 64), (8, 256)].map(|(g, d)| c.heads_per_workgroup(g, d))
        };
        assert_eq!(heads(DECODE_ATTN_WIDE), [1, 2, 1, 4, 8, 2, 1]);
        assert_eq!(heads(DECODE_ATTN_NARROW), [8, 8, 3, 4, 8, 6, 8]);
        assert_eq!(attn_splits(1, 64), DECODE_ATTN_NARROW.splits(64));
    }

    #[test]
    fn expert_glu_rows_halve_but_for_mxfp4_on_nvidia() {
        use vkml_quant::GgmlType;
        let nv = fake(ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), true);
        let amd = fake(ArchClass::AmdRdna, Vendor::Amd, (32, 32, 64), false);
        assert_eq!(expert_glu_rows_per_subgroup(&nv, GgmlType::MXFP4, 4), 4);
        assert_eq!(expert_glu_rows_per_subgroup(&nv, GgmlType::Q4_K, 4), 2);
        assert_eq!(expert_glu_rows_per_subgroup(&nv, GgmlType::Q4_0, 1), 1);
        assert_eq!(expert_glu_rows_per_subgroup(&amd, GgmlType::MXFP4, 4), 2);
    }

    #[test]
    fn sample_workgroup_table() {
        let gpu = fake(ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), true);
        assert_eq!(sample_workgroup(&gpu), 1024);
        assert_eq!(sample_workgroup(&fake(ArchClass::Cpu, Vendor::Mesa, (8, 8, 8), false)), 256);
        let mut small = fake(ArchClass::Mali, Vendor::Arm, (16, 16, 16), false);
        small.limits.max_workgroup_invocations = 384;
        assert_eq!(sample_workgroup(&small), 256);
    }

    /// The quantized mat-vec launch per table entry: workgroup (at least one subgroup),
    /// rows per subgroup, and the other kernel switches.
    #[test]
    fn mat_vec_table() {
        let cases = [
            (ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), 128, 4),
            (ArchClass::Nvidia, Vendor::Nvidia, (32, 32, 32), 128, 4),
            (ArchClass::AmdRdna, Vendor::Amd, (64, 32, 64), 64, 4),
            (ArchClass::AmdGcn, Vendor::Amd, (64, 64, 64), 64, 4),
            (ArchClass::Intel, Vendor::Intel, (32, 8, 32), 64, 1),
            (ArchClass::Apple, Vendor::Apple, (32, 32, 32), 64, 1),
            (ArchClass::Adreno, Vendor::Qualcomm, (128, 64, 128), 128, 1),
            (ArchClass::Mali, Vendor::Arm, (16, 16, 16), 64, 1),
            (ArchClass::Cpu, Vendor::Mesa, (8, 8, 8), 64, 8),
            (ArchClass::Other, Vendor::Other, (32, 32, 32), 64, 1),
        ];
        for (arch, vendor, sg, workgroup, rows) in cases {
            let cfg = mat_vec_config(&fake(arch, vendor, sg, false));
            assert_eq!((cfg.workgroup, cfg.rows_per_subgroup), (workgroup, rows), "{arch:?}");
            assert!(cfg.subgroup_reduce && cfg.vec4 && cfg.subgroup_rows && !cfg.integer_dot, "{arch:?}: {cfg:?}");
            // With accelerated packed int8 dot products the decode mat-vecs take Q8_1 x.
            let mut caps = fake(arch, vendor, sg, false);
            caps.integer_dot.supported = true;
            caps.integer_dot.packed_4x8_signed_accelerated = true;
            assert!(mat_vec_config(&caps).integer_dot, "{arch:?}");
        }
    }

    /// Cooperative matrices need the dtype's shape, subgroups of 32 and bf16 support.
    #[test]
    fn float_coopmat_requirements() {
        let mut caps = fake(ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), true);
        assert_eq!(float_coopmat_subgroup(&caps, Dtype::F16), Some((32, false)));
        assert_eq!(float_coopmat_subgroup(&caps, Dtype::F32), None);
        assert_eq!(float_coopmat_subgroup(&caps, Dtype::BF16), Some((32, false)));
        caps.types.bfloat16_cooperative_matrix = false;
        assert_eq!(float_coopmat_subgroup(&caps, Dtype::BF16), None, "no bf16 cooperative matrices");
        caps.types.float16 = false;
        assert_eq!(float_coopmat_subgroup(&caps, Dtype::F16), None, "no f16 arithmetic");
        let mut wave64 = fake(ArchClass::AmdGcn, Vendor::Amd, (64, 64, 64), true);
        assert_eq!(float_coopmat_subgroup(&wave64, Dtype::F16), None, "no subgroups of 32");
        wave64.subgroup.operations.clear();
        assert_eq!(matmul_config(&wave64, Dtype::F32, 1), MatmulPath::Tiled { tile: 64 }, "no subgroup arithmetic");
    }

    /// Rows per subgroup halve while the grid has fewer workgroups than the units (132 SMs,
    /// 4 subgroups per workgroup), four times as many for a small matrix.
    #[test]
    fn block_rows_follow_compute_units() {
        let mut caps = fake(ArchClass::NvidiaTensorCore, Vendor::Nvidia, (32, 32, 32), false);
        let cfg = mat_vec_config(&caps);
        assert_eq!(cfg.rows_per_subgroup, 4);
        // SmolLM2's 576 x 576 output projection: 36 workgroups at 4 rows, 144 at 1.
        assert_eq!(block_rows_per_subgroup(&caps, &cfg, 576, 576, 4), 1);
        // A large matrix of 2 048 rows: 128 workgroups at 4 rows are short of one wave.
        assert_eq!(block_rows_per_subgroup(&caps, &cfg, 2048, 8192, 4), 2);
        // 4 096 x 4 096: 256 workgroups at 4 rows fill the 132 SMs: the table's rows.
        assert_eq!(block_rows_per_subgroup(&caps, &cfg, 4096, 4096, 4), 4);
        // A small one against four waves: 1 536 x 576 at 2 rows is 192 workgroups, < 528.
        assert_eq!(block_rows_per_subgroup(&caps, &cfg, 1536, 576, 4), 1);
        caps.compute_units.count = 16;
        assert_eq!(block_rows_per_subgroup(&caps, &cfg, 576, 576, 4), 2);
        // Fewer storage buffers per stage than the block kernels bind: no subgroup rows.
        assert!(row_subgroup_size(&caps).is_some());
        caps.limits.max_storage_buffers_per_stage = BLOCK_MAT_VEC_BINDINGS - 1;
        assert_eq!(row_subgroup_size(&caps), None);
        assert!(!mat_vec_config(&caps).subgroup_rows);
    }
}
