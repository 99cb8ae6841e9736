//! A sink plugin that writes nothing anywhere but a folder: every
//! `iggy_sink_consume` the real Iggy connectors runtime makes leaves its
//! three buffers, byte for byte, in `$FLUSS_SINK_CAPTURE_DIR/<n>/`
//! (`topic_metadata`, `messages_metadata`, `messages`; `n` counts the calls
//! from 0). The tests decode those bytes with the plugin's own decoder
//! (`tests/tests/iggy_runtime/captured.rs`), so that its reading of the
//! runtime's encoding is checked against bytes the runtime wrote, not only
//! against the tests' own encoder; the fuzz target `captured_buffers` starts
//! from them.
//!
//! It takes the runtime's C ABI as `docs/runtime-contract.md` states it;
//! every call returns `0` but a consume whose buffers cannot be kept (`1`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Calls of `iggy_sink_consume` so far, across instances.
static CONSUMES: AtomicU64 = AtomicU64::new(0);

/// The folder each call's buffers go to.
fn capture_dir() -> Option<PathBuf> {
    std::env::var_os("FLUSS_SINK_CAPTURE_DIR").map(PathBuf::from)
}

/// The `len` bytes at `ptr` (none when `ptr` is null).
///
/// # Safety
/// A non-null `ptr` points to `len` readable bytes for the call.
unsafe fn borrowed<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the runtime lends `len` bytes at `ptr` for the call.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// Opens an instance: nothing to do.
#[unsafe(no_mangle)]
pub extern "C" fn iggy_sink_open(
    _id: u32,
    _config_ptr: *const u8,
    _config_len: usize,
    _log: Option<extern "C" fn(u8, *const u8, usize, *const u8, usize)>,
) -> i32 {
    0
}

/// Keeps the call's three buffers in the next numbered folder.
///
/// # Safety
/// Each pointer points to its length of readable bytes for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn iggy_sink_consume(
    _id: u32,
    topic_meta_ptr: *const u8,
    topic_meta_len: usize,
    messages_meta_ptr: *const u8,
    messages_meta_len: usize,
    messages_ptr: *const u8,
    messages_len: usize,
) -> i32 {
    let Some(dir) = capture_dir() else {
        return 1;
    };
    let n = CONSUMES.fetch_add(1, Ordering::SeqCst);
    // Written aside, then renamed: a reader never sees half a call.
    let (writing, done) = (dir.join(format!("{n}.writing")), dir.join(n.to_string()));
    // SAFETY: the runtime lends the three buffers for the call.
    let buffers = unsafe {
        [
            ("topic_metadata", borrowed(topic_meta_ptr, topic_meta_len)),
            (
                "messages_metadata",
                borrowed(messages_meta_ptr, messages_meta_len),
            ),
            ("messages", borrowed(messages_ptr, messages_len)),
        ]
    };
    let kept = std::fs::create_dir_all(&writing)
        .and_then(|()| {
            buffers
                .iter()
                .try_for_each(|(name, bytes)| std::fs::write(writing.join(name), bytes))
        })
        .and_then(|()| std::fs::rename(&writing, &done));
    if kept.is_err() { 1 } else { 0 }
}

/// Closes an instance: nothing to do.
#[unsafe(no_mangle)]
pub extern "C" fn iggy_sink_close(_id: u32) -> i32 {
    0
}

/// The plugin's version, a static NUL-terminated string.
#[unsafe(no_mangle)]
pub extern "C" fn iggy_sink_version() -> *const std::ffi::c_char {
    c"runtime-capture".as_ptr()
}
