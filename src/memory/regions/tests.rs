use super::*;

/// A POSIX shared-memory object of `size` bytes, unlinked on drop.
struct Object(String);

impl Object {
    fn new(size: u64) -> Object {
        let key = format!("/tritonrs-test-{}-{}", std::process::id(), fastrand::u64(..));
        let fd = rustix::shm::open(
            key.as_str(),
            rustix::shm::OFlags::CREATE | rustix::shm::OFlags::EXCL | rustix::shm::OFlags::RDWR,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .unwrap();
        std::fs::File::from(fd).set_len(size).unwrap();
        Object(key)
    }
    fn write(&self, at: u64, data: &[u8]) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::from(
            rustix::shm::open(self.0.as_str(), rustix::shm::OFlags::RDWR, rustix::fs::Mode::empty()).unwrap(),
        );
        f.write_all_at(data, at).unwrap();
    }
    fn read(&self, at: u64, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::from(
            rustix::shm::open(self.0.as_str(), rustix::shm::OFlags::RDWR, rustix::fs::Mode::empty()).unwrap(),
        );
        let mut buf = vec![0; len];
        f.read_exact_at(&mut buf, at).unwrap();
        buf
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        let _ = rustix::shm::unlink(self.0.as_str());
    }
}

#[test]
fn inputs_are_read_in_place_and_outputs_written_into_the_region() {
    let obj = Object::new(8192);
    obj.write(4096 + 8, b"abcd");
    let m = SharedMemoryManager::default();
    // An offset that is not a page multiple works too.
    m.register_system("r", &obj.0, 4096, 100).unwrap();
    let s = m.slice("r", 8, 4).unwrap();
    let bytes = s.to_bytes().unwrap();
    assert_eq!(&bytes[..], b"abcd");
    // The bytes are the mapping: a later write by the client is visible (no copy was made).
    obj.write(4096 + 8, b"wxyz");
    assert_eq!(&bytes[..], b"wxyz");
    let out = m.slice("r", 50, 10).unwrap();
    out.write(b"hello").unwrap();
    assert_eq!(obj.read(4096 + 50, 5), b"hello");
    assert_eq!(out.write(&[0; 11]).unwrap_err().kind, ErrorKind::Internal);

    let status = m.system_status(None).unwrap();
    assert_eq!(status, vec![SystemRegionStatus { name: "r".into(), key: obj.0.clone(), offset: 4096, byte_size: 100 }]);
    assert_eq!(m.system_status(Some("r")).unwrap().len(), 1);
    assert!(m.cuda_status(None).unwrap().is_empty());
}

#[test]
fn unregistering_keeps_the_mapping_for_requests_in_flight() {
    let obj = Object::new(64);
    obj.write(0, b"live");
    let m = SharedMemoryManager::default();
    m.register_system("r", &obj.0, 0, 64).unwrap();
    let bytes = m.slice("r", 0, 4).unwrap().to_bytes().unwrap();
    let out = m.slice("r", 10, 4).unwrap();
    m.unregister_system(Some("r")).unwrap();
    assert_eq!(m.slice("r", 0, 4).unwrap_err().message, "Unable to find shared memory region: 'r'");
    assert_eq!(&bytes[..], b"live");
    out.write(b"done").unwrap();
    assert_eq!(obj.read(10, 4), b"done");
    // The name is free again.
    m.register_system("r", &obj.0, 0, 64).unwrap();
}

#[test]
fn bad_registrations_and_slices_are_client_errors_with_tritons_messages() {
    let obj = Object::new(128);
    let m = SharedMemoryManager::default();
    let e = m.register_system("x", "/tritonrs-test-does-not-exist", 0, 16).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.starts_with("Unable to open shared memory region: '/tritonrs-test-does-not-exist'"), "{e}");
    for key in ["/../../etc/passwd", "/a/b", "/", "", "/.."] {
        let e = m.register_system("x", key, 0, 16).unwrap_err();
        assert!(e.message.starts_with("Unable to open shared memory region"), "{key}: {e}");
    }
    for (offset, size) in [(0, 129), (100, 29), (u64::MAX, 2), (0, 0)] {
        let e = m.register_system("x", &obj.0, offset, size).unwrap_err();
        assert!(e.message.starts_with(&format!("Invalid shared memory region: '{}'", obj.0)), "{e}");
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
    }
    assert_eq!(m.register_system("", &obj.0, 0, 8).unwrap_err().kind, ErrorKind::InvalidArgument);
    m.register_system("r", &obj.0, 0, 128).unwrap();
    let e = m.register_system("r", &obj.0, 0, 128).unwrap_err();
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::AlreadyExists, "shared memory region 'r' already in manager"));
    for (offset, size) in [(0, 129), (128, 1), (u64::MAX, 1), (1, u64::MAX)] {
        let e = m.slice("r", offset, size).unwrap_err();
        assert_eq!(e.message, "Invalid offset + byte size for shared memory region: 'r'");
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
    }
    assert!(m.slice("r", 128, 0).is_ok());
    let e = m.slice("nope", 0, 1).unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::InvalidArgument, "Unable to find shared memory region: 'nope'")
    );
    let e = m.system_status(Some("nope")).unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::NotFound, "Unable to find system shared memory region: 'nope'")
    );
    // Unregistering an unknown name succeeds, as in Triton; unregistering all clears the table.
    m.unregister_system(Some("nope")).unwrap();
    m.unregister_system(None).unwrap();
    assert!(m.system_status(None).unwrap().is_empty());
}

#[test]
fn cuda_regions_need_a_driver_and_a_whole_handle() {
    let m = SharedMemoryManager::new(None, "no CUDA driver was found (libcuda.so.1)".into());
    let e = m.register_cuda("c", &[0; 3], 0, 16).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.starts_with("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"), "{e}");
    let e = m.register_cuda("c", &[0; 64], 0, 16).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_eq!(e.message, "failed to register CUDA shared memory region 'c': no CUDA driver was found (libcuda.so.1)");
    assert!(m.cuda_status(None).unwrap().is_empty());
}

/// Device memory faked in host memory, to test the CUDA paths of the manager without a GPU.
struct FakeDevice(parking_lot::Mutex<Vec<u8>>);

impl CudaIpcMemory for FakeDevice {
    fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        dst.copy_from_slice(&self.0.lock()[offset..offset + dst.len()]);
        Ok(())
    }
    fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.0.lock()[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }
}

#[test]
fn cuda_regions_copy_through_the_driver() {
    let opener: CudaIpcOpener = Arc::new(|handle: &[u8], _dev: i64, size: usize| {
        let mut mem = vec![0u8; size];
        mem[..4].copy_from_slice(&handle[..4]);
        Ok(Box::new(FakeDevice(parking_lot::Mutex::new(mem))) as Box<dyn CudaIpcMemory>)
    });
    let m = SharedMemoryManager::new(Some(opener), String::new());
    let mut handle = [0u8; 64];
    handle[..4].copy_from_slice(b"gpu!");
    m.register_cuda("c", &handle, 1, 32).unwrap();
    assert_eq!(m.cuda_status(None).unwrap(), vec![CudaRegionStatus { name: "c".into(), device_id: 1, byte_size: 32 }]);
    assert!(m.system_status(None).unwrap().is_empty());
    assert_eq!(&m.slice("c", 0, 4).unwrap().to_bytes().unwrap()[..], b"gpu!");
    m.slice("c", 8, 4).unwrap().write(b"back").unwrap();
    assert_eq!(&m.slice("c", 8, 4).unwrap().to_bytes().unwrap()[..], b"back");
    let e = m.unregister_system(Some("c")).unwrap_err();
    assert!(e.message.contains("is registered as CUDA shared memory, not system shared memory"), "{e}");
    m.unregister_cuda(None).unwrap();
    assert!(m.cuda_status(None).unwrap().is_empty());
}

#[test]
fn cuda_inputs_are_staged_in_the_pinned_pool() {
    let opener: CudaIpcOpener = Arc::new(|_: &[u8], _dev: i64, size: usize| {
        let mut mem = vec![0u8; size];
        mem[..5].copy_from_slice(b"frame");
        Ok(Box::new(FakeDevice(parking_lot::Mutex::new(mem))) as Box<dyn CudaIpcMemory>)
    });
    let m = SharedMemoryManager::new(Some(opener), String::new());
    m.register_cuda("c", &[0; 64], 0, 64).unwrap();
    let pool = crate::memory::pool::Pool::new(
        "pinned",
        1 << 20,
        Box::new(crate::memory::pool::HostAllocator),
        Box::new(crate::memory::pool::HostAllocator),
    );
    let buf = m.slice("c", 0, 5).unwrap().to_buffer(Some(&pool)).unwrap();
    assert_eq!(&buf.as_host().unwrap()[..], b"frame");
    assert_eq!(pool.stats().used_bytes, 4096);
    drop(buf);
    assert_eq!(pool.stats().used_bytes, 0);
    // System memory is never staged: the buffer is the mapping itself.
    let obj = Object::new(16);
    obj.write(0, b"abc");
    m.register_system("s", &obj.0, 0, 16).unwrap();
    let buf = m.slice("s", 0, 3).unwrap().to_buffer(Some(&pool)).unwrap();
    assert_eq!(&buf.as_host().unwrap()[..], b"abc");
    assert_eq!(pool.stats().used_bytes, 0);
}
