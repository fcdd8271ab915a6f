//! A candle-style transformer MLP block written once and run twice: generic over the
//! storage of vkml's tensor front, on candle's own CPU backend (`CpuStorage`) and on Vulkan
//! (`VulkanStorage`) with the same weights, outputs compared; then the same block with
//! GGML-quantized weights, candle's `QTensor`s crossing to the device
//! (`vkml_candle::quantized::QMatMul`, `vkml_candle::nn::ops::rms_norm`) against candle's
//! CPU `QMatMul` and candle-nn's `rms_norm`.
//!
//! `cargo run --release -p vkml-candle --example mlp_block` (device per `VKML_DEVICE`,
//! else the best; `VK_DRIVER_FILES=.../lvp_icd.x86_64.json` for lavapipe).

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::cpu_backend::CpuDevice;
use candle_core::quantized::{GgmlDType, QMatMul as CpuQMatMul, QTensor as CpuQTensor};
use candle_core::{CpuStorage, DType, Device, Module, Result, Tensor as CpuTensor};
use vkml_candle::front::Tensor;
use vkml_candle::quantized::{QMatMul, QTensor};
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};

/// `x + down(silu(gate(n)) * up(n))` with `n = rms_norm(x) * w_norm`: candle's method names,
/// any storage. `x: [t, d]`, `w_gate`, `w_up: [d, f]`, `w_down: [f, d]`, `w_norm: [d]`.
fn mlp_block<S: BackendStorage>(x: &Tensor<S>, w: &[Tensor<S>; 4]) -> Result<Tensor<S>>
where
    S::Device: BackendDevice<Storage = S>,
{
    let [w_norm, w_gate, w_up, w_down] = w;
    let d = x.dims()[1] as f64;
    let ms = x.sqr()?.sum_keepdim(1)?.affine(1.0 / d, 1e-5)?;
    let n = x.broadcast_div(&ms.sqrt()?)?.broadcast_mul(w_norm)?;
    let h = n.matmul(w_gate)?.silu()?.mul(&n.matmul(w_up)?)?;
    x.add(&h.matmul(w_down)?)
}

fn largest_difference(a: &CpuTensor, b: &CpuTensor) -> Result<f32> {
    (a - b)?.abs()?.max_all()?.to_scalar::<f32>()
}

fn main() -> Result<()> {
    let vk = VulkanDevice::new(0)?;
    let (t, d, f) = (4, 256, 512);
    // Seeded values in [-1, 1) (the same run after run).
    let mut state = 0x5EED_u64;
    let mut uniform = |n: usize, scale: f32, shift: f32, dims: &[usize]| {
        let v: Vec<f32> = (0..n)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale + shift
            })
            .collect();
        CpuTensor::from_vec(v, dims, &Device::Cpu)
    };
    let x = uniform(t * d, 1.7, 0.0, &[t, d])?;
    let weights = [
        uniform(d, 0.2, 1.0, &[d])?,
        uniform(d * f, 1.7 / (d as f32).sqrt(), 0.0, &[d, f])?,
        uniform(d * f, 1.7 / (d as f32).sqrt(), 0.0, &[d, f])?,
        uniform(f * d, 1.7 / (f as f32).sqrt(), 0.0, &[f, d])?,
    ];

    // The same function on candle's CPU storage and on Vulkan.
    let on = |x: &CpuTensor| -> Result<(Tensor<CpuStorage>, Tensor<VulkanStorage>)> {
        Ok((Tensor::from_candle(x, &CpuDevice)?, Tensor::from_candle(x, &vk)?))
    };
    let (cx, gx) = on(&x)?;
    let mut cw = Vec::new();
    let mut gw = Vec::new();
    for w in &weights {
        let (c, g) = on(w)?;
        cw.push(c);
        gw.push(g);
    }
    let cw: [Tensor<CpuStorage>; 4] = cw.try_into().expect("four weights");
    let gw: [Tensor<VulkanStorage>; 4] = gw.try_into().expect("four weights");
    let cpu = mlp_block(&cx, &cw)?.to_candle()?;
    let gpu = mlp_block(&gx, &gw)?.to_candle()?;
    let diff = largest_difference(&gpu, &cpu)?;
    println!("MLP block {:?} on {vk:?}: largest difference from candle's CPU {diff:.2e}", cpu.dims());
    assert!(diff < 1e-3, "the block on Vulkan differs from candle's CPU by {diff}");

    // Quantized: candle's QTensors (Q4_K, weights as [out, in]) on the device, candle's
    // QMatMul and candle-nn's rms_norm on the CPU.
    let q = |w: &CpuTensor| CpuQTensor::quantize(&w.t()?.contiguous()?, GgmlDType::Q4K);
    let (qg, qu, qd) = (&weights[1], &weights[2], &weights[3]);
    let n = candle_nn::ops::rms_norm(&x, &weights[0], 1e-5)?;
    let cpu_mm = |w: &CpuTensor| CpuQMatMul::from_qtensor(q(w)?);
    let h = cpu_mm(qg)?.forward(&n)?.silu()?.mul(&cpu_mm(qu)?.forward(&n)?)?;
    let cpu = (&x + cpu_mm(qd)?.forward(&h)?)?;
    // The same blocks (quantizing is deterministic) on the device.
    let vmm = |w: &CpuTensor| -> Result<QMatMul> { Ok(QMatMul::from_qtensor(QTensor::from_candle(&q(w)?, &vk)?)) };
    let (gx, gnorm) = (Tensor::<VulkanStorage>::from_candle(&x, &vk)?, Tensor::from_candle(&weights[0], &vk)?);
    let gn = vkml_candle::nn::ops::rms_norm(&gx, &gnorm, 1e-5)?;
    let gh = vmm(qg)?.forward(&gn)?.silu()?.mul(&vmm(qu)?.forward(&gn)?)?;
    let gpu = gx.add(&vmm(qd)?.forward(&gh)?)?.to_candle()?;
    let scale = cpu.abs()?.max_all()?.to_scalar::<f32>()?;
    let diff = largest_difference(&gpu, &cpu)?;
    println!(
        "Q4_K MLP block on {vk:?}: largest difference from candle's CPU QMatMul {diff:.2e} of {scale:.2} \
         (candle's CPU rounds x to Q8_K blocks, vkml multiplies f32 x)"
    );
    assert!(diff < 0.03 * scale, "the quantized block differs from candle's CPU by {diff}");
    assert_eq!(gpu.dtype(), DType::F32);
    Ok(())
}
