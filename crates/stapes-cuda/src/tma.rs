//! What the Hopper kernels (`i8gemm_tma_*`, `awg64_*`) need from the host: TMA descriptions of
//! their operands and the opt-in to more than 48 KiB of dynamic shared memory. A child module of
//! `backend`, like `i8gemm`.

use cudarc::driver::sys::{
    cuTensorMapEncodeTiled, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill as F,
    CUtensorMapInterleave as I, CUtensorMapL2promotion as L, CUtensorMapSwizzle as S,
};
use stapes_core::Result;

use super::CudaBackend;

/// A tiled TMA description of the tensor at `ptr`: `dims` innermost first, `strides` the bytes
/// from one index of dims 1.. to the next, `boxes` the box copied per load. Boxes land in shared
/// memory in the 128-byte swizzle the kernels' wgmma descriptors read (the innermost box is 128
/// bytes); reads outside `dims` fill zeros.
pub(crate) fn tiled_map(
    dtype: CUtensorMapDataType,
    ptr: u64,
    dims: &[u64],
    strides: &[u64],
    boxes: &[u32],
) -> Result<CUtensorMap> {
    let rank = dims.len();
    if !(1..=5).contains(&rank) || strides.len() + 1 != rank || boxes.len() != rank {
        return Err(stapes_core::Error::shape(
            "tiled_map",
            format!("dims {dims:?}, strides {strides:?}, boxes {boxes:?}"),
        ));
    }
    let steps = [1u32; 5];
    let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
    // SAFETY: dims, boxes and steps hold `rank` entries and strides `rank - 1` (checked above);
    // the map is written by the call and read only on success.
    unsafe {
        cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            dtype,
            rank as u32,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            I::CU_TENSOR_MAP_INTERLEAVE_NONE,
            S::CU_TENSOR_MAP_SWIZZLE_128B,
            L::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            F::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
        .map_err(|e| crate::CudaError::driver("cuTensorMapEncodeTiled", e))?;
        Ok(map.assume_init())
    }
}

impl CudaBackend {
    /// Lets kernel `name` launch with `bytes` of dynamic shared memory: where static and dynamic
    /// together pass 48 KiB a kernel must opt in, once per function of this backend (and again
    /// for a larger size).
    pub(crate) fn allow_dyn_smem(&self, name: &'static str, bytes: usize) -> Result<()> {
        // static shared memory counts against the default limit too, so any dynamic size asks
        if bytes == 0 {
            return Ok(());
        }
        let f = self.kernels.get(name)?;
        let key = f.cu_function() as usize;
        let mut raised = self.smem_raised.lock().unwrap_or_else(|p| p.into_inner());
        if !raised.iter().any(|&(k, b)| k == key && b >= bytes) {
            self.bind()?;
            f.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
            .map_err(|e| crate::CudaError::driver("cuFuncSetAttribute", e))?;
            raised.retain(|&(k, _)| k != key);
            raised.push((key, bytes));
        }
        Ok(())
    }
}
