//! Streams: dependent chains in one submission, barriers only on hazards, copies and
//! fills, replay of a recorded command buffer.

mod common;

use vkml_hal::{BufferArg, MemoryKind, PipelineOptions, Stream};

#[test]
fn thousand_dependent_dispatches_in_one_submission() {
    let dev = common::device();
    let n = 1000usize;
    let x = common::random_f32(n, 21);
    let a = dev.upload(&x).unwrap();
    let b = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let p = dev.pipeline(&dev.kernel("affine.f32").unwrap(), &PipelineOptions::default()).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let push = common::affine_push(n as u32, 1.0, 1.0);
    let groups = [(n as u32).div_ceil(64), 1, 1];
    for i in 0..1000 {
        let (src, dst) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        s.dispatch(&p, &[src.into(), dst.into()], &push, groups).unwrap();
    }
    s.finish_and_wait().unwrap();
    let st = s.stats();
    assert_eq!(st.dispatches, 1000);
    assert_eq!(st.submissions, 1);
    assert_eq!(st.barriers, 999, "every dispatch reads what the previous one wrote");
    // 1000 steps of +1, the last writing into `a`.
    let out = a.to_vec::<f32>().unwrap();
    for i in 0..n {
        // Each step rounds in f32, as the CPU does here.
        let mut want = x[i];
        for _ in 0..1000 {
            want += 1.0;
        }
        assert_eq!(out[i], want, "element {i}");
    }
}

#[test]
fn independent_dispatches_need_no_barrier() {
    let dev = common::device();
    let n = 256usize;
    let x = dev.upload(&common::random_f32(n, 1)).unwrap();
    let outs: Vec<_> = (0..8).map(|_| dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap()).collect();
    let p = dev.pipeline(&dev.kernel("affine.f32").unwrap(), &PipelineOptions::default()).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    for (i, o) in outs.iter().enumerate() {
        s.dispatch(&p, &[(&x).into(), o.into()], &common::affine_push(n as u32, i as f32, 0.0), [4, 1, 1]).unwrap();
    }
    // Disjoint halves of one buffer do not conflict either.
    let halves = dev.alloc(8 * n as u64, MemoryKind::DeviceLocal).unwrap();
    s.dispatch(
        &p,
        &[(&x).into(), BufferArg::range(&halves, 0, 4 * n as u64)],
        &common::affine_push(n as u32, 1.0, 0.0),
        [4, 1, 1],
    )
    .unwrap();
    s.dispatch(
        &p,
        &[(&x).into(), BufferArg::range(&halves, 4 * n as u64, 4 * n as u64)],
        &common::affine_push(n as u32, 1.0, 1.0),
        [4, 1, 1],
    )
    .unwrap();
    assert_eq!(s.stats().barriers, 0);
    // Reading one of the outputs is a hazard.
    let z = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    s.dispatch(&p, &[(&outs[3]).into(), (&z).into()], &common::affine_push(n as u32, 1.0, 0.0), [4, 1, 1]).unwrap();
    assert_eq!(s.stats().barriers, 1);
    s.finish_and_wait().unwrap();
    let xs = x.to_vec::<f32>().unwrap();
    let zs = z.to_vec::<f32>().unwrap();
    let hs = halves.to_vec::<f32>().unwrap();
    for i in 0..n {
        assert!(common::close(zs[i], xs[i] * 3.0));
        assert!(common::close(hs[i], xs[i]) && common::close(hs[n + i], xs[i] + 1.0));
    }
}

#[test]
fn copies_and_fills_are_ordered_with_dispatches() {
    let dev = common::device_with(vkml_hal::DeviceOptions { force_staging: true, ..Default::default() });
    let n = 300usize;
    let a = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let b = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let c = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let p = dev.pipeline(&dev.kernel("affine.f32").unwrap(), &PipelineOptions::default()).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    s.fill(&a, 0, 4 * n as u64, 2.0f32.to_bits()).unwrap();
    s.dispatch(&p, &[(&a).into(), (&b).into()], &common::affine_push(n as u32, 3.0, 0.0), [5, 1, 1]).unwrap();
    s.copy(&b, 0, &c, 0, 4 * n as u64).unwrap();
    s.fill(&c, 0, 4, 0).unwrap();
    s.finish_and_wait().unwrap();
    assert_eq!(s.stats().barriers, 3);
    let out = c.to_vec::<f32>().unwrap();
    assert_eq!(out[0], 0.0);
    assert!(out[1..].iter().all(|&v| v == 6.0));
    assert!(s.fill(&a, 2, 4, 0).is_err());
    assert!(s.copy(&a, 0, &b, 8, 4 * n as u64).is_err());
}

#[test]
fn several_submissions_from_one_stream() {
    let dev = common::device();
    let n = 64usize;
    let a = dev.upload(&vec![1.0f32; n]).unwrap();
    let p = dev.pipeline(&dev.kernel("affine.f32").unwrap(), &PipelineOptions::default()).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let b = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let mut subs = Vec::new();
    for _ in 0..5 {
        s.dispatch(&p, &[(&a).into(), (&b).into()], &common::affine_push(n as u32, 1.0, 1.0), [1, 1, 1]).unwrap();
        s.dispatch(&p, &[(&b).into(), (&a).into()], &common::affine_push(n as u32, 1.0, 1.0), [1, 1, 1]).unwrap();
        subs.push(s.submit().unwrap());
    }
    assert!(subs.windows(2).all(|w| w[0].value() < w[1].value()));
    subs.last().unwrap().wait().unwrap();
    assert!(subs.iter().all(|s| s.is_complete().unwrap()));
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![11.0f32; n]);
    // Host reads wait for pending work by themselves.
    s.dispatch(&p, &[(&a).into(), (&b).into()], &common::affine_push(n as u32, 2.0, 0.0), [1, 1, 1]).unwrap();
    s.submit().unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![22.0f32; n]);
}

#[test]
fn replay_with_new_parameters() {
    for push_descriptors in [true, false] {
        let dev = common::device_with(vkml_hal::DeviceOptions {
            disable_push_descriptors: !push_descriptors,
            ..Default::default()
        });
        let n = 2000usize;
        let x = common::random_f32(n, 8);
        let xb = dev.upload(&x).unwrap();
        let yb = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
        let zb = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
        let params = dev.alloc(8, MemoryKind::Upload).unwrap();
        let p = dev.pipeline(&dev.kernel("affine_params").unwrap(), &PipelineOptions::default()).unwrap();
        let mut s = Stream::new(&dev).unwrap();
        let groups = [(n as u32).div_ceil(64), 1, 1];
        // y = x * mul + add; z = y * mul + add
        s.dispatch(&p, &[(&xb).into(), (&yb).into(), (&params).into()], &(n as u32).to_le_bytes(), groups).unwrap();
        s.dispatch(&p, &[(&yb).into(), (&zb).into(), (&params).into()], &(n as u32).to_le_bytes(), groups).unwrap();
        let mut rec = s.into_recording().unwrap();
        assert_eq!(rec.commands(), 2);
        for (mul, add) in [(2.0f32, 1.0f32), (-0.5, 3.0), (0.0, 7.0), (1.0, 0.0)] {
            params.write(0, &[mul.to_le_bytes(), add.to_le_bytes()].concat()).unwrap();
            rec.submit().unwrap().wait().unwrap();
            let z = zb.to_vec::<f32>().unwrap();
            for i in 0..n {
                let want = (x[i] * mul + add) * mul + add;
                assert!(common::close(z[i], want), "mul={mul} add={add} z[{i}]={} want {want}", z[i]);
            }
        }
        // Submitting twice in a row is safe: the second waits for the first.
        rec.submit().unwrap();
        rec.submit().unwrap().wait().unwrap();
    }
}

#[test]
fn discarded_recording_never_runs() {
    // A step recorded ahead and then dropped: its commands do not execute, and the stream
    // records and runs the next work normally (with a recycled command buffer).
    let dev = common::device();
    let n = 64usize;
    let a = dev.upload(&vec![1.0f32; n]).unwrap();
    let b = dev.upload(&vec![5.0f32; n]).unwrap();
    let p = dev.pipeline(&dev.kernel("affine.f32").unwrap(), &PipelineOptions::default()).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    s.discard().unwrap(); // nothing recorded: a no-op
    s.dispatch(&p, &[(&a).into(), (&b).into()], &common::affine_push(n as u32, 100.0, 0.0), [1, 1, 1]).unwrap();
    s.discard().unwrap();
    s.finish_and_wait().unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![5.0f32; n], "the discarded dispatch ran");
    s.dispatch(&p, &[(&a).into(), (&b).into()], &common::affine_push(n as u32, 3.0, 1.0), [1, 1, 1]).unwrap();
    s.finish_and_wait().unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![4.0f32; n]);
}

#[test]
fn profile_counts_every_command_and_sums_its_gpu_time() {
    let dev = common::device();
    let n = 1 << 16;
    let a = dev.upload(&common::random_f32(n, 3)).unwrap();
    let b = dev.alloc(4 * n as u64, MemoryKind::DeviceLocal).unwrap();
    let p = dev.pipeline(&dev.kernel("affine.f32").unwrap(), &PipelineOptions::default()).unwrap();
    let push = common::affine_push(n as u32, 2.0, 1.0);
    let groups = [(n as u32).div_ceil(64), 1, 1];
    let mut s = Stream::new(&dev).unwrap();
    // Recorded before profiling was switched on: not counted.
    s.dispatch(&p, &[(&a).into(), (&b).into()], &push, groups).unwrap();
    s.finish_and_wait().unwrap();
    dev.set_profiling(true).unwrap();
    for i in 0..6 {
        let (src, dst) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        s.dispatch(&p, &[src.into(), dst.into()], &push, groups).unwrap();
        if i == 2 {
            s.submit().unwrap(); // two command buffers
        }
    }
    s.copy(&a, 0, &b, 0, 4 * n as u64).unwrap();
    s.fill(&a, 0, 4 * n as u64, 0).unwrap();
    // Recorded, then dropped: never runs, never counted.
    s.submit().unwrap();
    s.dispatch(&p, &[(&a).into(), (&b).into()], &push, groups).unwrap();
    s.discard().unwrap();
    // Waited for but not retired by the stream: take_profile reads it all the same.
    s.submit().unwrap().wait().unwrap();
    let prof = dev.take_profile();
    let get = |name: &str| prof.iter().find(|k| k.name == name).unwrap_or_else(|| panic!("{name} in {prof:?}"));
    let affine = format!("affine.f32 [{}x1x1]", groups[0]);
    assert_eq!(get(&affine).calls, 6);
    assert_eq!(get("copy").calls, 1);
    assert_eq!(get("fill").calls, 1);
    assert_eq!(prof.len(), 3, "{prof:?}");
    // Each of the six dispatches reads and writes 512 KiB: it takes time on any device.
    assert!(get(&affine).seconds > 0.0 && get(&affine).seconds < 10.0, "{prof:?}");
    assert!(prof.windows(2).all(|w| w[0].seconds >= w[1].seconds), "slowest first: {prof:?}");
    // Reading resets the sums; switched off, nothing more is counted.
    assert!(dev.take_profile().is_empty());
    dev.set_profiling(false).unwrap();
    s.dispatch(&p, &[(&a).into(), (&b).into()], &push, groups).unwrap();
    s.finish_and_wait().unwrap();
    assert!(dev.take_profile().is_empty());
    // The work itself is unchanged by the timestamps: b = 2 a + 1 after the last dispatch.
    let (av, bv) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    assert!(av.iter().zip(&bv).all(|(x, y)| *y == 2.0 * x + 1.0));
}
