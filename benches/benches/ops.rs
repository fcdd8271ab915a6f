//! Criterion benches of the kernels `vkml bench ops` measures (the workloads of
//! `vkml_ops::bench::suite`): mat-vec per GGML type, quantized mat-mat, float matmul,
//! element-wise add, softmax, rms_norm, attention, and the copy / peak ceilings.
//!
//! `cargo bench -p vkml-benches --bench ops [-- FILTER]` on the device per `VKML_DEVICE`
//! (else the best); `VKML_BENCH_SCALE=full|small` picks the shapes (default: `small` on a
//! CPU device such as lavapipe, `full` on a GPU). Each criterion iteration is one call;
//! the calls of a sample are recorded into one command buffer and only its submission and
//! wait are timed on the host (`iter_custom`), as in `vkml bench ops`; the call index runs
//! on across samples, so every operand copy of a rotation is used in turn.

// criterion_group! defines a public function it cannot document.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vkml_hal::{Device, Stream};
use vkml_ops::bench::{suite, Scale};

fn ops(c: &mut Criterion) {
    let dev = Device::from_env().expect("a Vulkan device");
    let scale = std::env::var("VKML_BENCH_SCALE")
        .ok()
        .and_then(|s| Scale::parse(&s))
        .unwrap_or_else(|| Scale::for_device(&dev));
    // Criterion's own filter (the first argument that is not a flag) is applied to the
    // bench ids before any workload is built, so a filtered run does not allocate, upload
    // and compile the others.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    for spec in suite(&dev, scale) {
        if filter.as_ref().is_some_and(|f| !format!("ops/{}/{}", spec.group, spec.name).contains(f.as_str())) {
            continue;
        }
        let mut g = c.benchmark_group(format!("ops/{}", spec.group));
        let mut w = match spec.build(&dev) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("{} {}: not run: {e}", spec.group, spec.name);
                continue;
            }
        };
        if w.bytes > 0.0 {
            g.throughput(Throughput::Bytes(w.bytes as u64));
        }
        let mut s = Stream::new(&dev).expect("stream");
        // Warm-up call outside the timing: pipeline creation.
        if let Err(e) = w.record(&mut s, 0).and_then(|_| Ok(s.finish_and_wait()?)) {
            eprintln!("{} {}: not run: {e}", spec.group, spec.name);
            continue;
        }
        let mut next = 1usize;
        g.bench_function(&spec.name, |b| {
            b.iter_custom(|iters| {
                for _ in 0..iters {
                    w.record(&mut s, next).expect("record");
                    next = next.wrapping_add(1);
                }
                let t = Instant::now();
                s.submit().and_then(|sub| sub.wait()).expect("submit");
                let elapsed = t.elapsed();
                s.finish_and_wait().expect("release");
                elapsed.max(Duration::from_nanos(1))
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = ops
}
criterion_main!(benches);
