//! GPU memory of a training process: keeping freed device memory for reuse, and reading the peak.
//!
//! candle allocates through CUDA's stream-ordered allocator (`cuMemAllocAsync`) from the device's
//! default memory pool. That pool's release threshold is 0 by default, so every synchronisation
//! hands all freed memory back to the driver and the next step allocates it again. A training
//! loop frees and reallocates the same sizes every step, so the worker keeps what it freed, as
//! PyTorch's caching allocator does. The pool also counts the peak of memory in use, which is
//! what a worker must have free on the card to run the job (`torch.cuda.max_memory_allocated` on
//! the PyTorch side).
//!
//! On a CPU device (and in builds without the `cuda` feature) both are no-ops.

use candle_core::Device;

use crate::error::Result;

/// Lets the device's memory pool keep freed memory instead of returning it to the driver at each
/// synchronisation (no-op off CUDA).
pub fn keep_freed_memory(device: &Device) -> Result<()> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(cuda) = device {
        return cuda_pool::set_release_threshold(cuda, u64::MAX);
    }
    let _ = device;
    Ok(())
}

/// The peak of device memory in use by this process's allocations since it started, MiB; `None`
/// off CUDA.
pub fn peak_memory_mb(device: &Device) -> Result<Option<f64>> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(cuda) = device {
        return cuda_pool::used_high(cuda).map(|bytes| Some(bytes as f64 / (1024.0 * 1024.0)));
    }
    let _ = device;
    Ok(None)
}

#[cfg(feature = "cuda")]
mod cuda_pool {
    use candle_core::CudaDevice;
    use candle_core::cuda_backend::cudarc::driver::sys;

    use crate::error::Result;

    /// A driver call's failure, as the device error candle would report.
    fn check(what: &str, code: sys::CUresult) -> Result<()> {
        if code == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(candle_core::Error::Msg(format!("CUDA: {what} failed: {code:?}")).into())
        }
    }

    fn default_pool(device: &CudaDevice) -> Result<sys::CUmemoryPool> {
        let stream = device.cuda_stream();
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `pool` is a valid out-pointer and the device handle comes from a live context.
        let code =
            unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, stream.context().cu_device()) };
        check("cuDeviceGetDefaultMemPool", code)?;
        Ok(pool)
    }

    pub(super) fn set_release_threshold(device: &CudaDevice, bytes: u64) -> Result<()> {
        let pool = default_pool(device)?;
        let mut value = bytes;
        // SAFETY: the release threshold attribute is a u64 the driver reads from `value`.
        let code = unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut value as *mut u64).cast(),
            )
        };
        check("setting the memory pool's release threshold", code)
    }

    pub(super) fn used_high(device: &CudaDevice) -> Result<u64> {
        let pool = default_pool(device)?;
        let mut value = 0u64;
        // SAFETY: the used-memory high-water mark attribute is a u64 the driver writes to `value`.
        let code = unsafe {
            sys::cuMemPoolGetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                (&mut value as *mut u64).cast(),
            )
        };
        check("reading the memory pool's peak", code)?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_the_cpu_there_is_no_pool_to_keep_and_no_gpu_peak() {
        keep_freed_memory(&Device::Cpu).unwrap();
        assert_eq!(peak_memory_mb(&Device::Cpu).unwrap(), None);
    }
}
