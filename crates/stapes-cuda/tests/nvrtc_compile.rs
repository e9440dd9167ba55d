//! Compiles every `.cu` kernel with NVRTC; needs libnvrtc only (no GPU), so CI can run it:
//! `pip install nvidia-cuda-nvrtc==13.0.88` and, if it is not found on its own,
//! `STAPES_NVRTC_LIB=<site-packages>/nvidia/cu13/lib cargo test --release -p stapes-cuda --test nvrtc_compile`.

#[test]
fn every_kernel_compiles_with_nvrtc() {
    if let Err(e) = stapes_cuda::loader::ensure_nvrtc() {
        eprintln!("SKIPPED (no libnvrtc): every_kernel_compiles_with_nvrtc: {e}");
        return;
    }
    // a fresh cache directory, so the compile really happens
    let dir = std::env::temp_dir().join(format!("stapes-nvrtc-check-{}", std::process::id()));
    std::env::set_var("STAPES_CACHE", &dir);
    for arch in ["compute_80", "compute_90"] {
        let files =
            stapes_cuda::kernels::compile_all(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        // every entry point a .cu file defines is listed for the backend, and vice versa
        for f in stapes_cuda::kernels::FILES {
            let ptx = stapes_cuda::kernels::compile(f, arch).expect("cached");
            let mut got = stapes_cuda::kernels::ptx_entries(&ptx);
            let mut want: Vec<String> = f.entries.iter().map(|s| s.to_string()).collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "{}.cu entry points", f.name);
        }
        for (name, bytes, entries) in &files {
            eprintln!("{arch}: {name}.cu -> {bytes} bytes of PTX, {entries} entries");
            assert!(*entries > 0, "{name}: no entry points");
        }
        assert_eq!(files.len(), stapes_cuda::kernels::FILES.len());
    }
    // second pass must come from the disk cache
    let t0 = std::time::Instant::now();
    stapes_cuda::kernels::compile_all("compute_90").expect("cached compile");
    eprintln!("cached reload of all kernels: {:?}", t0.elapsed());
    let cached = std::fs::read_dir(dir.join("cuda"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(
        cached >= stapes_cuda::kernels::FILES.len(),
        "cache has {cached} files"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
