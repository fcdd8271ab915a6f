//! Block structs with ggml's exact memory layouts (`block_*` in ggml `src/ggml-common.h`).
//!
//! All blocks are `#[repr(C)]`, have no padding, and their sizes are asserted at compile time
//! against [`GgmlType::type_size`]. Read them from file bytes with [`read_block`] (alignment-free copy)
//! or `bytemuck::try_cast_slice` when the bytes are suitably aligned. Multi-byte fields are
//! little-endian, as in GGUF files (this crate requires a little-endian target).

use crate::types::GgmlType;
use half::f16;

/// A ggml block: a fixed-size, plain-old-data group of `Self::TYPE.block_size()` elements.
pub trait Block: bytemuck::Pod + std::fmt::Debug {
    /// The type this block belongs to.
    const TYPE: GgmlType;
    /// Elements per block.
    const ELEMS: usize = Self::TYPE.block_size();
}

/// Copies one block out of `bytes` (which must be exactly `size_of::<B>()` long; returns `None`
/// otherwise). Works for any alignment.
pub fn read_block<B: Block>(bytes: &[u8]) -> Option<B> {
    if bytes.len() != std::mem::size_of::<B>() {
        return None;
    }
    Some(bytemuck::pod_read_unaligned(bytes))
}

/// `block_q4_0`: one [`GgmlType::Q4_0`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_0 {
    /// Scale (delta).
    pub d: f16,
    /// 4-bit quants, element j in the low nibble of byte j, element j+16 in the high nibble.
    pub qs: [u8; 16],
}
impl Block for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == GgmlType::Q4_0.type_size());

/// `block_q4_1`: one [`GgmlType::Q4_1`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Min.
    pub m: f16,
    /// 4-bit quants, low nibbles = elements 0..16, high = 16..32.
    pub qs: [u8; 16],
}
impl Block for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == GgmlType::Q4_1.type_size());

/// `block_q5_0`: one [`GgmlType::Q5_0`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bit of each quant, little-endian u32, bit j = element j.
    pub qh: [u8; 4],
    /// Low 4 bits, as Q4_0.
    pub qs: [u8; 16],
}
impl Block for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == GgmlType::Q5_0.type_size());

/// `block_q5_1`: one [`GgmlType::Q5_1`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Min.
    pub m: f16,
    /// Fifth bit of each quant, little-endian u32.
    pub qh: [u8; 4],
    /// Low 4 bits.
    pub qs: [u8; 16],
}
impl Block for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == GgmlType::Q5_1.type_size());

/// `block_q8_0`: one [`GgmlType::Q8_0`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quants.
    pub qs: [i8; 32],
}
impl Block for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == GgmlType::Q8_0.type_size());

/// `block_q8_1`: one [`GgmlType::Q8_1`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_1 {
    /// Scale.
    pub d: f16,
    /// `d * sum(qs)`.
    pub s: f16,
    /// Quants.
    pub qs: [i8; 32],
}
impl Block for BlockQ8_1 {
    const TYPE: GgmlType = GgmlType::Q8_1;
}
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == GgmlType::Q8_1.type_size());

/// `block_q2_K`: one [`GgmlType::Q2_K`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ2K {
    /// 4-bit scale (low nibble) and 4-bit min (high nibble) per 16 elements.
    pub scales: [u8; 16],
    /// 2-bit quants.
    pub qs: [u8; 64],
    /// Super-block scale for the scales.
    pub d: f16,
    /// Super-block scale for the mins.
    pub dmin: f16,
}
impl Block for BlockQ2K {
    const TYPE: GgmlType = GgmlType::Q2_K;
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == GgmlType::Q2_K.type_size());

/// `block_q3_K`: one [`GgmlType::Q3_K`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ3K {
    /// High bit of the 3-bit quants.
    pub hmask: [u8; 32],
    /// Low 2 bits of the quants.
    pub qs: [u8; 64],
    /// 16 x 6-bit scales, packed.
    pub scales: [u8; 12],
    /// Super-block scale.
    pub d: f16,
}
impl Block for BlockQ3K {
    const TYPE: GgmlType = GgmlType::Q3_K;
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == GgmlType::Q3_K.type_size());

/// `block_q4_K`: one [`GgmlType::Q4_K`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4K {
    /// Super-block scale for the quantized scales.
    pub d: f16,
    /// Super-block scale for the quantized mins.
    pub dmin: f16,
    /// 8 x (6-bit scale, 6-bit min), packed (`get_scale_min_k4`).
    pub scales: [u8; 12],
    /// 4-bit quants.
    pub qs: [u8; 128],
}
impl Block for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4_K;
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == GgmlType::Q4_K.type_size());

/// `block_q5_K`: one [`GgmlType::Q5_K`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5K {
    /// Super-block scale for the quantized scales.
    pub d: f16,
    /// Super-block scale for the quantized mins.
    pub dmin: f16,
    /// 8 x (6-bit scale, 6-bit min), packed.
    pub scales: [u8; 12],
    /// High bit of the quants.
    pub qh: [u8; 32],
    /// Low 4 bits of the quants.
    pub qs: [u8; 128],
}
impl Block for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5_K;
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == GgmlType::Q5_K.type_size());

/// `block_q6_K`: one [`GgmlType::Q6_K`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; 128],
    /// High 2 bits of the quants.
    pub qh: [u8; 64],
    /// 8-bit signed scales, one per 16 elements.
    pub scales: [i8; 16],
    /// Super-block scale.
    pub d: f16,
}
impl Block for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == GgmlType::Q6_K.type_size());

/// `block_q8_K`: one [`GgmlType::Q8_K`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8K {
    /// Scale (f32, not f16).
    pub d: f32,
    /// Quants.
    pub qs: [i8; 256],
    /// Sum of the quants in each group of 16.
    pub bsums: [i16; 16],
}
impl Block for BlockQ8K {
    const TYPE: GgmlType = GgmlType::Q8_K;
}
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == GgmlType::Q8_K.type_size());

/// `block_iq2_xxs`: one [`GgmlType::IQ2_XXS`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq2Xxs {
    /// Super-block scale.
    pub d: f16,
    /// Per 32 elements: 4 grid indices (bytes) then a u32 of 4 x 7-bit sign indices and a 4-bit scale.
    pub qs: [u16; 32],
}
impl Block for BlockIq2Xxs {
    const TYPE: GgmlType = GgmlType::IQ2_XXS;
}
const _: () = assert!(std::mem::size_of::<BlockIq2Xxs>() == GgmlType::IQ2_XXS.type_size());

/// `block_iq2_xs`: one [`GgmlType::IQ2_XS`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq2Xs {
    /// Super-block scale.
    pub d: f16,
    /// 9-bit grid index + 7-bit sign index per 8 elements.
    pub qs: [u16; 32],
    /// Two 4-bit scales per 32 elements.
    pub scales: [u8; 8],
}
impl Block for BlockIq2Xs {
    const TYPE: GgmlType = GgmlType::IQ2_XS;
}
const _: () = assert!(std::mem::size_of::<BlockIq2Xs>() == GgmlType::IQ2_XS.type_size());

/// `block_iq2_s`: one [`GgmlType::IQ2_S`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq2S {
    /// Super-block scale.
    pub d: f16,
    /// 32 low bytes of grid indices, then 32 sign bytes.
    pub qs: [u8; 64],
    /// High 2 bits of the grid indices.
    pub qh: [u8; 8],
    /// Two 4-bit scales per 32 elements.
    pub scales: [u8; 8],
}
impl Block for BlockIq2S {
    const TYPE: GgmlType = GgmlType::IQ2_S;
}
const _: () = assert!(std::mem::size_of::<BlockIq2S>() == GgmlType::IQ2_S.type_size());

/// `block_iq3_xxs`: one [`GgmlType::IQ3_XXS`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq3Xxs {
    /// Super-block scale.
    pub d: f16,
    /// 64 grid indices, then 8 u32 of 4 x 7-bit sign indices and a 4-bit scale.
    pub qs: [u8; 96],
}
impl Block for BlockIq3Xxs {
    const TYPE: GgmlType = GgmlType::IQ3_XXS;
}
const _: () = assert!(std::mem::size_of::<BlockIq3Xxs>() == GgmlType::IQ3_XXS.type_size());

/// `block_iq3_s`: one [`GgmlType::IQ3_S`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq3S {
    /// Super-block scale.
    pub d: f16,
    /// Low 8 bits of the grid indices.
    pub qs: [u8; 64],
    /// Ninth bit of the grid indices.
    pub qh: [u8; 8],
    /// Sign bits.
    pub signs: [u8; 32],
    /// 4-bit scales, two per 64 elements.
    pub scales: [u8; 4],
}
impl Block for BlockIq3S {
    const TYPE: GgmlType = GgmlType::IQ3_S;
}
const _: () = assert!(std::mem::size_of::<BlockIq3S>() == GgmlType::IQ3_S.type_size());

/// `block_iq1_s`: one [`GgmlType::IQ1_S`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq1S {
    /// Super-block scale.
    pub d: f16,
    /// Low 8 bits of the grid indices.
    pub qs: [u8; 32],
    /// Per 32 elements: 4 x 3 high index bits, 3-bit scale, delta sign.
    pub qh: [u16; 8],
}
impl Block for BlockIq1S {
    const TYPE: GgmlType = GgmlType::IQ1_S;
}
const _: () = assert!(std::mem::size_of::<BlockIq1S>() == GgmlType::IQ1_S.type_size());

/// `block_iq1_m`: one [`GgmlType::IQ1_M`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq1M {
    /// Low 8 bits of the grid indices.
    pub qs: [u8; 32],
    /// 3 high index bits + delta sign bit per 8 elements.
    pub qh: [u8; 16],
    /// 3-bit sub-block scales; the f16 super-block scale is spread over the top nibbles.
    pub scales: [u8; 8],
}
impl Block for BlockIq1M {
    const TYPE: GgmlType = GgmlType::IQ1_M;
}
const _: () = assert!(std::mem::size_of::<BlockIq1M>() == GgmlType::IQ1_M.type_size());

/// `block_iq4_nl`: one [`GgmlType::IQ4_NL`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq4Nl {
    /// Scale.
    pub d: f16,
    /// 4-bit indices into `KVALUES_IQ4NL`.
    pub qs: [u8; 16],
}
impl Block for BlockIq4Nl {
    const TYPE: GgmlType = GgmlType::IQ4_NL;
}
const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == GgmlType::IQ4_NL.type_size());

/// `block_iq4_xs`: one [`GgmlType::IQ4_XS`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq4Xs {
    /// Super-block scale.
    pub d: f16,
    /// High 2 bits of the 8 x 6-bit scales.
    pub scales_h: u16,
    /// Low 4 bits of the 8 x 6-bit scales.
    pub scales_l: [u8; 4],
    /// 4-bit indices into `KVALUES_IQ4NL`.
    pub qs: [u8; 128],
}
impl Block for BlockIq4Xs {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
}
const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == GgmlType::IQ4_XS.type_size());

/// `block_tq1_0`: one [`GgmlType::TQ1_0`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockTq1_0 {
    /// 5 trits per byte (base-3, scaled to 256/243).
    pub qs: [u8; 48],
    /// 4 trits per byte.
    pub qh: [u8; 4],
    /// Scale.
    pub d: f16,
}
impl Block for BlockTq1_0 {
    const TYPE: GgmlType = GgmlType::TQ1_0;
}
const _: () = assert!(std::mem::size_of::<BlockTq1_0>() == GgmlType::TQ1_0.type_size());

/// `block_tq2_0`: one [`GgmlType::TQ2_0`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockTq2_0 {
    /// 2 bits per element, value - 1.
    pub qs: [u8; 64],
    /// Scale.
    pub d: f16,
}
impl Block for BlockTq2_0 {
    const TYPE: GgmlType = GgmlType::TQ2_0;
}
const _: () = assert!(std::mem::size_of::<BlockTq2_0>() == GgmlType::TQ2_0.type_size());

/// `block_mxfp4`: one [`GgmlType::MXFP4`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockMxfp4 {
    /// E8M0 shared exponent.
    pub e: u8,
    /// 4-bit E2M1 codes, index into `KVALUES_FP4`.
    pub qs: [u8; 16],
}
impl Block for BlockMxfp4 {
    const TYPE: GgmlType = GgmlType::MXFP4;
}
const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == GgmlType::MXFP4.type_size());

/// `block_nvfp4`: one [`GgmlType::NVFP4`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockNvfp4 {
    /// UE4M3 scales, one per 16 elements.
    pub d: [u8; 4],
    /// 4-bit E2M1 codes.
    pub qs: [u8; 32],
}
impl Block for BlockNvfp4 {
    const TYPE: GgmlType = GgmlType::NVFP4;
}
const _: () = assert!(std::mem::size_of::<BlockNvfp4>() == GgmlType::NVFP4.type_size());

/// `block_q1_0`: one [`GgmlType::Q1_0`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ1_0 {
    /// Scale.
    pub d: f16,
    /// Sign bits: 1 = +d, 0 = -d.
    pub qs: [u8; 16],
}
impl Block for BlockQ1_0 {
    const TYPE: GgmlType = GgmlType::Q1_0;
}
const _: () = assert!(std::mem::size_of::<BlockQ1_0>() == GgmlType::Q1_0.type_size());

/// `block_q2_0`: one [`GgmlType::Q2_0`] block (ggml-common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ2_0 {
    /// Scale.
    pub d: f16,
    /// 2-bit codes q, value d * (q - 1).
    pub qs: [u8; 16],
}
impl Block for BlockQ2_0 {
    const TYPE: GgmlType = GgmlType::Q2_0;
}
const _: () = assert!(std::mem::size_of::<BlockQ2_0>() == GgmlType::Q2_0.type_size());
