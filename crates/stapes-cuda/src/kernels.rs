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

/// Files with Hopper-only instructions (wgmma) behind `__CUDA_ARCH_FEAT_SM90_ALL`: compiled for
/// the arch-specific target `compute_90a` where the device is sm_90, so those kernels exist
/// there; elsewhere their entries compile empty and the backend never launches them.
const ARCH_SPECIFIC: &[&str] = &["i8gemm", "attn_wg"];

impl KernelFile {
    /// The NVRTC target for this file on a device of `arch` (`compute_90` → `compute_90a` for
    /// the files that use sm_90a features).
    pub fn target(&self, arch: &'static str) -> &'static str {
        if arch == "compute_90" && ARCH_SPECIFIC.contains(&self.name) {
            "compute_90a"
        } else {
            arch
        }
    }
}

pub const FILES: &[KernelFile] = &[
    KernelFile {
        name: "elementwise",
        source: include_str!("../kernels/elementwise.cu"),
        entries: &[
            "act",
            "binary",
            "affine",
            "rotary_half",
            "glu",
            "bias_rows",
            "mask_fill",
            "convert2d",
        ],
    },
    KernelFile {
        name: "norm",
        source: include_str!("../kernels/norm.cu"),
        entries: &[
            "layer_norm",
            "layer_norm_rows",
            "layer_norm_rows16",
            "layer_norm_rows16_gb",
            "ln_pair_rows16",
            "splitk_add_ln16",
            "rms_norm",
            "softmax",
            "argmax",
            "rel_shift_softmax",
            "rel_shift_softmax_rows",
        ],
    },
    KernelFile {
        name: "layout",
        source: include_str!("../kernels/layout.cu"),
        entries: &[
            "copy2d_b16",
            "copy2d_b32",
            "copy2d_b128",
            "transpose_b16",
            "transpose_b32",
            "heads",
        ],
    },
    KernelFile {
        name: "gemm_aux",
        source: include_str!("../kernels/gemm_aux.cu"),
        entries: &[
            "cast_f32_f16",
            "dequant_w8_f16",
            "quantize_rows_i8",
            "dequant_epilogue",
            "dequant_epilogue_add",
            "dequant_act_quant",
            "gemv_f16",
            "gemv_i8",
        ],
    },
    KernelFile {
        name: "fp8",
        source: include_str!("../kernels/fp8.cu"),
        entries: &[
            "fp8_weight_scale",
            "w8_to_fp8",
            "quant_fp8",
            "act_e4m3",
            "act8_e4m3",
        ],
    },
    KernelFile {
        name: "i8gemm",
        source: include_str!("../kernels/i8gemm.cu"),
        entries: &[
            "f8wg_n72s8",
            "f8wg_n144s6",
            "i8gemm_bm64_k64s3",
            "i8gemm_bm128_k64s3",
            "i8gemm_bm64_k128s4",
            "i8gemm_bm128_k128s3",
            "i8gemm_bm128_k64s3_w64",
            "i8gemm_bm64_k64s3_se",
            "i8gemm_bm128_k64s3_se",
            "i8gemm_bm64_k128s4_se",
            "i8gemm_bm128_k128s3_se",
            "i8gemm_bm128_k64s3_w64_se",
            "i8gemm_bm32_k64s4",
            "i8gemm_bm128_n256_k64s3_se",
            "i8gemm_bm128_n256_k128s3_se",
            "i8gemm_tma_n128s6",
            "i8gemm_tma_n256s4",
            "i8gemm_tma_p128s3x2",
        ],
    },
    KernelFile {
        name: "conv",
        source: include_str!("../kernels/conv.cu"),
        entries: &[
            "im2col_1d",
            "depthwise_conv1d",
            "conv2d_direct",
            "im2col_2d",
            "bias_channels",
        ],
    },
    KernelFile {
        name: "attention",
        source: include_str!("../kernels/attention.cu"),
        entries: &[
            "flash_attn_d64",
            "flash_attn_d64_b4",
            "flash_attn_d128",
            "attn_rows",
            "flash64_w8m1s2",
            "flash64_w8m1s3",
            "flash64_w4m2s2",
            "flash64_w4m2s3",
            "flash64_w4m1s2",
            "flash64_w4m1s3",
            "flash64_w8m2s2",
            "flash64_w8m2s3",
            "flash64s_w4m2s2",
            "flash64_combine",
        ],
    },
    KernelFile {
        name: "attn_wg",
        source: include_str!("../kernels/attn_wg.cu"),
        entries: &["awg64_s4", "awg64s_s3"],
    },
    KernelFile {
        name: "conformer",
        source: include_str!("../kernels/conformer.cu"),
        entries: &[
            "glu_dw_act",
            "glu_dw_act32",
            "glu_dw_act64",
            "rel_attn_inputs",
            "rel_attn_d64",
            "rel_attn_d128",
            "rel_attn_ks_d64",
            "rel_attn_ks_d128",
            "rel_attn_t_d64",
            "rel_attn_t_d128",
            "rel_attn_s_d128",
            "fc_sub_stem",
            "fc_sub_stem2",
            "fc_sub_stem4",
            "fc_dw_cl",
            "fc_dw_cl_h8",
            "ln_fused",
        ],
    },
    KernelFile {
        name: "step",
        source: include_str!("../kernels/step.cu"),
        entries: &[
            "embed_step_f32",
            "write_rows_step_f32",
            "attn_one_f32",
            "attn_step_f32",
            "attn_split_f32",
            "attn_split_kv16",
            "attn_combine_f32",
            "step_gemv_1",
            "step_gemv_2",
            "step_gemv_4",
            "step_gemv_8",
            "step_gemv_1_c1",
            "step_gemv_2_c1",
            "step_gemv_4_c1",
            "step_gemv_8_c1",
            "attn_step_packed_f32",
        ],
    },
    KernelFile {
        name: "transducer",
        source: include_str!("../kernels/transducer.cu"),
        entries: &[
            "transducer_frames",
            "transducer_advance",
            "transducer_embed",
            "transducer_keep",
            "lstm_pointwise",
            "transducer_joint_input",
            "transducer_gemv_f16",
            "transducer_gemv_i8",
        ],
    },
    KernelFile {
        name: "select",
        source: include_str!("../kernels/select.cu"),
        entries: &["select_topk", "select_stats", "select_split", "select_feed"],
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
    let arch = f.target(arch);
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

/// Whether kernels are loaded as machine code (`STAPES_CUDA_CUBIN=0`: as PTX, which the driver
/// compiles at every module load unless its own cache under `~/.nv` holds the result).
fn cubin_on() -> bool {
    std::env::var("STAPES_CUDA_CUBIN").map_or(true, |v| v.trim() != "0")
}

/// Compile one file to machine code (CUBIN) for the device's real architecture (`compute_90`
/// → `sm_90`), through the disk cache (`<file>-sm_90-<hash>.cubin`). A PTX module is compiled
/// again by the driver at load: 3.8 s for these files on the H200 when the driver's cache is
/// empty (a fresh machine or container), where a CUBIN loads in about a millisecond.
pub fn compile_cubin(f: &KernelFile, arch: &'static str) -> Result<Vec<u8>, CudaError> {
    let arch = f.target(arch);
    let span = tracing::info_span!(
        "cuda.nvrtc",
        file = f.name,
        target = "cubin",
        cache = tracing::field::Empty
    );
    let _e = span.enter();
    crate::loader::ensure_nvrtc()?;
    let sm = arch
        .strip_prefix("compute_")
        .map(|v| format!("sm_{v}"))
        .ok_or_else(|| CudaError::Compile {
            file: f.name,
            log: format!("`{arch}` is not a compute_XY target"),
        })?;
    let src = full_source(f);
    let (maj, min) = nvrtc_version();
    let ver = format!("{maj}.{min}");
    let hash = fnv1a(&[
        src.as_bytes(),
        sm.as_bytes(),
        OPTIONS.join(" ").as_bytes(),
        ver.as_bytes(),
    ]);
    let path = cache_dir().map(|d| d.join(format!("{}-{sm}-{hash:016x}.cubin", f.name)));
    if let Some(p) = &path {
        if let Ok(bin) = std::fs::read(p) {
            if bin.starts_with(b"\x7fELF") {
                span.record("cache", "hit");
                return Ok(bin);
            }
        }
    }
    span.record("cache", if path.is_some() { "miss" } else { "off" });
    let fail = |log: String| CudaError::Compile { file: f.name, log };
    let csrc = std::ffi::CString::new(src).map_err(|e| fail(e.to_string()))?;
    let name = std::ffi::CString::new(format!("{}.cu", f.name)).map_err(|e| fail(e.to_string()))?;
    let mut opts: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture={sm}"));
    let bin = std::panic::catch_unwind(|| -> Result<Vec<u8>, CudaError> {
        let prog = nvrtc::result::create_program(&csrc, Some(&name))
            .map_err(|e| fail(format!("nvrtcCreateProgram: {e:?}")))?;
        // SAFETY: `prog` is live until destroyed below; the CUBIN buffer has the size NVRTC
        // reports for it.
        let out = unsafe {
            match nvrtc::result::compile_program(prog, &opts) {
                Ok(()) => {
                    let mut n = 0usize;
                    nvrtc::sys::nvrtcGetCUBINSize(prog, &mut n)
                        .result()
                        .and_then(|_| {
                            let mut buf = vec![0u8; n];
                            nvrtc::sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast())
                                .result()
                                .map(|_| buf)
                        })
                        .map_err(|e| fail(format!("nvrtcGetCUBIN: {e:?}")))
                }
                Err(_) => Err(fail(
                    nvrtc::result::get_program_log(prog)
                        .map(|l| {
                            let bytes: Vec<u8> = l.iter().map(|&c| c as u8).collect();
                            String::from_utf8_lossy(&bytes).into_owned()
                        })
                        .unwrap_or_else(|e| format!("(no log: {e:?})")),
                )),
            }
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { nvrtc::result::destroy_program(prog) };
        out
    })
    .map_err(|_| CudaError::Library("NVRTC panicked (library or symbol missing)".into()))??;
    if let Some(p) = &path {
        // best effort, as for PTX
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bin).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok(bin)
}

/// Names of the kernels in a CUBIN (an ELF file): NVCC and NVRTC put each entry's code in a
/// section `.text.<name>`. Empty if the file is not a 64-bit little-endian ELF.
pub fn cubin_entries(bin: &[u8]) -> Vec<String> {
    let u16_at = |o: usize| {
        bin.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u32_at = |o: usize| {
        bin.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let u64_at = |o: usize| {
        bin.get(o..o + 8).and_then(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            usize::try_from(u64::from_le_bytes(a)).ok()
        })
    };
    let names = || -> Option<Vec<String>> {
        // ELFCLASS64, little endian
        if !bin.starts_with(b"\x7fELF") || bin.get(4) != Some(&2) || bin.get(5) != Some(&1) {
            return None;
        }
        let (shoff, shentsize, shnum, shstrndx) =
            (u64_at(0x28)?, u16_at(0x3a)?, u16_at(0x3c)?, u16_at(0x3e)?);
        let header = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
        let strtab = u64_at(header(shstrndx)? + 0x18)?;
        let mut out = Vec::new();
        for i in 0..shnum {
            let h = header(i)?;
            let start = strtab.checked_add(u32_at(h)?)?;
            let name = bin.get(start..)?;
            let name = &name[..name.iter().position(|&c| c == 0)?];
            if let Some(k) = name.strip_prefix(b".text.") {
                out.push(String::from_utf8_lossy(k).into_owned());
            }
        }
        Some(out)
    };
    names().unwrap_or_default()
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

/// A file's code for the module loader, and the entry points it defines: CUBIN where NVRTC
/// makes one and its entries can be read, else PTX.
fn load_code(f: &KernelFile, arch: &'static str) -> Result<(Ptx, Vec<String>), CudaError> {
    if cubin_on() {
        match compile_cubin(f, arch) {
            Ok(bin) => {
                let names = cubin_entries(&bin);
                if f.entries.iter().all(|e| names.iter().any(|n| n == e)) {
                    return Ok((Ptx::from_binary(bin), names));
                }
                tracing::debug!(file = f.name, "CUBIN entries unreadable; loading PTX");
            }
            Err(e) => tracing::debug!(file = f.name, "no CUBIN ({e}); loading PTX"),
        }
    }
    let ptx = compile(f, arch)?;
    let names = ptx_entries(&ptx);
    Ok((Ptx::from_src(ptx), names))
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
        let ptxs: Vec<Result<(Ptx, Vec<String>), CudaError>> = std::thread::scope(|s| {
            let handles: Vec<_> = FILES
                .iter()
                .map(|f| {
                    let parent = parent.clone();
                    s.spawn(move || parent.in_scope(|| load_code(f, arch)))
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
            let (ptx, names) = ptx?;
            let _s =
                tracing::info_span!("cuda.module", file = f.name, entries = names.len()).entered();
            let module = match ctx.load_module(ptx) {
                Ok(m) => m,
                // a CUBIN this driver cannot load (made by a newer NVRTC): PTX, as before
                Err(e) if cubin_on() => {
                    tracing::debug!(file = f.name, "CUBIN not loadable ({e:?}); loading PTX");
                    ctx.load_module(Ptx::from_src(compile(f, arch)?))
                        .map_err(|e| CudaError::driver("load_module", e))?
                }
                Err(e) => return Err(CudaError::driver("load_module", e)),
            };
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
