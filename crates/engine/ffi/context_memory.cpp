// What llama.cpp reserved for one context, from its own accounting: the C side of
// `hook::memory`. llama_get_memory_breakdown is C++ (llama-ext.h, a std::map per buffer
// type), so this sums it into plain integers behind a C ABI. Nothing here allocates beyond
// the map llama.cpp returns, and no exception crosses into Rust.

#include "llama-ext.h"

#include <cstddef>

extern "C" {

// Compute buffers and context memory (KV cache, recurrent state) over every buffer type.
// Returns false (and leaves the outputs alone) if llama.cpp threw.
bool epm_context_memory(const struct llama_context * ctx, size_t * compute, size_t * context) noexcept {
    try {
        size_t c = 0;
        size_t k = 0;
        for (const auto & entry : llama_get_memory_breakdown(ctx)) {
            c += entry.second.compute;
            k += entry.second.context;
        }
        *compute = c;
        *context = k;
        return true;
    } catch (...) {
        return false;
    }
}

}
