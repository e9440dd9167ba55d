//! The CUDA C kernels (`kernels/*.cu`, embedded), compiled by NVRTC for the device's architecture
//! at first use and cached on disk as PTX, keyed by file, arch and a hash of source + options +
//! NVRTC version.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{self, CompileOptions, Ptx};

use crate::CudaError;

const COMMON: &str = include_str!("../kernels/common.cuh");

/// One `.cu` file and the entry points the backend loads from it.
pub struct KernelFile {
    pub name: &'static str,
    pub source: &'static str,
    pub entries: &'static [&'static str],
}

pub const FILES: &[KernelFile] = &[
    KernelFile {
        name: "elementwise",
        source: include_str!("../kernels/elementwise.cu"),
        entries: &[
            "act_f32",
            "binary_f32",
            "affine_f32",
            "glu_f32",
            "bias_rows_f32",
            "mask_fill_f32",
        ],
    },
    KernelFile {
        name: "norm",
        source: include_str!("../kernels/norm.cu"),
        entries: &[
            "layer_norm_f32",
            "layer_norm_rows_f32",
            "rms_norm_f32",
            "softmax_f32",
            "argmax_f32",
            "rel_shift_softmax_f32",
        ],
    },
    KernelFile {
        name: "layout",
        source: include_str!("../kernels/layout.cu"),
        entries: &["copy2d_f32", "copy2d_f32x4", "transpose_f32", "heads_f32"],
    },
    KernelFile {
        name: "gemm_aux",
        source: include_str!("../kernels/gemm_aux.cu"),
        entries: &[
            "cast_f32_f16",
            "quantize_rows_i8",
            "dequant_epilogue",
            "gemv_f16",
            "gemv_i8",
        ],
    },
    KernelFile {
        name: "conv",
        source: include_str!("../kernels/conv.cu"),
        entries: &["im2col_1d", "depthwise_conv1d", "conv2d_direct"],
    },
    KernelFile {
        name: "attention",
        source: include_str!("../kernels/attention.cu"),
        entries: &[
            "flash_attn_d64",
            "flash_attn_d64_b4",
            "flash_attn_d128",
            "attn_rows_f32",
        ],
    },
    KernelFile {
        name: "step",
        source: include_str!("../kernels/step.cu"),
        entries: &[
            "embed_step_f32",
            "write_rows_step_f32",
            "attn_step_f32",
            "attn_split_f32",
            "attn_combine_f32",
        ],
    },
];

const OPTIONS: &[&str] = &["--std=c++17"];

/// The full translation unit NVRTC sees for a file.
pub fn full_source(f: &KernelFile) -> String {
    format!("{COMMON}\n#line 1 \"{}.cu\"\n{}", f.name, f.source)
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter() {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `$STAPES_CACHE/cuda`, else `~/.cache/stapes/cuda`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Ok(c) = std::env::var("STAPES_CACHE") {
        if !c.is_empty() {
            return Some(PathBuf::from(c).join("cuda"));
        }
    }
    std::env::var("HOME")
        .ok()
        .map(|h| PathBuf::from(h).join(".cache/stapes/cuda"))
}

fn nvrtc_version() -> (i32, i32) {
    let (mut maj, mut min) = (0i32, 0i32);
    // SAFETY: NVRTC was checked present by the caller; the call only writes two ints.
    unsafe { nvrtc::sys::nvrtcVersion(&mut maj, &mut min) };
    (maj, min)
}

/// Compile one file for `arch` (e.g. `compute_90`), through the disk cache. Needs only libnvrtc.
pub fn compile(f: &KernelFile, arch: &'static str) -> Result<String, CudaError> {
    let span = tracing::info_span!("cuda.nvrtc", file = f.name, cache = tracing::field::Empty);
    let _e = span.enter();
    crate::loader::ensure_nvrtc()?;
    let src = full_source(f);
    let (maj, min) = nvrtc_version();
    let ver = format!("{maj}.{min}");
    let hash = fnv1a(&[
        src.as_bytes(),
        arch.as_bytes(),
        OPTIONS.join(" ").as_bytes(),
        ver.as_bytes(),
    ]);
    let path = cache_dir().map(|d| d.join(format!("{}-{arch}-{hash:016x}.ptx", f.name)));
    if let Some(p) = &path {
        if let Ok(ptx) = std::fs::read_to_string(p) {
            if ptx.contains(".entry") {
                span.record("cache", "hit");
                return Ok(ptx);
            }
        }
    }
    span.record("cache", if path.is_some() { "miss" } else { "off" });
    let opts = CompileOptions {
        arch: Some(arch),
        options: OPTIONS.iter().map(|s| s.to_string()).collect(),
        name: Some(format!("{}.cu", f.name)),
        ..Default::default()
    };
    let ptx = std::panic::catch_unwind(|| nvrtc::compile_ptx_with_opts(&src, opts))
        .map_err(|_| CudaError::Library("NVRTC panicked (library or symbol missing)".into()))?
        .map_err(|e| match e {
            nvrtc::CompileError::CompileError { log, .. } => CudaError::Compile {
                file: f.name,
                log: log.to_string_lossy().into_owned(),
            },
            other => CudaError::Compile {
                file: f.name,
                log: format!("{other:?}"),
            },
        })?
        .to_src();
    if let Some(p) = &path {
        // best effort: a read-only cache only costs a recompile next time
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &ptx).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok(ptx)
}

/// Compile every kernel file for `arch`; returns (file, PTX bytes, entry count). For CI checks.
pub fn compile_all(arch: &'static str) -> Result<Vec<(&'static str, usize, usize)>, CudaError> {
    FILES
        .iter()
        .map(|f| {
            let ptx = compile(f, arch)?;
            let entries = ptx.lines().filter(|l| l.contains(".entry")).count();
            for e in f.entries {
                if !ptx.contains(e) {
                    return Err(CudaError::Compile {
                        file: f.name,
                        log: format!("entry {e} missing from PTX"),
                    });
                }
            }
            Ok((f.name, ptx.len(), entries))
        })
        .collect()
}

/// Every entry point, loaded into the context.
pub struct Kernels {
    funcs: HashMap<String, CudaFunction>,
}

/// Names of the `.entry` points in a PTX module.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix(".visible .entry ")?;
            Some(
                rest.split(|c: char| c == '(' || c.is_whitespace())
                    .next()?
                    .to_string(),
            )
        })
        .collect()
}

impl Kernels {
    pub fn load(ctx: &Arc<CudaContext>, arch: &'static str) -> Result<Self, CudaError> {
        let _k = tracing::info_span!("cuda.kernels", files = FILES.len()).entered();
        let mut funcs = HashMap::new();
        let parent = tracing::Span::current();
        // one thread per file: a cold cache compiles them side by side (NVRTC programs are
        // independent); a warm one only reads files
        let ptxs: Vec<Result<String, CudaError>> = std::thread::scope(|s| {
            let handles: Vec<_> = FILES
                .iter()
                .map(|f| {
                    let parent = parent.clone();
                    s.spawn(move || parent.in_scope(|| compile(f, arch)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(CudaError::Library("NVRTC compile thread panicked".into()))
                    })
                })
                .collect()
        });
        for (f, ptx) in FILES.iter().zip(ptxs) {
            let ptx = ptx?;
            let names = ptx_entries(&ptx);
            let _s =
                tracing::info_span!("cuda.module", file = f.name, entries = names.len()).entered();
            let module = ctx
                .load_module(Ptx::from_src(ptx))
                .map_err(|e| CudaError::driver("load_module", e))?;
            // every entry the PTX defines, so a kernel added to a .cu file cannot be forgotten here
            for e in names {
                let func = module
                    .load_function(&e)
                    .map_err(|err| CudaError::driver("load_function", err))?;
                funcs.insert(e, func);
            }
            for e in f.entries {
                if !funcs.contains_key(*e) {
                    return Err(CudaError::MissingKernel(e));
                }
            }
        }
        Ok(Self { funcs })
    }

    pub fn get(&self, name: &'static str) -> Result<&CudaFunction, CudaError> {
        self.funcs.get(name).ok_or(CudaError::MissingKernel(name))
    }
}
