# Sourced by the tests of the metrics endpoint (sh): exits 77, having said
# why, unless curl and python3 are installed and this build serves /metrics.
for tool in curl python3; do
    command -v $tool >/dev/null 2>&1 || { echo "SKIP: $tool not installed"; exit 77; }
done
if ! grep -q '^#define HAVE_MHD 1' "${ORBITTE_TEST_BUILDDIR:-.}/../config.h" 2>/dev/null; then
    echo "SKIP: this build has no metrics endpoint (libmicrohttpd not found by configure)"
    exit 77
fi
