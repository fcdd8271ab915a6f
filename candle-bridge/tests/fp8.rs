//! F8E4M3 on Vulkan: conversions to and from F32, F16, BF16 (and the other dtypes through
//! F32) give the bits of candle's CPU (crate float8): all 256 bytes decoded, and encoding
//! of every E4M3 value, each midpoint between neighbours (ties to even) and values just
//! beside them, the subnormal and zero boundaries, saturation past 464, infinities, NaNs
//! and random values; a strided view; what has no kernel is a clear error.

mod common;
use common::vulkan_device;

use candle_core::{DType, Device as Cpu, Tensor as CTensor};
use vkml_candle::front::Tensor;
use vkml_candle::vulkan::VulkanStorage;

type VTensor = Tensor<VulkanStorage>;

fn bits(t: &CTensor) -> Vec<u64> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::F32 => t.to_vec1::<f32>().unwrap().iter().map(|v| u64::from(v.to_bits())).collect(),
        DType::F16 => t.to_vec1::<half::f16>().unwrap().iter().map(|v| u64::from(v.to_bits())).collect(),
        DType::BF16 => t.to_vec1::<half::bf16>().unwrap().iter().map(|v| u64::from(v.to_bits())).collect(),
        DType::F8E4M3 => t.to_vec1::<float8::F8E4M3>().unwrap().iter().map(|v| u64::from(v.to_bits())).collect(),
        DType::U8 => t.to_vec1::<u8>().unwrap().iter().map(|&v| u64::from(v)).collect(),
        DType::I64 => t.to_vec1::<i64>().unwrap().iter().map(|&v| v as u64).collect(),
        other => panic!("{other:?}"),
    }
}

/// Every E4M3 byte as a candle CPU F8E4M3 tensor.
fn all_bytes() -> CTensor {
    let v: Vec<float8::F8E4M3> = (0..=255u8).map(float8::F8E4M3::from_bits).collect();
    CTensor::from_vec(v, 256, &Cpu::Cpu).unwrap()
}

#[test]
fn every_e4m3_byte_decodes_as_candle_does() {
    let dev = vulkan_device();
    let c = all_bytes();
    let g = VTensor::from_candle(&c, &dev).unwrap();
    for dt in [DType::F32, DType::F16, DType::BF16, DType::U8, DType::I64] {
        let want = c.to_dtype(dt).unwrap();
        let got = g.to_dtype(dt).unwrap().to_candle().unwrap();
        assert_eq!(bits(&got), bits(&want), "F8E4M3 -> {dt:?}");
    }
    // A strided view: every other byte, reversed.
    let cv = c.reshape((128, 2)).unwrap().t().unwrap();
    let gv = g.reshape((128, 2)).unwrap().t().unwrap();
    assert_eq!(bits(&gv.to_dtype(DType::F32).unwrap().to_candle().unwrap()), bits(&cv.to_dtype(DType::F32).unwrap()));
}

#[test]
fn encoding_rounds_saturates_and_keeps_nans_as_candle_does() {
    let dev = vulkan_device();
    // Every finite E4M3 value, the midpoints between neighbours and a hair either side.
    let values: Vec<f32> = (0..=126u8).map(|b| float8::F8E4M3::from_bits(b).to_f32()).collect::<Vec<f32>>();
    let mut xs = Vec::new();
    for w in values.windows(2) {
        let mid = (w[0] + w[1]) / 2.0;
        xs.extend([w[0], mid, f32::from_bits(mid.to_bits() - 1), f32::from_bits(mid.to_bits() + 1)]);
    }
    xs.extend([
        448.0,
        464.0,
        f32::from_bits(464f32.to_bits() + 1),
        480.0,
        1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        0.0,
        -0.0,
        2f32.powi(-10),
        f32::from_bits(2f32.powi(-10).to_bits() + 1),
        1e-40,
        -1e-40,
        2f32.powi(-9) * 1.5,
    ]);
    let mut seed = 7u64;
    for _ in 0..4000 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let u = (seed >> 40) as f32 / (1u64 << 24) as f32;
        xs.push((u - 0.5) * 2f32.powi((seed % 24) as i32 - 12));
    }
    let signed: Vec<f32> = xs.iter().flat_map(|&x| [x, -x]).collect();
    let c = CTensor::from_vec(signed.clone(), signed.len(), &Cpu::Cpu).unwrap();
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let cd = c.to_dtype(dt).unwrap();
        let want = cd.to_dtype(DType::F8E4M3).unwrap();
        let got = VTensor::from_candle(&cd, &dev).unwrap().to_dtype(DType::F8E4M3).unwrap().to_candle().unwrap();
        let (g, w) = (bits(&got), bits(&want));
        let bad: Vec<_> = (0..g.len()).filter(|&i| g[i] != w[i]).take(5).map(|i| (signed[i], g[i], w[i])).collect();
        assert!(bad.is_empty(), "{dt:?} -> F8E4M3: (x, got, want) {bad:?}");
    }
    // And back through F32: every byte but the NaNs (0x7F, 0xFF: the sign is dropped) returns.
    let g = VTensor::from_candle(&all_bytes(), &dev).unwrap();
    let back = bits(&g.to_dtype(DType::F32).unwrap().to_dtype(DType::F8E4M3).unwrap().to_candle().unwrap());
    for (b, got) in back.iter().enumerate() {
        let want = if b & 0x7F == 0x7F { 0x7F } else { b as u64 };
        assert_eq!(*got, want, "byte {b:#04x} through F32");
    }
}

/// `full` of F8E4M3 (a contiguous fill, and a strided view set through the byte kernel)
/// holds candle's encoding of the value.
#[test]
fn full_of_f8e4m3_holds_candles_bits() {
    let dev = vulkan_device();
    for (v, dims) in [(1.0f64, vec![7usize]), (-3.3, vec![4, 8]), (500.0, vec![3])] {
        let got = VTensor::full(v, dims.as_slice(), DType::F8E4M3, &dev).unwrap().to_candle().unwrap();
        let want = CTensor::full(float8::F8E4M3::from_f64(v), dims.as_slice(), &Cpu::Cpu).unwrap();
        assert_eq!(bits(&got), bits(&want), "full({v})");
    }
}

#[test]
fn what_has_no_kernel_is_a_clear_error() {
    let dev = vulkan_device();
    let x = VTensor::from_slice(&[1.0f64, 2.0], 2, &dev).unwrap();
    let e = x.to_dtype(DType::F8E4M3).unwrap_err().to_string();
    assert!(e.contains("F64 to F8E4M3"), "{e}");
    let g = VTensor::from_candle(&all_bytes().narrow(0, 0, 4).unwrap().reshape((2, 2)).unwrap(), &dev).unwrap();
    let e = g.matmul(&g).unwrap_err().to_string();
    assert!(e.contains("matmul of F8E4M3") && e.contains("convert to F16 or BF16"), "{e}");
}
