// Host loops over every core: [0, n) split into one contiguous chunk per hardware thread.
#pragma once
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace attnres {

// How many chunks parallel_chunks splits [0, n) into: one per hardware thread, each of at
// least `min_chunk` items (so small loops stay on one thread), at least one.
inline std::int64_t chunk_count(std::int64_t n, std::int64_t min_chunk = 1) {
  const std::int64_t by_size = n / std::max<std::int64_t>(min_chunk, 1);
  return std::max<std::int64_t>(1, std::min<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()), by_size));
}

// Calls body(chunk, begin, end) for chunk_count(n, min_chunk) disjoint, ordered chunks covering
// [0, n), concurrently; the calling thread takes chunk 0. `body` must not throw.
template <class Body>
void parallel_chunks(std::int64_t n, std::int64_t min_chunk, Body&& body) {
  const std::int64_t chunks = chunk_count(n, min_chunk);
  const std::int64_t size = (n + chunks - 1) / chunks;
  std::vector<std::thread> workers;
  for (std::int64_t c = 1; c < chunks; ++c)
    workers.emplace_back(
        [&body, c, begin = std::min(n, c * size), end = std::min(n, (c + 1) * size)] { body(c, begin, end); });
  body(std::int64_t(0), std::int64_t(0), std::min(n, size));
  for (std::thread& w : workers) w.join();
}

// Calls body(begin, end) over disjoint chunks covering [0, n), concurrently.
template <class Body>
void parallel_for(std::int64_t n, Body&& body, std::int64_t min_chunk = 1) {
  parallel_chunks(n, min_chunk, [&body](std::int64_t, std::int64_t begin, std::int64_t end) { body(begin, end); });
}

}  // namespace attnres
