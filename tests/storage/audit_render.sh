#!/bin/sh
# Renders the HTML report in headless Chromium, takes a screenshot and checks it shows the
# charts (audit_render_check.py). Exit 77 (skipped) when Chromium is not installed.
# usage: audit_render.sh FLOTILLA_AUDIT WORKDIR SOURCE_DIR
set -eu
tool=$1
dir=$2
src=$3
chromium=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$chromium" ]; then
    echo "audit_render.sh: SKIPPED: chromium is not installed (bash scripts/setup.sh --tests)"
    exit 77
fi
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
"$tool" demo bundle.jsonl --rounds 40 > /dev/null
"$tool" report bundle.jsonl -o report.html
# Self-contained: no scripts, links, images, fonts or URLs of any kind.
if grep -Eiq 'https?:|src=|href=|<script|<link|<img|@import|url\(' report.html; then
    echo "audit_render.sh: FAIL: the report references external resources" >&2
    exit 1
fi
# Chromium needs a writable home and no network; --no-sandbox because tests may run as root.
HOME="$dir" timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --no-first-run --disable-extensions --window-size=1100,2400 \
    --screenshot="$dir/report.png" "file://$dir/report.html" > chromium.log 2>&1 || {
    echo "audit_render.sh: FAIL: chromium could not render the report" >&2
    cat chromium.log >&2
    exit 1
}
python3 "$src/tests/storage/audit_render_check.py" "$dir/report.png"
