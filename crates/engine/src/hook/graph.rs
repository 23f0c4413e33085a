//! Walks of llama.cpp's compute graph from the node the hook is handed.

use std::ffi::CStr;

use llama_cpp_sys_2::{ggml_tensor, GGML_OP_MUL_MAT};

const ROUTER_SUFFIX: &[u8] = b"ffn_gate_inp.weight";

/// A ggml tensor's name.
pub fn name(t: &ggml_tensor) -> &[u8] {
    // SAFETY: ggml keeps `name` NUL-terminated within its fixed-size array.
    unsafe { CStr::from_ptr(t.name.as_ptr()) }.to_bytes()
}

/// The router matmul's input among the ancestors of a `ffn_moe_topk` node: a MUL_MAT whose
/// weight is `*ffn_gate_inp.weight`. A breadth-first walk over at most `MAX_VISIT`
/// ancestors (grouped routing puts about a dozen nodes between the two); allocation-free.
pub fn router_input(topk: &ggml_tensor) -> Option<&ggml_tensor> {
    const MAX_VISIT: usize = 96;
    let mut queue: [*const ggml_tensor; MAX_VISIT] = [std::ptr::null(); MAX_VISIT];
    queue[0] = topk;
    let (mut head, mut tail) = (0, 1);
    while head < tail {
        // SAFETY: graph nodes and their sources stay alive during the callback; the queue
        // holds only non-null pointers taken from them.
        let t = unsafe { &*queue[head] };
        head += 1;
        if t.op == GGML_OP_MUL_MAT && !t.src[0].is_null() && !t.src[1].is_null() {
            // SAFETY: as above.
            let (w, x) = unsafe { (&*t.src[0], &*t.src[1]) };
            if name(w).ends_with(ROUTER_SUFFIX) {
                return Some(x);
            }
        }
        for p in std::iter::once(t.view_src).chain(t.src) {
            let p = p as *const ggml_tensor;
            if !p.is_null() && tail < MAX_VISIT && !queue[..tail].contains(&p) {
                queue[tail] = p;
                tail += 1;
            }
        }
    }
    None
}
