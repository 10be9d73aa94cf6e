#!/bin/sh
# docs/env-vars.md lists every variable of the configuration tables.
set -eu
info="$ORBITTE_TEST_BUILDDIR/../src/tools/ote_info"
doc="$(dirname "$0")/../docs/env-vars.md"
missing=0
for v in $(env -i "$info" -c | sed -n 's/^\(OTE_[A-Z0-9_]*\)=.*/\1/p'); do
    grep -q "\`$v\`" "$doc" || { echo "docs/env-vars.md lacks $v (run contrib/gen-env-doc.sh)"; missing=1; }
done
[ $missing -eq 0 ] && echo "1 passed, 0 failed" || { echo "0 passed, 1 failed"; exit 1; }
