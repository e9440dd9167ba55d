//! Opening the backend never panics: without CUDA it is a clean error naming what is missing.

#[test]
fn open_without_gpu_is_a_clean_error() {
    if stapes_cuda::available() {
        // a device that does not exist must still be an error, not a panic
        let e = stapes_cuda::CudaBackend::new(4096).expect_err("device 4096 should not exist");
        eprintln!("device 4096: {e}");
        assert!(
            matches!(e, stapes_cuda::CudaError::NoDevice { .. }),
            "{e:?}"
        );
        return;
    }
    let e = stapes_cuda::CudaBackend::new(0).expect_err("no CUDA here, yet the backend opened");
    let msg = e.to_string();
    eprintln!("as expected without CUDA: {msg}");
    assert!(!msg.is_empty());
    let core: stapes_core::Error = e.into();
    assert!(matches!(core, stapes_core::Error::Device(_)));
}
