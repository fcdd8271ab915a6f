//! [`GgmlType`]: every tensor type a GGUF file can name, by its GGUF id.
//!
//! Source: ggml `include/ggml.h` (`enum ggml_type`), block sizes and byte sizes from
//! `src/ggml-common.h` (`QK*` and `block_*` static asserts) and gguf-py
//! `gguf/constants.py` (`GGML_QUANT_SIZES`), checked against ggml-org/ggml d99724f2
//! (2026-08). That ggml also defines NVFP4 = 40, Q1_0 = 41 and Q2_0 = 42 (the first two are in
//! gguf-py 0.19 as well), so they are included.

use std::fmt;

/// Super-block size of the k-quants and i-quants (`QK_K` in ggml-common.h).
pub const QK_K: usize = 256;

/// Error returned by `GgmlType::try_from(u32)` for an id that ggml does not define
/// (ids 4, 5 and 31..=33, 36..=38 were removed from GGUF; anything >= 43 is unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown GGML type id {0}")]
pub struct UnknownGgmlType(pub u32);

macro_rules! ggml_types {
    ($( $(#[$doc:meta])* $name:ident = $id:literal, $str:literal, $blck:expr, $bytes:expr; )*) => {
        /// A GGML tensor element type, numbered by its GGUF id (`enum ggml_type` in ggml.h).
        ///
        /// Quantized types store `block_size()` elements in `type_size()` bytes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        #[allow(non_camel_case_types)]
        pub enum GgmlType {
            $( $(#[$doc])* $name = $id, )*
        }

        impl GgmlType {
            /// Every type, in id order.
            pub const ALL: &'static [GgmlType] = &[ $( GgmlType::$name, )* ];

            /// The GGUF id of the type (`ggml_type` value).
            pub const fn id(self) -> u32 {
                self as u32
            }

            /// Lower-case name as ggml prints it (`ggml_type_name`), e.g. `"q4_k"`.
            pub const fn name(self) -> &'static str {
                match self { $( GgmlType::$name => $str, )* }
            }

            /// Number of elements in one block (`blck_size` in ggml's type traits).
            pub const fn block_size(self) -> usize {
                match self { $( GgmlType::$name => $blck, )* }
            }

            /// Number of bytes in one block (`type_size` in ggml's type traits).
            pub const fn type_size(self) -> usize {
                match self { $( GgmlType::$name => $bytes, )* }
            }
        }

        impl TryFrom<u32> for GgmlType {
            type Error = UnknownGgmlType;
            /// Maps a GGUF type id to the type; unknown or removed ids give [`UnknownGgmlType`].
            fn try_from(id: u32) -> Result<Self, Self::Error> {
                match id {
                    $( $id => Ok(GgmlType::$name), )*
                    other => Err(UnknownGgmlType(other)),
                }
            }
        }
    };
}

ggml_types! {
    /// 32-bit IEEE float.
    F32 = 0, "f32", 1, 4;
    /// 16-bit IEEE half float.
    F16 = 1, "f16", 1, 2;
    /// 32 x 4-bit, scale `d` (f16): `x = d * (q - 8)`.
    Q4_0 = 2, "q4_0", 32, 18;
    /// 32 x 4-bit, scale `d` and min `m` (f16): `x = d * q + m`.
    Q4_1 = 3, "q4_1", 32, 20;
    /// 32 x 5-bit, scale `d`: `x = d * (q - 16)`.
    Q5_0 = 6, "q5_0", 32, 22;
    /// 32 x 5-bit, scale `d` and min `m`: `x = d * q + m`.
    Q5_1 = 7, "q5_1", 32, 24;
    /// 32 x int8, scale `d`: `x = d * q`.
    Q8_0 = 8, "q8_0", 32, 34;
    /// 32 x int8, scale `d` and `s = d * sum(q)` (activation format). 36 bytes as in ggml's
    /// `block_q8_1` (two f16 + 32 x i8); gguf-py 0.19's `GGML_QUANT_SIZES` still lists 40
    /// (an old layout with f32 `d` and `s`), ggml wins.
    Q8_1 = 9, "q8_1", 32, 36;
    /// k-quant, 2.625 bits per weight.
    Q2_K = 10, "q2_K", QK_K, 84;
    /// k-quant, 3.4375 bits per weight.
    Q3_K = 11, "q3_K", QK_K, 110;
    /// k-quant, 4.5 bits per weight.
    Q4_K = 12, "q4_K", QK_K, 144;
    /// k-quant, 5.5 bits per weight.
    Q5_K = 13, "q5_K", QK_K, 176;
    /// k-quant, 6.5625 bits per weight.
    Q6_K = 14, "q6_K", QK_K, 210;
    /// 256 x int8 with f32 scale and 16 group sums (activation format for k-quant dots).
    Q8_K = 15, "q8_K", QK_K, 292;
    /// i-quant, 2.0625 bits per weight.
    IQ2_XXS = 16, "iq2_xxs", QK_K, 66;
    /// i-quant, 2.3125 bits per weight.
    IQ2_XS = 17, "iq2_xs", QK_K, 74;
    /// i-quant, 3.0625 bits per weight.
    IQ3_XXS = 18, "iq3_xxs", QK_K, 98;
    /// i-quant, 1.5625 bits per weight.
    IQ1_S = 19, "iq1_s", QK_K, 50;
    /// Non-linear 4-bit code book, blocks of 32.
    IQ4_NL = 20, "iq4_nl", 32, 18;
    /// i-quant, 3.4375 bits per weight.
    IQ3_S = 21, "iq3_s", QK_K, 110;
    /// i-quant, 2.5625 bits per weight.
    IQ2_S = 22, "iq2_s", QK_K, 82;
    /// Non-linear 4-bit code book with 6-bit sub-block scales, 4.25 bits per weight.
    IQ4_XS = 23, "iq4_xs", QK_K, 136;
    /// 8-bit signed integer.
    I8 = 24, "i8", 1, 1;
    /// 16-bit signed integer.
    I16 = 25, "i16", 1, 2;
    /// 32-bit signed integer.
    I32 = 26, "i32", 1, 4;
    /// 64-bit signed integer.
    I64 = 27, "i64", 1, 8;
    /// 64-bit IEEE float.
    F64 = 28, "f64", 1, 8;
    /// i-quant, 1.75 bits per weight.
    IQ1_M = 29, "iq1_m", QK_K, 56;
    /// bfloat16.
    BF16 = 30, "bf16", 1, 2;
    /// Ternary, 1.6875 bits per weight (base-3 packing).
    TQ1_0 = 34, "tq1_0", QK_K, 54;
    /// Ternary, 2.0625 bits per weight (2-bit packing).
    TQ2_0 = 35, "tq2_0", QK_K, 66;
    /// OCP microscaling FP4: 32 x E2M1 with one E8M0 exponent.
    MXFP4 = 39, "mxfp4", 32, 17;
    /// NVIDIA FP4: 64 x E2M1 with four UE4M3 sub-block scales.
    NVFP4 = 40, "nvfp4", 64, 36;
    /// 1-bit sign quantization: 128 x 1 bit with f16 scale.
    Q1_0 = 41, "q1_0", 128, 18;
    /// 2-bit quantization: 64 x 2 bit with f16 scale: `x = d * (q - 1)`.
    Q2_0 = 42, "q2_0", 64, 18;
}

impl GgmlType {
    /// True for block-quantized types (block size > 1).
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes needed for `n_elements` elements in a row, or `None` if `n_elements` is not a
    /// multiple of the block size or the result overflows (`ggml_row_size`).
    pub fn row_size(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size() as u64)
    }

    /// Looks a type up by its ggml name (case-insensitive), e.g. `"Q4_K"` or `"q4_k"`.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        Self::ALL.iter().copied().find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Upper-case, GGML's own spelling of the enum (Q4_K, IQ2_XXS, F32).
        f.write_str(&self.name().to_ascii_uppercase())
    }
}
