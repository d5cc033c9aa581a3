//! Process-wide settings for tensor work, applied by each binary that trains or scores
//! (`shardwork`, `shardwork-node`) before its first thread starts.
//!
//! ## The allocator
//!
//! Training and scoring allocate and free tensors of one to tens of MiB for every operation.
//! glibc serves allocations above its mmap threshold with a fresh `mmap` and returns them with
//! `munmap`, and trims the heap top eagerly, so each operation paid page faults and page
//! zeroing again: 38% of a held-out scoring's CPU time was in the kernel. Raising the
//! threshold to its maximum and keeping freed memory in the heap lets the allocator reuse it
//! (held-out scoring of the demo job: 2.2 s -> 1.7 s; sys time 1.3 s -> 0.5 s). The price is
//! that the process keeps up to `TRIM_THRESHOLD` of freed memory instead of returning it.
//!
//! `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` and `MALLOC_TOP_PAD_` in the environment
//! still win: a setting given there is left alone.
//!
//! ## candle's element-wise thread pool
//!
//! candle runs element-wise ops on its own pool of `threads − 1` workers beside rayon's (gemm and
//! the fused kernels). After each op a pool worker spins 25,000 times before it parks, about
//! half a millisecond, and on a machine with as many cores as threads that spin takes the core
//! the next matrix product needed: 31% of a MiniLM training step's CPU time was that spin (perf,
//! 2-core AMD EPYC). Parking after 1,000 spins gave +15% tokens/s on MiniLM classification and
//! +24% on SmolLM2 SFT there; 100 was slower than the default (each op then paid a wake-up).
//! `CANDLE_BARRIER_POOL_SPIN_LIMIT` in the environment still wins.
//!
//! ## The thread count of every matrix product
//!
//! candle asks how many threads a matrix product may use on every product (as does
//! [`crate::fused::matmul`]), and unless `RAYON_NUM_THREADS` is set it counts the physical cores
//! by reading and parsing `/proc/cpuinfo` each time: 2.1% of all CPU samples of the README's
//! demo (perf, 2-core AMD EPYC Zen 4), in workers and validator alike (`bench train` never
//! showed it: it sets the variable for its children). The count is now taken once, at start,
//! and written to `RAYON_NUM_THREADS`. rayon reads that variable too, for the size of its global
//! pool, whose own default is the logical CPUs; where the two counts differ (SMT), the global
//! pool is built at start with rayon's default, so neither library's thread count changes.
//! `RAYON_NUM_THREADS` in the environment still wins.

/// glibc's largest mmap threshold on 64-bit (`HEAP_MAX_SIZE / 2`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 32 << 20;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 512 << 20;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TOP_PAD: libc::c_int = 64 << 20;

/// Spins of an idle candle pool worker before it parks (candle's default: 25,000).
const CANDLE_SPIN_LIMIT: &str = "1000";

/// Applies the three settings. Call it first thing in `main`.
///
/// # Safety
///
/// No other thread may exist yet: this writes the process environment, which another thread
/// reading it at the same time would race with.
pub unsafe fn prepare_for_tensor_work() {
    keep_freed_tensor_memory();
    // SAFETY: the caller guarantees that no other thread exists.
    unsafe { park_idle_candle_workers_sooner() };
    // SAFETY: as above.
    unsafe { count_cores_once() };
}

/// # Safety
///
/// As [`prepare_for_tensor_work`]: it writes the environment, then may start rayon's pool.
unsafe fn count_cores_once() {
    const VARIABLE: &str = "RAYON_NUM_THREADS";
    if std::env::var_os(VARIABLE).is_some() {
        return;
    }
    // What candle would count on each product (physical cores, or its CPU mask), counted once.
    let products = candle_core::utils::get_num_threads();
    let logical = std::thread::available_parallelism().map_or(1, usize::from);
    // SAFETY: no other thread exists yet (this function's contract).
    unsafe { std::env::set_var(VARIABLE, products.to_string()) };
    if products != logical {
        // rayon would now size its global pool by the variable: keep its own default. An
        // error means a pool already exists, which then keeps its size as well.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(logical)
            .build_global();
    }
}

/// # Safety
///
/// As [`prepare_for_tensor_work`]. candle reads the variable when its pool first starts.
unsafe fn park_idle_candle_workers_sooner() {
    const VARIABLE: &str = "CANDLE_BARRIER_POOL_SPIN_LIMIT";
    if std::env::var_os(VARIABLE).is_none() {
        // SAFETY: no other thread exists (this function's contract).
        unsafe { std::env::set_var(VARIABLE, CANDLE_SPIN_LIMIT) };
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_tensor_memory() {
    let settings = [
        (
            "MALLOC_MMAP_THRESHOLD_",
            libc::M_MMAP_THRESHOLD,
            MMAP_THRESHOLD,
        ),
        (
            "MALLOC_TRIM_THRESHOLD_",
            libc::M_TRIM_THRESHOLD,
            TRIM_THRESHOLD,
        ),
        ("MALLOC_TOP_PAD_", libc::M_TOP_PAD, TOP_PAD),
    ];
    for (variable, parameter, value) in settings {
        if std::env::var_os(variable).is_none() {
            // SAFETY: mallopt only changes allocator parameters; it is called before any other
            // thread exists. A refused value (0 returned) leaves glibc's default, which is safe.
            unsafe {
                libc::mallopt(parameter, value);
            }
        }
    }
}

/// Other platforms keep their allocator's defaults.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_tensor_memory() {}
