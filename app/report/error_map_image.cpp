#include "app/report/error_map_image.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "app/casefile/file_output.h"

#ifdef ATTNRES_HAVE_PNG
#include <png.h>
#endif

namespace attnres {
namespace {

Rgb mix(Rgb from, Rgb to, double t) {
  auto channel = [t](std::uint8_t a, std::uint8_t b) { return std::uint8_t(std::lround(a + (b - a) * t)); };
  return {channel(from.r, to.r), channel(from.g, to.g), channel(from.b, to.b)};
}

// The log scale's ends: the smallest difference drawn apart from zero, and the largest finite
// difference on the map.
struct Scale {
  double low = 1e-4, high = 1e-3;
};

Scale scale_of(const ErrorMap& map) {
  Scale s;
  for (const double e : map.max_error)
    if (std::isfinite(e)) s.high = std::max(s.high, e);
  s.low = std::min(s.low, s.high / 10);
  return s;
}

std::vector<std::uint8_t> pixels(const ErrorMap& map, int cell_width, int cell_height) {
  const int width = int(map.columns) * cell_width, height = int(map.rows) * cell_height;
  std::vector<std::uint8_t> rgb(std::size_t(width) * std::size_t(height) * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const Rgb c = cell_colour(map, std::size_t((y / cell_height) * map.columns + x / cell_width));
      std::uint8_t* p = &rgb[(std::size_t(y) * std::size_t(width) + std::size_t(x)) * 3];
      p[0] = c.r;
      p[1] = c.g;
      p[2] = c.b;
    }
  return rgb;
}

#ifdef ATTNRES_HAVE_PNG
// libpng reports errors by longjmp: no C++ object with a destructor lives in this function.
void png_fail(png_structp png, png_const_charp) { png_longjmp(png, 1); }
void png_ignore_warning(png_structp, png_const_charp) {}

// libpng's output: the encoded bytes, gathered in memory and written through AtomicFile.
void append_png_bytes(png_structp png, png_bytep data, png_size_t length) {
  auto* bytes = static_cast<std::string*>(png_get_io_ptr(png));
  bytes->append(reinterpret_cast<const char*>(data), length);
}

void flush_nothing(png_structp) {}

const char* encode_png(std::string& bytes, int width, int height, const std::uint8_t* rgb) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, png_fail, png_ignore_warning);
  if (!png) return "libpng could not start";
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    return "libpng could not start";
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return "libpng failed while writing it";
  }
  png_set_write_fn(png, &bytes, append_png_bytes, flush_nothing);
  png_set_IHDR(png, info, png_uint_32(width), png_uint_32(height), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height; ++y) png_write_row(png, rgb + std::size_t(y) * std::size_t(width) * 3);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return nullptr;
}
#endif

}  // namespace

Rgb cell_colour(const ErrorMap& map, std::size_t cell) {
  const double e = map.max_error[cell];
  if (!std::isfinite(e)) return {0, 0, 0};
  const Scale s = scale_of(map);
  const double t = std::clamp(
      (std::log10(std::max(e, s.low)) - std::log10(s.low)) / (std::log10(s.high) - std::log10(s.low)), 0.0, 1.0);
  if (map.mismatched[cell]) {
    // Out of tolerance: by the share of the cell's elements that are.
    auto span = [](std::int64_t index, std::int64_t elements, std::int64_t cells) {
      return ((index + 1) * elements + cells - 1) / cells - (index * elements + cells - 1) / cells;
    };
    const std::int64_t r = std::int64_t(cell) / map.columns, c = std::int64_t(cell) % map.columns;
    const double share =
        double(map.mismatched[cell]) / double(span(r, map.tokens, map.rows) * span(c, map.hidden, map.columns));
    return mix({253, 174, 97}, {165, 0, 38}, share);
  }
  return mix({31, 59, 115}, {94, 201, 98}, t);
}

std::string error_map_svg(const ErrorMap& map, int cell_width, int cell_height) {
  std::string svg =
      fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" shape-rendering="crispEdges">)",
                  map.columns * cell_width, map.rows * cell_height);
  for (std::int64_t r = 0; r < map.rows; ++r)
    for (std::int64_t c = 0; c < map.columns; ++c) {
      const Rgb rgb = cell_colour(map, std::size_t(r * map.columns + c));
      svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#{:02x}{:02x}{:02x}"/>)", c * cell_width,
                         r * cell_height, cell_width, cell_height, rgb.r, rgb.g, rgb.b);
    }
  return svg + "</svg>";
}

bool can_write_png() {
#ifdef ATTNRES_HAVE_PNG
  return true;
#else
  return false;
#endif
}

void write_error_map_png(const std::string& path, const ErrorMap& map) {
#ifdef ATTNRES_HAVE_PNG
  // Cells of at least 4 pixels, the picture near 1024 pixels wide.
  const int cell_width = int(std::max<std::int64_t>(4, 1024 / std::max<std::int64_t>(map.columns, 1)));
  const int cell_height = int(std::max<std::int64_t>(4, 512 / std::max<std::int64_t>(map.rows, 1)));
  const std::vector<std::uint8_t> rgb = pixels(map, cell_width, cell_height);
  std::string bytes;
  if (const char* failure = encode_png(bytes, int(map.columns) * cell_width, int(map.rows) * cell_height, rgb.data()))
    throw std::runtime_error(fmt::format("{}: {}", path, failure));
  write_file_atomically(path, bytes);
#else
  throw std::runtime_error(fmt::format("{}: this build writes no PNG (libpng was not found)", path));
#endif
}

}  // namespace attnres
