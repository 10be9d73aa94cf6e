# Sourced by the tool tests (sh): ok and bad count the checks, bad saying
# what failed; tally_end prints the counts and is false after any bad.
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
tally_end() {
    echo "$pass passed, $fail failed"
    [ $fail -eq 0 ]
}
