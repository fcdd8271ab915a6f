//! Buffer round trips of every size class, through mapped memory and through staging,
//! recycling, and teardown without leaks.

mod common;

use vkml_hal::{DeviceOptions, MemoryKind, LEAKED_DEVICES};

fn round_trips(dev: &vkml_hal::Device) {
    for (i, &n) in [0usize, 1, 3, 4097, 1 << 20, 100_000_000].iter().enumerate() {
        for kind in [MemoryKind::DeviceLocal, MemoryKind::Upload, MemoryKind::Readback] {
            if n == 100_000_000 && kind != MemoryKind::DeviceLocal {
                continue; // the 100 MB case exercises staging in chunks; one kind suffices
            }
            let data = common::random_bytes(n, 17 + i as u64);
            let b = dev.alloc(n as u64, kind).unwrap();
            assert_eq!(b.size(), n as u64);
            b.write(0, &data).unwrap();
            let mut back = vec![0u8; n];
            b.read(0, &mut back).unwrap();
            assert!(back == data, "round trip of {n} bytes in {kind} memory differs");
        }
    }
}

#[test]
fn round_trip_in_place() {
    let dev = common::device();
    round_trips(&dev);
}

#[test]
fn round_trip_through_staging() {
    let dev = common::device_with(DeviceOptions { force_staging: true, ..Default::default() });
    assert!(!dev.is_uma());
    round_trips(&dev);
}

#[test]
fn partial_reads_and_writes_and_bounds() {
    let dev = common::device_with(DeviceOptions { force_staging: true, ..Default::default() });
    let b = dev.upload(&(0u32..1000).collect::<Vec<_>>()).unwrap();
    b.write(4 * 10, &7777u32.to_le_bytes()).unwrap();
    let mut four = [0u8; 4];
    b.read(4 * 10, &mut four).unwrap();
    assert_eq!(u32::from_le_bytes(four), 7777);
    let v = b.to_vec::<u32>().unwrap();
    assert_eq!(v[9], 9);
    assert_eq!(v[11], 11);
    let err = b.write(3998, &[0u8; 3]).unwrap_err();
    assert!(matches!(err, vkml_hal::Error::OutOfBounds { offset: 3998, len: 3, size: 4000 }), "{err}");
    assert!(b.read(u64::MAX, &mut four).is_err());
}

#[test]
fn buffers_are_recycled_by_size_class() {
    let dev = common::device();
    let a = dev.alloc(1000, MemoryKind::DeviceLocal).unwrap();
    let handle = a.handle();
    let capacity = a.capacity();
    drop(a);
    let stats = dev.memory_stats();
    assert_eq!(stats.cached_buffers, 1);
    assert_eq!(stats.cached_bytes, capacity);
    // Same size class, same buffer back.
    let b = dev.alloc(capacity - 10, MemoryKind::DeviceLocal).unwrap();
    assert_eq!(b.handle(), handle);
    assert_eq!(dev.memory_stats().cached_buffers, 0);
}

#[test]
fn no_live_allocations_after_teardown() {
    let before = LEAKED_DEVICES.load(std::sync::atomic::Ordering::Relaxed);
    {
        let dev = common::device_with(DeviceOptions { force_staging: true, ..Default::default() });
        let bufs: Vec<_> = (0..20).map(|i| dev.upload(&common::random_f32(100 + 37 * i, i as u64)).unwrap()).collect();
        let k = dev.kernel("affine.f32").unwrap();
        let p = dev.pipeline(&k, &vkml_hal::PipelineOptions::default()).unwrap();
        let mut s = vkml_hal::Stream::new(&dev).unwrap();
        let out = dev.alloc(bufs[0].size(), MemoryKind::DeviceLocal).unwrap();
        s.dispatch(&p, &[(&bufs[0]).into(), (&out).into()], &common::affine_push(100, 2.0, 1.0), [2, 1, 1]).unwrap();
        s.finish_and_wait().unwrap();
        assert!(dev.memory_stats().live_allocations >= 21);
        drop(s);
        drop(out);
        drop(bufs);
        dev.release_cached_buffers();
        let stats = dev.memory_stats();
        assert_eq!(stats.live_allocations, 0, "{stats:?}");
        assert_eq!(stats.cached_buffers, 0);
    }
    assert_eq!(
        LEAKED_DEVICES.load(std::sync::atomic::Ordering::Relaxed),
        before,
        "a device was torn down with live allocations"
    );
}
