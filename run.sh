#!/usr/bin/env bash
# The two set-up commands of the README:
#   ./run.sh dev    set up (or refresh) .venv, then run the main job
#   ./run.sh test   set up (or refresh) .venv, then lint, type-check and run every test
# Anything after the first word is passed on (e.g. ./run.sh test -k timeline).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
VENV=".venv"

# ensure_venv core|dev: the cluster needs only the core install (`pip install -e .`);
# the tests need the `dev` extra (Spark, the S3 test server, linters). A venv that has
# the dev install serves both.
ensure_venv() {
    local level="$1"
    if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
        echo "metakraft needs Python >= 3.11; '$PYTHON' is $("$PYTHON" --version 2>&1)." >&2
        echo "Set PYTHON=/path/to/python3.11 and run again." >&2
        exit 1
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        echo "==> creating virtualenv in $VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    # Reinstall only when the dependency list or the set of top-level packages changed
    # since the last install (an editable install maps the packages it saw), or when
    # more is needed than was installed.
    local stamp="$VENV/.metakraft-installed"
    local want
    want="$( (cat pyproject.toml; ls -d -- */__init__.py) | sha256sum | cut -d' ' -f1)"
    local have=""
    [ -f "$stamp" ] && have="$(cat "$stamp")"
    if [ "$have" = "$want dev" ] || [ "$have" = "$want $level" ]; then
        return
    fi
    echo "==> installing metakraft ($level) and its dependencies into $VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    if [ "$level" = dev ]; then
        "$VENV/bin/python" -m pip install --quiet -e ".[dev]"
    else
        "$VENV/bin/python" -m pip install --quiet -e .
    fi
    echo "$want $level" > "$stamp"
}

# compile_project: the project's modules compiled to bytecode once. Every controller,
# broker and CLI process imports them; where nothing writes bytecode caches (this
# environment sets PYTHONDONTWRITEBYTECODE; or a read-only checkout) each process
# compiled them again: ~0.35 s of CPU a process start, 28% of the CPU of an
# integration-test run (docs/benchmarks.md, "The test suite"). An edited file is
# still read from its source (its cache no longer matches).
compile_project() {
    "$VENV/bin/python" -m compileall -q -j 0 controller broker_agent analytics timeline \
        tests bench > /dev/null
}

cmd="${1:-}"
shift || true
case "$cmd" in
    dev)
        ensure_venv core
        compile_project
        exec "$VENV/bin/metakraft" dev "$@"
        ;;
    test)
        ensure_venv dev
        echo "==> ruff"
        "$VENV/bin/ruff" check .
        echo "==> mypy"
        "$VENV/bin/mypy" timeline controller broker_agent analytics
        compile_project
        echo "==> pytest"
        # Parallel workers (the suite mostly waits on processes and timers; each
        # worker takes loopback ports from a block of its own; 2 finished as soon as
        # 4 on this 2-core machine, 15.1 against 14.3-17.0 min, with less contention
        # for the tests that time their faults), work stealing for
        # an even finish (grouping the Spark tests on one worker instead took 19.6
        # min against 14.3, in a run beside other work), and the 20 slowest printed
        # so their cost stays seen.
        # METAKRAFT_TEST_WORKERS=0 runs in one process; later arguments win (-n 2).
        exec "$VENV/bin/python" -m pytest -n "${METAKRAFT_TEST_WORKERS:-2}" --dist worksteal \
            --durations=20 "$@"
        ;;
    *)
        echo "usage: ./run.sh dev [ARGS...] | ./run.sh test [PYTEST ARGS...]" >&2
        exit 2
        ;;
esac
