//! The tensor front: front ops on Vulkan against the same ops on candle's CPU tensors
//! (views, copies, broadcast binary ops, unary ops, dtype conversion, reductions,
//! matmul, indexing, random fills) and the errors they give.

mod common;
use common::{flat, max_diff, values, vulkan_device};

use candle_core::{DType, Device as Cpu, Tensor as CTensor};
use vkml_candle::front::Tensor;
use vkml_candle::vulkan::VulkanStorage;

type VTensor = Tensor<VulkanStorage>;

#[test]
fn front_ops_match_candle_cpu() {
    let dev = vulkan_device();
    let a_data = values(2 * 3 * 8, 1);
    let b_data = values(8, 2);
    let a = VTensor::from_slice(&a_data, (2, 3, 8), &dev).unwrap();
    let b = VTensor::from_slice(&b_data, 8, &dev).unwrap();
    let ca = CTensor::from_vec(a_data.clone(), (2, 3, 8), &Cpu::Cpu).unwrap();
    let cb = CTensor::from_vec(b_data.clone(), 8, &Cpu::Cpu).unwrap();

    // Round trip through candle.
    assert_eq!(a.to_vec::<f32>().unwrap(), a_data);
    let back = VTensor::from_candle(&ca.transpose(0, 2).unwrap(), &dev).unwrap();
    assert_eq!(back.dims(), &[8, 3, 2]);
    assert_eq!(back.to_vec::<f32>().unwrap(), flat(&ca.transpose(0, 2).unwrap()));

    // Views and copies are exact.
    let v = a.narrow(2, 3, 4).unwrap().transpose(0, 1).unwrap();
    let cv = ca.narrow(2, 3, 4).unwrap().transpose(0, 1).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), flat(&cv));
    assert_eq!(v.contiguous().unwrap().reshape((6, 4)).unwrap().to_vec::<f32>().unwrap(), flat(&cv));

    // Element-wise f32 arithmetic is exact (one rounding, as on the CPU).
    let s = a.broadcast_add(&b).unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), flat(&ca.broadcast_add(&cb).unwrap()));
    let m = a.transpose(1, 2).unwrap().mul(&a.transpose(1, 2).unwrap()).unwrap();
    assert_eq!(m.to_vec::<f32>().unwrap(), flat(&ca.transpose(1, 2).unwrap().sqr().unwrap()));
    let af = a.affine(0.5, -1.25).unwrap();
    assert_eq!(af.to_vec::<f32>().unwrap(), flat(&ca.affine(0.5, -1.25).unwrap()));

    // silu uses exp: within a few f32 ulps of candle's.
    let si = a.narrow(1, 1, 2).unwrap().silu().unwrap();
    let want = flat(&candle_nn::ops::silu(&ca.narrow(1, 1, 2).unwrap()).unwrap());
    assert!(max_diff(&si.to_vec::<f32>().unwrap(), &want) <= 1e-6, "silu");

    // f32 -> f16 rounds to nearest even, as half does.
    let h = a.to_dtype(DType::F16).unwrap();
    let want: Vec<half::f16> = a_data.iter().map(|&x| half::f16::from_f32(x)).collect();
    assert_eq!(h.to_vec::<half::f16>().unwrap(), want);
}

/// The same sequence of front ops (candle's method names) on a device: results as f32,
/// labelled. Generic over the storage, so it runs on Vulkan and on candle's CPU.
fn more_front_ops<S>(dev: &S::Device) -> Vec<(&'static str, Vec<f32>)>
where
    S: candle_core::backend::BackendStorage,
    S::Device: candle_core::backend::BackendDevice<Storage = S>,
{
    let a = Tensor::<S>::from_slice(&values(2 * 3 * 8, 3), (2, 3, 8), dev).unwrap();
    let b = Tensor::<S>::from_slice(&values(2 * 8 * 5, 4), (2, 8, 5), dev).unwrap();
    let row = Tensor::<S>::from_slice(&values(8, 5), (1, 1, 8), dev).unwrap();
    let f = |t: Tensor<S>| t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let ids = Tensor::<S>::from_slice(&[2u32, 0, 1, 2], 4, dev).unwrap();
    let img = a.reshape((2, 1, 3, 8)).unwrap();
    vec![
        ("matmul", f(a.matmul(&b).unwrap())),
        ("matmul of a transposed view", f(b.t().unwrap().matmul(&a.t().unwrap()).unwrap())),
        ("broadcast_matmul", f(a.broadcast_matmul(&b.narrow(0, 0, 1).unwrap()).unwrap())),
        ("broadcast_sub", f(a.broadcast_sub(&row).unwrap())),
        ("broadcast_div", f(a.broadcast_div(&row.abs().unwrap().affine(1.0, 0.5).unwrap()).unwrap())),
        ("maximum", f(a.maximum(&a.neg().unwrap()).unwrap())),
        ("exp", f(a.exp().unwrap())),
        ("tanh", f(a.tanh().unwrap())),
        ("sqrt of abs", f(a.abs().unwrap().sqrt().unwrap())),
        ("powf", f(a.abs().unwrap().powf(1.5).unwrap())),
        ("gt", f(a.gt(&a.permute(&[0, 1, 2]).unwrap().neg().unwrap()).unwrap())),
        ("where_cond", f(a.ge(&a.sqr().unwrap()).unwrap().where_cond(&a, &a.exp().unwrap()).unwrap())),
        ("sum_keepdim", f(a.sum_keepdim(2).unwrap())),
        ("max", f(a.max(1).unwrap())),
        ("argmin", f(a.argmin(2).unwrap())),
        ("mean_keepdim", f(a.mean_keepdim(0).unwrap())),
        ("sum over two dims", f(a.reduce(candle_core::op::ReduceOp::Sum, &[0, 2], false).unwrap())),
        ("index_select", f(a.index_select(&ids, 2).unwrap())),
        ("gather", f(a.gather(&Tensor::<S>::from_slice(&[1u32, 0, 2, 2, 1, 0], (2, 3, 1), dev).unwrap(), 2).unwrap())),
        ("unsqueeze / squeeze", f(a.unsqueeze(1).unwrap().squeeze(1).unwrap().t().unwrap().contiguous().unwrap())),
        ("full", f(Tensor::<S>::full(2.5, (2, 2), DType::F16, dev).unwrap())),
        ("avg_pool2d", f(img.avg_pool2d_with_stride((2, 2), (1, 2)).unwrap())),
        ("max_pool2d", f(img.max_pool2d_with_stride((3, 3), (1, 1)).unwrap())),
        ("upsample_nearest2d", f(img.upsample_nearest2d(5, 11).unwrap())),
    ]
}

/// The same ops through `candle_core::Tensor` on candle's CPU: the reference for
/// [`more_front_ops`] (its shapes and index logic are the front's own, so they are checked
/// against candle's, not against the front on another storage).
fn candle_ops() -> Vec<(&'static str, Vec<f32>)> {
    let a = CTensor::from_vec(values(2 * 3 * 8, 3), (2, 3, 8), &Cpu::Cpu).unwrap();
    let b = CTensor::from_vec(values(2 * 8 * 5, 4), (2, 8, 5), &Cpu::Cpu).unwrap();
    let row = CTensor::from_vec(values(8, 5), (1, 1, 8), &Cpu::Cpu).unwrap();
    let f = |t: CTensor| flat(&t.to_dtype(DType::F32).unwrap());
    let ids = CTensor::new(&[2u32, 0, 1, 2], &Cpu::Cpu).unwrap();
    let img = a.reshape((2, 1, 3, 8)).unwrap();
    let gids = CTensor::from_vec(vec![1u32, 0, 2, 2, 1, 0], (2, 3, 1), &Cpu::Cpu).unwrap();
    vec![
        ("matmul", f(a.matmul(&b).unwrap())),
        ("matmul of a transposed view", f(b.t().unwrap().matmul(&a.t().unwrap()).unwrap())),
        ("broadcast_matmul", f(a.broadcast_matmul(&b.narrow(0, 0, 1).unwrap()).unwrap())),
        ("broadcast_sub", f(a.broadcast_sub(&row).unwrap())),
        ("broadcast_div", f(a.broadcast_div(&row.abs().unwrap().affine(1.0, 0.5).unwrap()).unwrap())),
        ("maximum", f(a.maximum(&a.neg().unwrap()).unwrap())),
        ("exp", f(a.exp().unwrap())),
        ("tanh", f(a.tanh().unwrap())),
        ("sqrt of abs", f(a.abs().unwrap().sqrt().unwrap())),
        ("powf", f(a.abs().unwrap().powf(1.5).unwrap())),
        ("gt", f(a.gt(&a.neg().unwrap()).unwrap())),
        ("where_cond", f(a.ge(&a.sqr().unwrap()).unwrap().where_cond(&a, &a.exp().unwrap()).unwrap())),
        ("sum_keepdim", f(a.sum_keepdim(2).unwrap())),
        ("max", f(a.max(1).unwrap())),
        ("argmin", f(a.argmin(2).unwrap())),
        ("mean_keepdim", f(a.mean_keepdim(0).unwrap())),
        ("sum over two dims", f(a.sum((0, 2)).unwrap())),
        ("index_select", f(a.index_select(&ids, 2).unwrap())),
        ("gather", f(a.gather(&gids, 2).unwrap())),
        ("unsqueeze / squeeze", f(a.unsqueeze(1).unwrap().squeeze(1).unwrap().t().unwrap().contiguous().unwrap())),
        ("full", f(CTensor::full(half::f16::from_f32(2.5), (2, 2), &Cpu::Cpu).unwrap())),
        ("avg_pool2d", f(img.avg_pool2d_with_stride((2, 2), (1, 2)).unwrap())),
        ("max_pool2d", f(img.max_pool2d_with_stride((3, 3), (1, 1)).unwrap())),
        ("upsample_nearest2d", f(img.upsample_nearest2d(5, 11).unwrap())),
    ]
}

/// The front's candle-named methods on Vulkan give candle's results (`candle_core::Tensor`
/// on the CPU): the same shapes, and values within the rounding of matmul and the
/// device's transcendental functions (1e-5 of the largest value).
#[test]
fn more_front_ops_match_cpu() {
    let gpu = more_front_ops::<VulkanStorage>(&vulkan_device());
    let cpu = candle_ops();
    assert_eq!(gpu.len(), cpu.len());
    for ((name, g), (cname, c)) in gpu.iter().zip(&cpu) {
        assert_eq!(name, cname);
        assert_eq!(g.len(), c.len(), "{name}: length");
        let scale = c.iter().fold(1f32, |m, x| m.max(x.abs()));
        let d = max_diff(g, c);
        assert!(d <= 1e-5 * scale, "{name}: max difference {d} (scale {scale})");
    }
    // A random fill on the front: in range, reproducible from the seed.
    let dev = vulkan_device();
    candle_core::backend::BackendDevice::set_seed(&dev, 11).unwrap();
    let r1 = VTensor::rand(-1.0, 1.0, 1000, DType::F32, &dev).unwrap().to_vec::<f32>().unwrap();
    candle_core::backend::BackendDevice::set_seed(&dev, 11).unwrap();
    let r2 = VTensor::rand(-1.0, 1.0, 1000, DType::F32, &dev).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(r1, r2);
    assert!(r1.iter().all(|x| (-1.0..1.0).contains(x)));
    let n = VTensor::randn(0.0, 1.0, 1000, DType::F32, &dev).unwrap().to_vec::<f32>().unwrap();
    let mean = n.iter().sum::<f32>() / 1000.0;
    assert!(mean.abs() < 0.2, "randn mean {mean}");
}

#[test]
fn front_errors_name_the_problem() {
    let dev = vulkan_device();
    let a = VTensor::from_slice(&values(6, 3), (2, 3), &dev).unwrap();
    let b = VTensor::from_slice(&values(4, 4), (2, 2), &dev).unwrap();
    let e = a.add(&b).unwrap_err().to_string();
    assert!(e.contains("shape mismatch"), "{e}");
    let e = a.broadcast_add(&b).unwrap_err().to_string();
    assert!(e.contains("shape mismatch in add"), "{e}");
    let e = VTensor::from_slice(&[1f32, 2.0], (3,), &dev).unwrap_err().to_string();
    assert!(e.contains("Shape mismatch, got buffer of size 2"), "{e}");
    // I16 is held as bytes only: arithmetic on it is an error naming dtype and op.
    let i = VTensor::from_slice(&[1i16, 2], 2, &dev).unwrap();
    let e = i.silu().unwrap_err().to_string();
    assert!(e.contains("I16") && e.contains("silu"), "{e}");
}
