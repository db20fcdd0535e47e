// The ExpNeg paths linked into the exp_accuracy harness: each exp_path.cc object registers its own.
#pragma once
#include <cstddef>

namespace exp_paths {
using Block = void (*)(const float* in, float* out, size_t n);
bool Register(const char* isa, Block block);
}  // namespace exp_paths
