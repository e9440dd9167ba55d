//! Kernels as machine code: NVRTC compiles every `.cu` file to a CUBIN for a real architecture
//! (no GPU needed), the entry points read back from the ELF file are exactly the ones the
//! backend lists, and a second compile comes from the disk cache byte for byte.

#[test]
fn every_kernel_compiles_to_cubin_with_its_entries() {
    if let Err(e) = stapes_cuda::loader::ensure_nvrtc() {
        eprintln!("SKIPPED (no libnvrtc): every_kernel_compiles_to_cubin_with_its_entries: {e}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("stapes-cubin-check-{}", std::process::id()));
    std::env::set_var("STAPES_CACHE", &dir);
    for f in stapes_cuda::kernels::FILES {
        let bin = stapes_cuda::kernels::compile_cubin(f, "compute_90")
            .unwrap_or_else(|e| panic!("{}.cu: {e}", f.name));
        assert!(bin.starts_with(b"\x7fELF"), "{}: not an ELF file", f.name);
        let mut got = stapes_cuda::kernels::cubin_entries(&bin);
        let mut want: Vec<String> = f.entries.iter().map(|s| s.to_string()).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{}.cu entry points in the CUBIN", f.name);
        let again = stapes_cuda::kernels::compile_cubin(f, "compute_90").expect("cached");
        assert_eq!(again, bin, "{}: the cached CUBIN differs", f.name);
    }
    let cached = std::fs::read_dir(dir.join("cuda"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".cubin"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(cached, stapes_cuda::kernels::FILES.len());
    // anything that is not a 64-bit ELF file names no entries
    assert!(stapes_cuda::kernels::cubin_entries(b"\x7fELF\x01\x01").is_empty());
    assert!(stapes_cuda::kernels::cubin_entries(&[]).is_empty());
    let _ = std::fs::remove_dir_all(dir);
}
