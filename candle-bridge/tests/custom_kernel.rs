//! A user's GLSL kernel on tensors (`VulkanDevice::register_kernel`, `CustomKernel::run`):
//! inside a sequence of front ops (a strided view in, its output read by the next op,
//! nothing waited for in between) it gives the CPU's values; kernels whose interface does
//! not fit the call are refused, naming the problem.

mod common;
use common::{values, vulkan_device};

use candle_core::{DType, Shape};
use vkml_candle::front::Tensor;
use vkml_candle::vulkan::VulkanStorage;
use vkml_hal::shader::Glsl;
use vkml_hal::PipelineOptions;

type VTensor = Tensor<VulkanStorage>;

const AXPY: &[u8] = br#"
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Y { float y[]; };
layout(std430, binding = 2) writeonly buffer Z { float z[]; };
layout(push_constant) uniform P { uint n; float a; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) z[i] = p.a * x[i] + y[i];
}
"#;

fn push(n: u32, a: f32) -> Vec<u8> {
    [n.to_le_bytes(), a.to_le_bytes()].concat()
}

#[test]
fn a_custom_kernel_runs_on_tensors_between_front_ops() {
    let dev = vulkan_device();
    let k = dev.register_kernel("test_axpy", &Glsl::new(), AXPY, &PipelineOptions::default()).unwrap();
    let av = values(32, 5);
    let a = VTensor::from_slice(&av, (4, 8), &dev).unwrap();
    // A strided input (the transposed view) and one a front op has just recorded.
    let at = a.t().unwrap();
    let b = at.affine(2.0, 1.0).unwrap();
    let z = k.run(&[&at, &b], &[(Shape::from((8, 4)), DType::F32)], &push(32, 0.5), [1, 1, 1]).unwrap();
    let z = z.into_iter().next().unwrap();
    let w = z.add(&b).unwrap();
    let got = w.to_vec::<f32>().unwrap();
    let want: Vec<f32> = (0..8)
        .flat_map(|r| (0..4).map(move |c| (r, c)))
        .map(|(r, c)| {
            let x = av[c * 8 + r];
            let y = 2.0 * x + 1.0;
            0.5 * x + y + y
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(w.dims(), &[8, 4]);
}

#[test]
fn kernels_that_do_not_fit_the_call_are_refused() {
    let dev = vulkan_device();
    let k = dev.register_kernel("test_axpy2", &Glsl::new(), AXPY, &PipelineOptions::default()).unwrap();
    let x = VTensor::from_slice(&values(8, 1), 8, &dev).unwrap();
    let out = [(Shape::from(8), DType::F32)];
    let e = k.run(&[&x], &out, &push(8, 1.0), [1, 1, 1]).unwrap_err().to_string();
    assert!(e.contains("3 bindings, not 1 inputs + 1 outputs"), "{e}");
    let e = k.run(&[&x, &x], &out, &[0u8; 4], [1, 1, 1]).unwrap_err().to_string();
    assert!(e.contains("8 bytes of push constants, got 4"), "{e}");
    let writes_input = String::from_utf8(AXPY.to_vec()).unwrap().replace("readonly buffer X", "buffer X");
    let k =
        dev.register_kernel("test_writes", &Glsl::new(), writes_input.as_bytes(), &PipelineOptions::default()).unwrap();
    let e = k.run(&[&x, &x], &out, &push(8, 1.0), [1, 1, 1]).unwrap_err().to_string();
    assert!(e.contains("may write binding 0, an input"), "{e}");
    let e = dev.register_kernel(
        "test_bad",
        &Glsl::new(),
        b"#version 450\nvoid main() { nope; }",
        &PipelineOptions::default(),
    );
    assert!(e.unwrap_err().to_string().contains("nope"));
}
