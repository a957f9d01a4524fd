//! The libFuzzer glue of the fuzz targets, for the stable toolchain: what
//! `libfuzzer-sys` does, without its build (see build.rs).
//!
//! - [`fuzz_target!`] defines `LLVMFuzzerTestOneInput` around a target of
//!   [`harness`], and makes a panic anywhere (any thread) abort, so libFuzzer records
//!   the input as a crash.
//! - Without a sanitizer runtime nothing tells libFuzzer about single allocations, so
//!   `-malloc_limit_mb` would not work: the global allocator here reports every large
//!   request to the hook libFuzzer installs through
//!   `__sanitizer_install_malloc_and_free_hooks` (which a sanitizer would provide),
//!   *before* allocating, so an oversized request is an `oom-` finding with its input.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "../harness.rs"]
pub mod harness;

/// libFuzzer's malloc hook, as an address (0: not installed).
static MALLOC_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Requests below this are not reported: libFuzzer's limit is in MiB anyway.
const REPORT_FROM: usize = 1 << 20;

type MallocHook = unsafe extern "C" fn(*const u8, usize);

/// Called by the `__sanitizer_install_malloc_and_free_hooks` that [`fuzz_target!`]
/// defines.
pub fn install_malloc_hook(hook: Option<MallocHook>) {
    MALLOC_HOOK.store(hook.map_or(0, |h| h as usize), Ordering::SeqCst);
}

fn report(size: usize) {
    if size < REPORT_FROM {
        return;
    }
    let hook = MALLOC_HOOK.load(Ordering::Relaxed);
    if hook != 0 {
        // SAFETY: the address was stored from a `MallocHook` by `install_malloc_hook`.
        let hook: MallocHook = unsafe { std::mem::transmute::<usize, MallocHook>(hook) };
        // SAFETY: libFuzzer's hook only reads the size; the pointer is not used.
        unsafe { hook(std::ptr::null(), size) };
    }
}

struct Limited;

// SAFETY: every call is forwarded to `System` unchanged.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        report(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        report(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        report(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Limited = Limited;

/// Makes any panic abort the process once the default hook has printed it.
pub fn abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        std::process::abort();
    }));
}

/// Defines the libFuzzer entry points for `target: fn(&[u8])`.
#[macro_export]
macro_rules! fuzz_target {
    ($target:path) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn LLVMFuzzerInitialize(
            _argc: *mut std::ffi::c_int,
            _argv: *mut *mut *mut std::ffi::c_char,
        ) -> std::ffi::c_int {
            $crate::abort_on_panic();
            0
        }

        /// # Safety
        /// `data` points at `size` readable bytes (libFuzzer's contract).
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn LLVMFuzzerTestOneInput(
            data: *const u8,
            size: usize,
        ) -> std::ffi::c_int {
            let input: &[u8] = if size == 0 {
                &[]
            } else {
                // SAFETY: libFuzzer passes `size` readable bytes at `data`.
                unsafe { std::slice::from_raw_parts(data, size) }
            };
            $target(input);
            0
        }

        /// Defined here, in the binary, so it overrides libFuzzer's weak reference.
        #[unsafe(no_mangle)]
        pub extern "C" fn __sanitizer_install_malloc_and_free_hooks(
            malloc_hook: Option<unsafe extern "C" fn(*const u8, usize)>,
            _free_hook: Option<unsafe extern "C" fn(*const u8)>,
        ) -> std::ffi::c_int {
            $crate::install_malloc_hook(malloc_hook);
            1
        }
    };
}
