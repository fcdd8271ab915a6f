//! Tensor ops on the GPU and back to candle: a candle tensor crosses to Vulkan, runs a
//! matmul, a broadcast add and a SiLU there (candle's method names), and comes back as a
//! candle tensor, checked against the same ops on candle's CPU.
//!
//! `cargo run --release -p vkml-candle --example tensor_ops` (device per `VKML_DEVICE`,
//! else the best; `VK_DRIVER_FILES=.../lvp_icd.x86_64.json` for lavapipe).

use candle_core::backend::BackendDevice;
use candle_core::{Device, Tensor as CpuTensor};
use vkml_candle::front::Tensor;
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};

fn main() -> candle_core::Result<()> {
    let dev = VulkanDevice::new(0)?;
    let x = CpuTensor::randn(0f32, 1.0, (4, 64), &Device::Cpu)?;
    let w = CpuTensor::randn(0f32, 1.0, (64, 32), &Device::Cpu)?;
    let b = CpuTensor::randn(0f32, 1.0, 32, &Device::Cpu)?;

    // To the GPU, compute there, and back.
    let (gx, gw, gb) = (
        Tensor::<VulkanStorage>::from_candle(&x, &dev)?,
        Tensor::<VulkanStorage>::from_candle(&w, &dev)?,
        Tensor::<VulkanStorage>::from_candle(&b, &dev)?,
    );
    let gy = gx.matmul(&gw)?.broadcast_add(&gb)?.silu()?;
    let y = gy.to_candle()?;

    // The same on candle's CPU.
    let want = candle_nn::ops::silu(&x.matmul(&w)?.broadcast_add(&b)?)?;
    let diff = (y - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
    println!("silu(x·w + b) on {dev:?}: {:?}, largest difference from candle's CPU {diff:.2e}", want.dims());
    assert!(diff < 1e-4, "the GPU result differs from the CPU's by {diff}");
    Ok(())
}
