#include "llama.cpp/include/llama.h"
#include "llama.cpp/ggml/include/gguf.h"

#ifdef LLAMA_RS_BUILD_COMMON
#include "wrapper_common.h"
#endif
