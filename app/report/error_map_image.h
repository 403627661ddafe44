// Pictures of an ErrorMap: a repro bundle's error-map.png and the SVG of run --html. Cells
// within tolerance run from dark blue (|out - ref| tiny) to green (near the largest difference
// on the map), on a log scale; cells holding elements out of tolerance from orange (a few of its
// elements) to dark red (all of them); black where a non-finite output is infinitely off.
#pragma once
#include <cstdint>
#include <string>

#include "app/engine/checks.h"

namespace attnres {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
};

// The colour of cell `cell` of `map`.
Rgb cell_colour(const ErrorMap& map, std::size_t cell);

// The map drawn as an SVG element, each cell `cell_width` x `cell_height` pixels.
std::string error_map_svg(const ErrorMap& map, int cell_width, int cell_height);

// Whether this build writes PNG files (libpng was found).
bool can_write_png();
// The map as a PNG file at `path`, each cell a block of pixels. Throws std::runtime_error naming
// the file when it cannot be written.
void write_error_map_png(const std::string& path, const ErrorMap& map);

}  // namespace attnres
