"""Write ``tests/durations.json`` (seconds per test file) from a pytest run's ``--durations=0``.

Usage: ``.venv/bin/pytest -n 2 --dist loadfile --durations=0 | tee run.log`` on an idle machine,
then ``python .ci/update_test_durations.py run.log``. ``tests/conftest.py`` hands the test
files to the two workers longest first from these numbers (see its
``pytest_collection_modifyitems``); a file missing from them counts as the median file.
"""

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S+?\.py)::")


def main(log: str) -> None:
    seconds: dict[str, float] = defaultdict(float)
    for line in Path(log).read_text().splitlines():
        match = LINE.match(line)
        if match:
            seconds[match.group(3)] += float(match.group(1))
    if not seconds:
        raise SystemExit(f"{log}: no '--durations=0' lines found")
    out = Path(__file__).resolve().parents[1] / "tests" / "durations.json"
    ordered = dict(sorted(seconds.items(), key=lambda kv: -kv[1]))
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({k: round(v, 1) for k, v in ordered.items()}, indent=1) + "\n")
    tmp.replace(out)
    print(f"{out}: {len(ordered)} files, {sum(ordered.values()):.0f} s in all")


if __name__ == "__main__":
    main(sys.argv[1])
