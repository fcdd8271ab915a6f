//! Build-time and run-time kernels, dispatch checks, specialization and subgroup sizes,
//! the pipeline cache.

mod common;

use vkml_hal::shader::{Glsl, Hlsl, ShaderFrontend, SpirvPassthrough};
use vkml_hal::{BufferArg, DeviceOptions, Error, MemoryKind, PipelineOptions, Stream};

fn run_affine(dev: &vkml_hal::Device, n: usize) {
    let x = common::random_f32(n, 3);
    let (mul, add) = (1.5f32, -0.25f32);
    let xb = dev.upload(&x).unwrap();
    let yb = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let k = dev.kernel("affine.f32").unwrap();
    let p = dev.pipeline(&k, &PipelineOptions { spec_constants: vec![(0, 64)], ..Default::default() }).unwrap();
    let mut s = Stream::new(dev).unwrap();
    s.dispatch(
        &p,
        &[(&xb).into(), (&yb).into()],
        &common::affine_push(n as u32, mul, add),
        [(n as u32).div_ceil(64), 1, 1],
    )
    .unwrap();
    s.finish_and_wait().unwrap();
    let y = yb.to_vec::<f32>().unwrap();
    for i in 0..n {
        assert!(common::close(y[i], x[i] * mul + add), "y[{i}] = {} want {}", y[i], x[i] * mul + add);
    }
}

#[test]
fn build_time_glsl_kernel() {
    let dev = common::device();
    // 1000 is not a multiple of the 64-wide workgroup: the tail is guarded.
    run_affine(&dev, 1000);
}

#[test]
fn build_time_kernel_with_pooled_descriptors() {
    let dev = common::device_with(DeviceOptions {
        disable_push_descriptors: true,
        force_staging: true,
        ..Default::default()
    });
    assert!(!dev.uses_push_descriptors());
    run_affine(&dev, 777);
}

#[test]
fn build_time_f16_variant() {
    let dev = common::device();
    if !(dev.caps().types.float16 && dev.caps().types.storage_buffer_16bit) {
        eprintln!("skipped: no f16 storage/arithmetic");
        return;
    }
    let n = 333;
    let x: Vec<half::f16> = common::random_f32(n, 9).into_iter().map(half::f16::from_f32).collect();
    let xb = dev.upload(&x).unwrap();
    let yb = dev.alloc(2 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let p = dev.pipeline(&dev.kernel("affine.f16").unwrap(), &PipelineOptions::default()).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    s.dispatch(
        &p,
        &[(&xb).into(), (&yb).into()],
        &common::affine_push(n as u32, 2.0, 0.5),
        [(n as u32).div_ceil(64), 1, 1],
    )
    .unwrap();
    s.finish_and_wait().unwrap();
    let y = yb.to_vec::<half::f16>().unwrap();
    let bad: Vec<usize> = (0..n).filter(|&i| y[i] != half::f16::from_f32(x[i].to_f32() * 2.0 + 0.5)).collect();
    // Computed in f32 and rounded once to f16: exactly what the CPU does here.
    assert!(bad.is_empty(), "{} wrong elements, first {:?}", bad.len(), &bad[..bad.len().min(40)]);
}

const SQUARE_GLSL: &str = r#"
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "common.glsl"
#include "user.glsl"
layout(constant_id = 1) const float SCALE = 1.0;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) writeonly buffer B { float b[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint i = vkml_global_index_1d();
    if (i < p.n) b[i] = square(a[i]) * SCALE;
}
"#;

#[test]
fn run_time_glsl_kernel_with_includes_and_spec_constants() {
    let dev = common::device();
    let fe = Glsl::new().with_header("user.glsl", "float square(float v) { return v * v; }");
    let k = dev.register_kernel("user.square", &fe, SQUARE_GLSL.as_bytes()).unwrap();
    assert_eq!(k.interface().bindings.len(), 2);
    assert_eq!(k.interface().spec_ids, vec![0, 1]);
    // Registered kernels are found by name.
    assert_eq!(dev.kernel("user.square").unwrap().words(), k.words());
    let n = 4099usize;
    let a = common::random_f32(n, 5);
    let ab = dev.upload(&a).unwrap();
    let bb = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let p = dev
        .pipeline(&k, &PipelineOptions { spec_constants: vec![(0, 128), (1, 3.0f32.to_bits())], ..Default::default() })
        .unwrap();
    let mut s = Stream::new(&dev).unwrap();
    s.dispatch(&p, &[(&ab).into(), (&bb).into()], &(n as u32).to_le_bytes(), [(n as u32).div_ceil(128), 1, 1]).unwrap();
    s.finish_and_wait().unwrap();
    let b = bb.to_vec::<f32>().unwrap();
    for i in 0..n {
        assert!(common::close(b[i], a[i] * a[i] * 3.0), "b[{i}]");
    }

    // The same SPIR-V through the passthrough frontend.
    let bytes: Vec<u8> = k.words().iter().flat_map(|w| w.to_le_bytes()).collect();
    let k2 = dev.register_kernel("user.square.spv", &SpirvPassthrough, &bytes).unwrap();
    assert_eq!(k2.interface(), k.interface());
    assert!(SpirvPassthrough.to_spirv("junk", &[1, 2, 3, 4, 5, 6, 7, 8]).is_err());
}

const SCALE_HLSL: &str = r#"
StructuredBuffer<float> src : register(t0);
RWStructuredBuffer<float> dst : register(u1);
struct Params { uint n; float scale; };
[[vk::push_constant]] ConstantBuffer<Params> p;
[numthreads(64, 1, 1)]
void scale_main(uint3 id : SV_DispatchThreadID) {
    if (id.x < p.n) dst[id.x] = src[id.x] * p.scale + OFFSET;
}
"#;

#[test]
fn run_time_hlsl_kernel() {
    let dev = common::device();
    let k = dev
        .register_kernel("user.scale", &Hlsl::new("scale_main").define("OFFSET", "0.5"), SCALE_HLSL.as_bytes())
        .unwrap();
    assert_eq!(k.interface().push_constant_size, 8);
    let n = 1234usize;
    let a = common::random_f32(n, 11);
    let ab = dev.upload(&a).unwrap();
    let bb = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let p = dev.pipeline(&k, &PipelineOptions::default()).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let push = [(n as u32).to_le_bytes(), (-2.0f32).to_le_bytes()].concat();
    s.dispatch(&p, &[(&ab).into(), (&bb).into()], &push, [(n as u32).div_ceil(64), 1, 1]).unwrap();
    s.finish_and_wait().unwrap();
    let b = bb.to_vec::<f32>().unwrap();
    for i in 0..n {
        assert!(common::close(b[i], a[i] * -2.0 + 0.5), "b[{i}]");
    }
}

#[test]
fn shader_syntax_error_is_a_clear_error() {
    let dev = common::device();
    let src = "#version 450\nlayout(local_size_x = 64) in;\nvoid main() {\n  float x = ;\n}\n";
    let err = dev.register_kernel("broken_kernel.comp", &Glsl::new(), src.as_bytes()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Shader(_)), "{msg}");
    assert!(msg.contains("broken_kernel.comp") && msg.contains(":4:"), "{msg}");
    assert!(dev.kernel("broken_kernel.comp").is_err(), "a failed kernel is not registered");
    let herr = dev
        .register_kernel("bad.hlsl", &Hlsl::new("main"), b"[numthreads(1,1,1)] void main() { undefined_thing(); }")
        .unwrap_err();
    assert!(herr.to_string().contains("bad.hlsl"), "{herr}");
    assert!(matches!(dev.kernel("nope"), Err(Error::UnknownKernel(_))));
}

#[test]
fn shared_memory_past_the_device_limit_is_refused() {
    let dev = common::device();
    let limit = dev.caps().limits.max_shared_memory;
    // `words` uvec4 of shared memory (plus a 3-float struct), one invocation using them.
    let src = |words: u32| {
        format!(
            "#version 450\nlayout(local_size_x = 64) in;\nlayout(std430, binding = 0) buffer B {{ uint b[]; }};\n\
             struct S {{ float a, c, d; }};\nshared uvec4 sm[{words}];\nshared S st;\n\
             void main() {{ sm[gl_LocalInvocationID.x] = uvec4(1u); st.a = 2.0; barrier();\n\
             b[gl_LocalInvocationID.x] = sm[63u - gl_LocalInvocationID.x].x + uint(st.a); }}\n"
        )
    };
    let fits = limit / 16 - 1;
    let k = dev.register_kernel("user.shared_fits", &Glsl::new(), src(fits).as_bytes()).unwrap();
    assert_eq!(k.interface().shared_memory_size, Some(16 * fits + 12));
    dev.pipeline(&k, &PipelineOptions::default()).unwrap();
    let big = dev.register_kernel("user.shared_big", &Glsl::new(), src(limit / 16 + 1).as_bytes()).unwrap();
    let err = dev.pipeline(&big, &PipelineOptions::default()).unwrap_err().to_string();
    assert!(
        err.contains("user.shared_big") && err.contains("shared memory") && err.contains(&limit.to_string()),
        "{err}"
    );
}

#[test]
fn dispatch_arguments_are_checked() {
    let dev = common::device();
    let k = dev.kernel("affine.f32").unwrap();
    let p = dev.pipeline(&k, &PipelineOptions::default()).unwrap();
    let a = dev.upload(&[1.0f32; 16]).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let push = common::affine_push(16, 1.0, 0.0);
    let e = s.dispatch(&p, &[(&a).into()], &push, [1, 1, 1]).unwrap_err();
    assert!(e.to_string().contains("takes 2 buffers, got 1"), "{e}");
    let e = s.dispatch(&p, &[(&a).into(), (&a).into()], &push[..4], [1, 1, 1]).unwrap_err();
    assert!(e.to_string().contains("push constants"), "{e}");
    let e = s.dispatch(&p, &[(&a).into(), BufferArg::range(&a, 32, 64)], &push, [1, 1, 1]).unwrap_err();
    assert!(matches!(e, Error::OutOfBounds { offset: 32, len: 64, size: 64 }), "{e}");
    let e = s.dispatch(&p, &[(&a).into(), (&a).into()], &push, [u32::MAX, 1, 1]).unwrap_err();
    assert!(e.to_string().contains("exceed the device limit"), "{e}");
    let e = dev.pipeline(&k, &PipelineOptions { spec_constants: vec![(7, 1)], ..Default::default() }).unwrap_err();
    assert!(e.to_string().contains("no specialization constant 7"), "{e}");
    // A buffer of another device is refused.
    let other = common::device();
    let foreign = other.upload(&[0.0f32; 16]).unwrap();
    assert!(s.dispatch(&p, &[(&a).into(), (&foreign).into()], &push, [1, 1, 1]).is_err());
    assert_eq!(s.stats().dispatches, 0);
}

#[test]
fn required_subgroup_size() {
    let dev = common::device();
    let sg = dev.caps().subgroup.clone();
    let k = dev.kernel("affine.f32").unwrap();
    if sg.size_control {
        dev.pipeline(&k, &PipelineOptions { required_subgroup_size: Some(sg.max_size), ..Default::default() }).unwrap();
        let e = dev
            .pipeline(&k, &PipelineOptions { required_subgroup_size: Some(sg.max_size * 2), ..Default::default() })
            .unwrap_err();
        assert!(e.to_string().contains("outside the device's range"), "{e}");
    } else {
        assert!(matches!(
            dev.pipeline(&k, &PipelineOptions { required_subgroup_size: Some(32), ..Default::default() }),
            Err(Error::MissingFeature { .. })
        ));
    }
}

#[test]
fn pipeline_cache_is_persisted_per_device() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DeviceOptions { cache_dir: Some(dir.path().to_path_buf()), ..Default::default() };
    let path = {
        let dev = common::device_with(opts.clone());
        assert_eq!(dev.pipeline_cache_loaded_bytes(), 0);
        let k = dev.kernel("affine.f32").unwrap();
        dev.pipeline(&k, &PipelineOptions::default()).unwrap();
        let path = dev.pipeline_cache_path().unwrap().to_path_buf();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(&dev.caps().device_uuid), "{name}");
        assert!(name.contains(&format!("{:08x}", dev.caps().driver_version_raw)), "{name}");
        path
    };
    assert!(path.exists(), "the cache is written when the device drops");
    let dev = common::device_with(opts);
    assert!(dev.pipeline_cache_loaded_bytes() > 0);
    // A corrupt file is ignored, not trusted.
    std::fs::write(&path, b"garbage").unwrap();
    let dev2 = common::device_with(DeviceOptions { cache_dir: Some(dir.path().to_path_buf()), ..Default::default() });
    assert_eq!(dev2.pipeline_cache_loaded_bytes(), 0);
    drop(dev);
}

/// Compiler statistics of a pipeline: refused by name on a device opened without
/// `DeviceOptions::pipeline_statistics`; with it, where the driver has
/// VK_KHR_pipeline_executable_properties (NVIDIA has it, lavapipe of Mesa 22.3 not), a non-empty list of
/// named statistics with values, the same for the same pipeline asked twice.
#[test]
fn pipeline_statistics_where_the_driver_reports_them() {
    let plain = common::device();
    let k = plain.kernel("affine.f32").unwrap();
    let p = plain.pipeline(&k, &PipelineOptions::default()).unwrap();
    let e = plain.pipeline_statistics(&p).unwrap_err();
    assert!(matches!(e, Error::MissingFeature { .. }) && e.to_string().contains("pipeline_statistics"), "{e}");

    let dev = common::device_with(DeviceOptions { pipeline_statistics: true, ..Default::default() });
    let k = dev.kernel("affine.f32").unwrap();
    let q = dev.pipeline(&k, &PipelineOptions::default()).unwrap();
    // Another device's pipeline is refused.
    assert!(matches!(dev.pipeline_statistics(&p), Err(Error::MissingFeature { .. } | Error::InvalidDispatch { .. })));
    match dev.pipeline_statistics(&q) {
        Ok(stats) => {
            assert!(!stats.is_empty(), "no statistics");
            assert!(stats.iter().all(|s| !s.name.is_empty() && !s.value.is_empty() && s.value != "?"), "{stats:?}");
            assert_eq!(dev.pipeline_statistics(&q).unwrap(), stats);
            eprintln!("{} statistics of affine.f32, e.g. {:?}", stats.len(), stats[0]);
        }
        Err(Error::MissingFeature { .. }) => eprintln!("the driver lacks VK_KHR_pipeline_executable_properties"),
        Err(e) => panic!("{e}"),
    }
}
