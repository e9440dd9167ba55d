//! Finding the CUDA libraries at run time.
//!
//! cudarc (dynamic loading) `dlopen`s libraries by soname and **panics** when one is missing, so
//! every entry point first preloads what it needs from a search list (by absolute path, with
//! `RTLD_GLOBAL`, after which glibc answers cudarc's soname lookups with the loaded object) and
//! checks presence with `is_culib_present()`; whatever still fails becomes a typed error.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::CudaError;

/// One library: a short name for messages and the file names tried, newest first.
struct Lib {
    what: &'static str,
    names: &'static [&'static str],
}

const DRIVER: Lib = Lib {
    what: "libcuda (driver)",
    names: &["libcuda.so.1", "libcuda.so"],
};
const NVRTC: Lib = Lib {
    what: "libnvrtc",
    names: &["libnvrtc.so.13", "libnvrtc.so"],
};
const NVRTC_BUILTINS: Lib = Lib {
    what: "libnvrtc-builtins",
    names: &[
        "libnvrtc-builtins.so.13.0",
        "libnvrtc-builtins.so.13",
        "libnvrtc-builtins.so",
    ],
};
const CUBLASLT: Lib = Lib {
    what: "libcublasLt",
    names: &["libcublasLt.so.13", "libcublasLt.so"],
};
const CUBLAS: Lib = Lib {
    what: "libcublas",
    names: &["libcublas.so.13", "libcublas.so"],
};

/// Directories searched after the loader's own path, in order: the cheap, well-known places
/// first (variables, CUDA installs, the usual Python `site-packages`); the deep walk of the
/// system's library trees only when `deep` (it costs tens of ms, more under gVisor).
fn search_dirs(deep: bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Vec::new();
    for var in ["STAPES_CUDA_LIBDIR", "STAPES_NVRTC_LIB"] {
        if let Ok(s) = std::env::var(var) {
            for p in s.split(':').filter(|x| !x.is_empty()) {
                let p = PathBuf::from(p);
                // STAPES_NVRTC_LIB may name the library file itself
                v.push(if p.is_file() {
                    p.parent().map(Path::to_path_buf).unwrap_or(p)
                } else {
                    p
                });
            }
        }
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Ok(root) = std::env::var(var) {
            let r = PathBuf::from(root);
            v.push(r.join("lib64"));
            v.push(r.join("targets/x86_64-linux/lib"));
        }
    }
    for d in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/cuda-13.0/lib64",
        "/usr/local/nvidia/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
    ] {
        v.push(PathBuf::from(d));
    }
    // pip wheels: <site-packages>/nvidia/{cu13,cuda_nvrtc,cublas,...}/lib
    let mut site = Vec::new();
    if let Ok(venv) = std::env::var("VIRTUAL_ENV") {
        find_site_packages(Path::new(&venv), 0, 4, &mut site);
    }
    if deep {
        if let Ok(home) = std::env::var("HOME") {
            find_site_packages(&Path::new(&home).join(".pyenv/versions"), 0, 4, &mut site);
            find_site_packages(&Path::new(&home).join(".local/lib"), 0, 3, &mut site);
        }
        for root in ["/usr/local/lib", "/usr/lib", "/opt"] {
            find_site_packages(Path::new(root), 0, 5, &mut site);
        }
    } else {
        // <root>/python3.X/{site,dist}-packages: one directory read per root
        for root in ["/usr/local/lib", "/usr/lib"] {
            for ent in std::fs::read_dir(root).into_iter().flatten().flatten() {
                if ent.file_name().to_string_lossy().starts_with("python3") {
                    for sp in ["site-packages", "dist-packages"] {
                        site.push(ent.path().join(sp));
                    }
                }
            }
        }
    }
    for sp in site {
        if let Ok(rd) = std::fs::read_dir(sp.join("nvidia")) {
            for ent in rd.flatten() {
                v.push(ent.path().join("lib"));
            }
        }
    }
    v.retain(|p| p.is_dir());
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(p.clone()));
    v
}

fn find_site_packages(dir: &Path, depth: usize, max: usize, out: &mut Vec<PathBuf>) {
    if depth > max {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for ent in rd.flatten() {
        let p = ent.path();
        if !p.is_dir() {
            continue;
        }
        let name = ent.file_name();
        let name = name.to_string_lossy();
        if name == "site-packages" || name == "dist-packages" {
            out.push(p);
        } else if !name.starts_with('.') || name == ".venv" {
            find_site_packages(&p, depth + 1, max, out);
        }
    }
}

/// Load one library by soname (the loader path: `LD_LIBRARY_PATH`, the ld cache).
fn preload_soname(lib: &Lib) -> Option<String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    for n in lib.names {
        // SAFETY: loading a system library; its initialisers are the vendor's.
        if let Ok(l) = unsafe { Library::open(Some(*n), RTLD_NOW | RTLD_GLOBAL) } {
            std::mem::forget(l);
            return Some(format!("{n} (loader path)"));
        }
    }
    None
}

/// Load one library from the first directory of `dirs` that holds it.
fn preload_from(lib: &Lib, dirs: &[PathBuf]) -> Option<String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    for d in dirs {
        for n in lib.names {
            let p = d.join(n);
            if p.exists() {
                // SAFETY: as above; the handle is leaked on purpose so the object stays mapped.
                if let Ok(l) = unsafe { Library::open(Some(&p), RTLD_NOW | RTLD_GLOBAL) } {
                    std::mem::forget(l);
                    return Some(p.display().to_string());
                }
            }
        }
    }
    None
}

/// The search lists, built at most once per process (two threads may ask: `prewarm` loads the
/// driver on one and the other libraries on another).
fn dirs(deep: bool) -> &'static [PathBuf] {
    static QUICK: OnceLock<Vec<PathBuf>> = OnceLock::new();
    static DEEP: OnceLock<Vec<PathBuf>> = OnceLock::new();
    let cell = if deep { &DEEP } else { &QUICK };
    cell.get_or_init(|| {
        let _s = tracing::info_span!("cuda.libsearch", deep).entered();
        search_dirs(deep)
    })
}

/// Soname first, then the cheap search list, then the deep one. The lists are built only when
/// a soname lookup fails.
fn preload(lib: &Lib) -> Option<String> {
    let span = tracing::info_span!("cuda.dlopen", lib = lib.what, from = tracing::field::Empty);
    let _e = span.enter();
    let found = preload_soname(lib)
        .or_else(|| preload_from(lib, dirs(false)))
        .or_else(|| preload_from(lib, dirs(true)));
    match &found {
        Some(f) => {
            span.record("from", f.as_str());
        }
        None => tracing::debug!(
            "{} not found in the loader path or {} search dirs",
            lib.what,
            dirs(true).len()
        ),
    }
    found
}

/// What was found, once per process.
#[derive(Clone, Debug)]
pub struct LibReport {
    pub driver: Option<String>,
    pub nvrtc: Option<String>,
    pub cublas_lt: Option<String>,
    pub cublas: Option<String>,
}

fn report() -> &'static LibReport {
    static R: OnceLock<LibReport> = OnceLock::new();
    R.get_or_init(|| {
        let driver = preload(&DRIVER);
        let nvrtc = preload(&NVRTC);
        // builtins sit beside libnvrtc and are found by it; preloading only helps odd layouts
        if nvrtc.is_some() {
            let _ = preload(&NVRTC_BUILTINS);
        }
        let cublas_lt = preload(&CUBLASLT);
        let cublas = preload(&CUBLAS);
        let r = LibReport {
            driver,
            nvrtc,
            cublas_lt,
            cublas,
        };
        tracing::debug!(?r, "CUDA libraries");
        r
    })
}

/// Where each CUDA library was loaded from (None = not found).
pub fn libraries() -> LibReport {
    report().clone()
}

/// The driver library alone, so `cuInit` and the context can start while the other (much
/// larger) libraries are still being loaded by [`libraries`] on another thread.
pub fn ensure_driver() -> Result<(), CudaError> {
    static DRIVER_ONLY: OnceLock<Option<String>> = OnceLock::new();
    let found = DRIVER_ONLY.get_or_init(|| preload(&DRIVER));
    // SAFETY: a presence probe; it only dlopens.
    if found.is_some() && unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::NoDriver(
            "libcuda.so.1 not found (no NVIDIA driver on this machine)".into(),
        ))
    }
}

/// NVRTC alone (enough to compile kernels without a GPU).
pub fn ensure_nvrtc() -> Result<(), CudaError> {
    let r = report();
    // SAFETY: presence probes only dlopen; they never call into the library.
    let ok = r.nvrtc.is_some() && unsafe { cudarc::nvrtc::sys::is_culib_present() };
    if ok {
        Ok(())
    } else {
        Err(CudaError::Library(
            "libnvrtc.so.13 not found (set STAPES_NVRTC_LIB to its path or directory, or LD_LIBRARY_PATH; \
             `pip install nvidia-cuda-nvrtc==13.0.88` provides it)"
                .into(),
        ))
    }
}

/// Driver, NVRTC, cuBLAS and cuBLASLt: everything the backend needs.
pub fn ensure_all() -> Result<(), CudaError> {
    let r = report();
    // SAFETY: as above.
    let driver_ok = r.driver.is_some() && unsafe { cudarc::driver::sys::is_culib_present() };
    if !driver_ok {
        return Err(CudaError::NoDriver(
            "libcuda.so.1 not found (no NVIDIA driver on this machine)".into(),
        ));
    }
    ensure_nvrtc()?;
    // SAFETY: as above.
    let blas_ok = r.cublas.is_some()
        && r.cublas_lt.is_some()
        && unsafe {
            cudarc::cublas::sys::is_culib_present() && cudarc::cublaslt::sys::is_culib_present()
        };
    if !blas_ok {
        return Err(CudaError::Library(
            "libcublas.so.13 / libcublasLt.so.13 not found (set STAPES_CUDA_LIBDIR or LD_LIBRARY_PATH)".into(),
        ));
    }
    Ok(())
}
