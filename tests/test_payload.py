"""Payload identity: every way of coding writes the payloads recorded in `tests/golden/payloads.json`.

The record was made by `tools/payload_hashes.py --write` before the code took its present shape;
a change that is meant to leave the coded bits alone (a refactoring, a faster kernel, the thread
split) must leave every block's payload as it was. A change that is meant to change them records
anew, and says so in its commit. Coded at two threads here (recorded at one): the bits do not
depend on the split.
"""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import payload_hashes  # noqa: E402

RECORDED = json.loads((ROOT / "tests" / "golden" / "payloads.json").read_text())


@pytest.mark.parametrize("case", list(payload_hashes.CASES))
def test_every_block_payload_is_as_recorded(case):
    got = payload_hashes.code_case(case, threads=2)
    assert got["settings"] == RECORDED[case]["settings"]
    assert got == RECORDED[case]
