#!/usr/bin/env bash
# run --html renders: the page of the unguarded seed repro is loaded in headless Chromium, the
# screenshot must not be blank and the rendered page must show the failing case's name and its
# error map. Skipped (exit 77) where Chromium is not installed (Debian package chromium).
# Usage: html_render_test.sh ATTNRES_CHECK SOURCE_DIR
set -uo pipefail
BIN=$1
SRC=$2
browser=""
for candidate in chromium chromium-browser google-chrome; do
  command -v "$candidate" >/dev/null 2>&1 && { browser=$candidate; break; }
done
[ -n "$browser" ] || { echo "skipped: no Chromium (apt-get install chromium)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BIN" run "$SRC/cases/guard.json" --backend cpu --no-layout-guard --html "$work/page.html" -q >/dev/null
[ -s "$work/page.html" ] || { echo "FAIL: no page written"; exit 1; }
grep -q '<script\|<link\|@import\|url(' "$work/page.html" && { echo "FAIL: the page refers to something outside itself"; exit 1; }
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/profile")
timeout 120 "$browser" "${flags[@]}" --window-size=1280,1400 --screenshot="$work/shot.png" "file://$work/page.html" \
  >"$work/browser.log" 2>&1
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$work/page.html" >"$work/dom.html" 2>>"$work/browser.log"
[ -s "$work/shot.png" ] || { echo "FAIL: no screenshot"; tail -5 "$work/browser.log"; exit 1; }
# The rendered DOM has the failing case and its map; the screenshot has many colours (a blank or
# text-only page has a handful).
python3 - "$work/shot.png" "$work/dom.html" <<'PY'
import struct, sys, zlib
shot, dom = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
failures = []
if "seed-repro-prefix-stride-7175: not-rejected" not in dom:
    failures.append("the rendered page does not show the failing case's heading")
if dom.count("<rect") < 1000:
    failures.append("the rendered page has no error map")
data = open(shot, "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    failures.append("the screenshot is not a PNG")
else:
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = header[:4]
    channels = {2: 3, 6: 4}.get(colour)
    raw = zlib.decompress(idat)
    stride = width * channels
    # Undo the PNG row filters (RFC 2083), then count distinct colours.
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1: line[i] = (line[i] + left) & 255
            elif kind == 2: line[i] = (line[i] + up) & 255
            elif kind == 3: line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    colours = {row[i:i + 3] for row in rows[::4] for i in range(0, stride, channels * 4)}
    reds = sum(1 for c in colours if c[0] > 150 and c[1] < 120 and c[2] < 120)
    if len(colours) < 20 or reds < 5:
        failures.append(f"the screenshot looks blank: {len(colours)} colours, {reds} reds")
for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
PY
