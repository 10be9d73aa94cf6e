#!/bin/sh
# Writes docs/env-vars.md from the configuration tables (ote_info -c).
# Usage: contrib/gen-env-doc.sh BUILD_DIR
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
info="${1:-build}/src/tools/ote_info"
{
    echo "# Environment variables"
    echo
    echo "Generated from the configuration tables by \`contrib/gen-env-doc.sh\`;"
    echo "\`ote_info -c\` prints the same list with the values in effect."
    echo "Sizes take k, m, g, t suffixes (binary) or \`inf\`; booleans take y/n,"
    echo "yes/no, on/off, 1/0."
    echo
    echo "| variable | type | default | meaning |"
    echo "|---|---|---|---|"
    env -i "$info" -c | awk '
        /^# type:/ { sub(/^# type: /, ""); split($0, a, ", default: "); type = a[1]; dflt = a[2]; next }
        /^# ./ { desc = substr($0, 3); next }
        /^OTE_/ { split($0, kv, "="); printf("| `%s` | %s | `%s` | %s |\n", kv[1], type, dflt, desc) }'
} > "$top/docs/env-vars.md"
