//! HAL benches: host<->device transfer bandwidth and the cost of one recorded dispatch.
//!
//! `cargo bench -p vkml-benches --bench hal` (device per `VKML_DEVICE`, else the best).

// criterion_group! defines a public function it cannot document.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use vkml_hal::{Device, MemoryKind, PipelineOptions, Stream};

fn transfers(c: &mut Criterion) {
    let dev = Device::from_env().expect("a Vulkan device");
    let mut g = c.benchmark_group(format!("transfer/{}", dev.caps().name));
    for mib in [1u64, 64] {
        let bytes = mib << 20;
        let data = vec![0x5au8; bytes as usize];
        let buf = dev.alloc(bytes, MemoryKind::DeviceLocal).unwrap();
        let mut back = vec![0u8; bytes as usize];
        g.throughput(Throughput::Bytes(bytes));
        g.bench_with_input(BenchmarkId::new("write", format!("{mib}MiB")), &bytes, |b, _| {
            b.iter(|| buf.write(0, &data).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("read", format!("{mib}MiB")), &bytes, |b, _| {
            b.iter(|| buf.read(0, &mut back).unwrap())
        });
    }
    g.finish();
}

fn dispatch_overhead(c: &mut Criterion) {
    let dev = Device::from_env().expect("a Vulkan device");
    let k = dev.kernel("affine.f32").unwrap();
    let p = dev.pipeline(&k, &PipelineOptions::default()).unwrap();
    let a = dev.upload(&[1.0f32; 64]).unwrap();
    let b = dev.alloc(256, MemoryKind::DeviceLocal).unwrap();
    let push: Vec<u8> = [64u32.to_le_bytes(), 1f32.to_le_bytes(), 1f32.to_le_bytes()].concat();
    let mut g = c.benchmark_group(format!("dispatch/{}", dev.caps().name));
    const N: u64 = 1000;
    g.throughput(Throughput::Elements(N));
    // Record + submit + wait of N dependent dispatches (each followed by a barrier).
    g.bench_function("record_submit_1000_dependent", |bench| {
        let mut s = Stream::new(&dev).unwrap();
        bench.iter(|| {
            for i in 0..N {
                let (x, y) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                s.dispatch(&p, &[x.into(), y.into()], &push, [1, 1, 1]).unwrap();
            }
            s.finish_and_wait().unwrap();
        })
    });
    // Replay of the same N dispatches from a recording (no host recording cost).
    let mut s = Stream::new(&dev).unwrap();
    for i in 0..N {
        let (x, y) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        s.dispatch(&p, &[x.into(), y.into()], &push, [1, 1, 1]).unwrap();
    }
    let mut rec = s.into_recording().unwrap();
    g.bench_function("replay_1000_dependent", |bench| bench.iter(|| rec.submit().unwrap().wait().unwrap()));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = transfers, dispatch_overhead
}
criterion_main!(benches);
