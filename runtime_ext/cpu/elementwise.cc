#include "cpu/elementwise.h"

#include <algorithm>
#include <cstdint>

namespace ascend_grad {

bool BroadcastPlan::Build(const std::vector<int64_t>& dy_shape, const std::vector<int64_t>& x_shape) {
  const size_t rank = dy_shape.size() > x_shape.size() ? dy_shape.size() : x_shape.size();
  std::vector<int64_t> a(rank - dy_shape.size(), 1), b(rank - x_shape.size(), 1);
  a.insert(a.end(), dy_shape.begin(), dy_shape.end());
  b.insert(b.end(), x_shape.begin(), x_shape.end());
  out_shape.assign(rank, 1);
  // element strides of each input in its own (padded) shape; 0 where it is stretched
  std::vector<int64_t> dims, sa, sb;
  int64_t stride_a = 1, stride_b = 1;
  for (size_t k = rank; k-- > 0;) {
    if (a[k] != b[k] && a[k] != 1 && b[k] != 1) return false;
    out_shape[k] = a[k] == 1 ? b[k] : a[k];
    if (out_shape[k] != 1) {
      dims.insert(dims.begin(), out_shape[k]);
      sa.insert(sa.begin(), a[k] == 1 ? 0 : stride_a);
      sb.insert(sb.begin(), b[k] == 1 ? 0 : stride_b);
    }
    // (an input's stride past its outermost dim is its element count: may overflow only if unchecked)
    if (!CheckedMul(stride_a, a[k], &stride_a) || !CheckedMul(stride_b, b[k], &stride_b)) return false;
  }
  // merge a dim into the one inside it when both inputs step through them as one
  outer_dims.clear();
  dy_strides.clear();
  x_strides.clear();
  for (size_t k = 0; k < dims.size(); ++k) {
    const bool last = k + 1 == dims.size();
    int64_t step_a = 0, step_b = 0, merged = 0;
    if (!last && CheckedMul(sa[k + 1], dims[k + 1], &step_a) && CheckedMul(sb[k + 1], dims[k + 1], &step_b) &&
        sa[k] == step_a && sb[k] == step_b) {
      if (!CheckedMul(dims[k + 1], dims[k], &merged)) return false;
      dims[k + 1] = merged;
      continue;
    }
    outer_dims.push_back(dims[k]);
    dy_strides.push_back(sa[k]);
    x_strides.push_back(sb[k]);
  }
  run = 1;
  dy_repeats = x_repeats = true;
  if (!outer_dims.empty()) {  // the innermost dim is the run
    run = outer_dims.back();
    dy_repeats = dy_strides.back() == 0;
    x_repeats = x_strides.back() == 0;
    outer_dims.pop_back();
    dy_strides.pop_back();
    x_strides.pop_back();
  }
  if (!CheckedProduct(outer_dims, &rows)) return false;
  int64_t elements = 0;
  size_t bytes = 0;  // (the output, in float: the widest element)
  return CheckedMul(rows, run, &elements) && CheckedBytes(elements, sizeof(float), &bytes);
}

namespace {
// 16 Ki elements (64 KiB of float per array): enough to amortise a task, small enough to balance.
constexpr int64_t kChunk = 16384;
constexpr uintptr_t kLineBytes = 64;
}  // namespace

OrtStatus* RunElementwise(OrtKernelContext* context, ElementwiseFn fn, const BroadcastPlan& plan, const TensorView& dy,
                          DType dy_type, const TensorView& x, DType x_type, void* out, DType out_type) {
  const int64_t pieces_per_row = (plan.run + kChunk - 1) / kChunk;
  const int64_t rows_per_task = plan.run >= kChunk ? 1 : (kChunk / (plan.run ? plan.run : 1));
  // (Build checked rows * run: these products are no larger)
  int64_t tasks = (plan.rows + rows_per_task - 1) / rows_per_task, elements = 0;
  if (plan.run >= kChunk && !CheckedMul(plan.rows, pieces_per_row, &tasks)) return InternalError("elementwise", "task count overflows", false);
  if (!CheckedMul(plan.rows, plan.run, &elements)) return InternalError("elementwise", "element count overflows", false);
  const auto* dy_bytes = static_cast<const unsigned char*>(dy.data);
  const auto* x_bytes = static_cast<const unsigned char*>(x.data);
  auto* out_bytes = static_cast<unsigned char*>(out);
  const size_t dy_size = DTypeSize(dy_type), x_size = DTypeSize(x_type), out_size = DTypeSize(out_type);
  size_t out_bytes_total = 0;
  const bool stream = CheckedBytes(elements, out_size, &out_bytes_total) && out_bytes_total >= static_cast<size_t>(StreamBytes());

  // (index arithmetic below stays inside the element counts Build checked)
  auto row_piece = [&](int64_t row, int64_t start, int64_t count) {
    int64_t dy_offset = 0, x_offset = 0, rest = row;
    for (size_t k = plan.outer_dims.size(); k-- > 0;) {
      const int64_t index = rest % plan.outer_dims[k];
      rest /= plan.outer_dims[k];
      dy_offset += index * plan.dy_strides[k];
      x_offset += index * plan.x_strides[k];
    }
    if (!plan.dy_repeats) dy_offset += start;
    if (!plan.x_repeats) x_offset += start;
    fn(dy_bytes + dy_offset * dy_size, plan.dy_repeats, x_bytes + x_offset * x_size, plan.x_repeats,
       out_bytes + (row * plan.run + start) * out_size, static_cast<size_t>(count), stream);
  };
  // Pieces of a long row begin on a cache line of the output (the first takes the elements before
  // its first line too): a line two pieces share takes a partial, cached store from each, and on
  // one thread those stalled the non-temporal stores around them (16M float SiluBackward, Intel
  // Xeon, C++ loop, output 16 bytes into its page: 10.0 ms in pieces vs 9.3 as one piece); on two
  // threads the cores would also write one line.
  auto line_shift = [&](int64_t row) -> int64_t {
    const auto address = reinterpret_cast<uintptr_t>(out_bytes + row * plan.run * out_size);
    const uintptr_t bytes = (kLineBytes - address % kLineBytes) % kLineBytes;
    return bytes % out_size == 0 ? static_cast<int64_t>(bytes / out_size) : 0;
  };
  auto task = [&](size_t t) {
    const int64_t index = static_cast<int64_t>(t);
    if (plan.run >= kChunk) {
      const int64_t row = index / pieces_per_row, piece = index % pieces_per_row, shift = line_shift(row);
      // (shift < kChunk: the last piece may come out empty)
      const int64_t start = piece == 0 ? 0 : std::min(plan.run, shift + piece * kChunk);
      const int64_t end = std::min(plan.run, shift + (piece + 1) * kChunk);
      if (end > start) row_piece(row, start, end - start);
    } else {
      const int64_t first = index * rows_per_task;
      const int64_t last = first + rows_per_task < plan.rows ? first + rows_per_task : plan.rows;
      for (int64_t row = first; row < last; ++row) row_piece(row, 0, plan.run);
    }
  };
  return ParallelFor(context, static_cast<size_t>(tasks), task);
}

}  // namespace ascend_grad
