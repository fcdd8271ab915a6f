//! A custom GLSL kernel on GPU buffers: `y = a * x + y` (saxpy) registered at run time,
//! compiled to SPIR-V by glslang, dispatched on a stream, checked on the host.
//!
//! `cargo run --release -p vkml-hal --example custom_kernel` (device per `VKML_DEVICE`,
//! else the best).

use vkml_hal::shader::Glsl;
use vkml_hal::{Device, MemoryKind, PipelineOptions, Stream};

const SAXPY: &[u8] = br#"
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; float a; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) y[i] = p.a * x[i] + y[i];
}
"#;

fn main() -> Result<(), vkml_hal::Error> {
    let dev = Device::from_env()?;
    let n = 100_000u32;
    let a = 0.5f32;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y0: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();

    let kernel = dev.register_kernel("saxpy", &Glsl::new(), SAXPY)?;
    let pipeline = dev.pipeline(&kernel, &PipelineOptions::default())?;
    let xb = dev.upload(&x)?;
    let yb = dev.upload(&y0)?;
    let out = dev.alloc(yb.size(), MemoryKind::DeviceLocal)?;
    let mut s = Stream::new(&dev)?;
    s.copy(&yb, 0, &out, 0, yb.size())?;
    let mut push = n.to_le_bytes().to_vec();
    push.extend_from_slice(&a.to_le_bytes());
    s.dispatch(&pipeline, &[(&xb).into(), (&out).into()], &push, [n.div_ceil(256), 1, 1])?;
    s.finish_and_wait()?;

    let y = out.to_vec::<f32>()?;
    let wrong = (0..n as usize).filter(|&i| y[i] != a * x[i] + y0[i]).count();
    println!("saxpy of {n} floats on {}: {wrong} wrong", dev.caps().name);
    assert_eq!(wrong, 0);
    Ok(())
}
