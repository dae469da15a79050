#!/bin/sh
# A deliberately simple command-line agent for the demo: it knows two common slips in
# interval code (counting the excluded end, treating the end as a member) and patches
# them with sed wherever it sees them. It never looks at the tests, so it fixes only
# the defects it happens to know, and certlab's contract says exactly which.
set -u
echo "pattern-fixer: task ${CERTLAB_TASK_ID:-unknown}"
for file in *.py; do
    [ -f "$file" ] || continue
    sed -i \
        -e 's/return end - start + 1$/return end - start/' \
        -e 's/start <= point <= end/start <= point < end/' \
        "$file"
done
echo "pattern-fixer: done"
