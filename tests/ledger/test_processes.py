"""Processes against one ledger: workers SIGKILLed while charging, and workers racing
for the last units of a budget (tests/helpers/ledger_child.py, which forks them
without JAX so that hundreds of trials fit in seconds), and two processes with a
Session each.

The ledgers live on a RAM disk where there is one (/dev/shm): a SIGKILL leaves the
operating system's copy of every committed page, which is what a process crash
tests; a power loss (the fsyncs of ``synchronous=FULL``) is not tested.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxdp

CHILD = Path(__file__).resolve().parents[1] / "helpers" / "ledger_child.py"


@pytest.fixture
def folder(tmp_path):
  shm = Path("/dev/shm")
  if not (shm.is_dir() and os.access(shm, os.W_OK)):
    return tmp_path
  d = shm / f"jaxdp-ledger-test-{os.getpid()}-{tmp_path.name}"
  d.mkdir()
  yield d
  for f in d.iterdir():
    f.unlink()
  d.rmdir()


def _run(*args):
  out = subprocess.run(
    [sys.executable, str(CHILD), *map(str, args)],
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_killed_process_never_answers_an_uncommitted_charge(folder):
  """200 SIGKILLs at random times (many inside a transaction or a commit): the ledger
  opens and verifies after each, every printed answer is a recorded charge and the
  recorded total is at least what was answered."""
  got = _run("kill", folder / "k.db", 200, 7)
  assert got["trials"] == 200 and got["answers"] >= 200
  assert got["lost_answers"] > 0  # some kills fell between a commit and its answer


@pytest.mark.slow
@pytest.mark.subprocess
def test_racing_processes_never_exceed_the_budget(folder):
  """20 rounds of 4 processes racing for a budget of 40 units with charges of 1 to 3
  units: the answered units never exceed the budget and equal the recorded spend."""
  got = _run("race", folder / "r.db", 20, 4, 3)
  assert got["rounds"] == 20 and all(0 <= left <= 2 for left in got["left_per_round"])


SESSION = """
import sys
import numpy as np
import jaxdp
ledger = jaxdp.Ledger(sys.argv[1], timeout=60)
s = jaxdp.Session(np.arange(50), 1.0, ledger=ledger, dataset="d")
while True:
  try:
    s.count(lambda v: v < 25, eps=0.1)
  except jaxdp.ReleaseRefusedError:
    break
  print("answered", flush=True)
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_two_sessions_in_two_processes_share_one_budget(folder):
  """Two processes, each with a Session on one ledger, count until refused: together
  they answer exactly the 10 releases of 0.1 that fit a budget of 1."""
  path = folder / "s.db"
  jaxdp.Ledger(path).accountant("d", np.arange(50), 1.0)  # registered once
  procs = [
    subprocess.Popen(
      [sys.executable, "-c", SESSION, str(path)],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    for _ in range(2)
  ]
  answered = 0
  for p in procs:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    answered += out.count("answered")
  (summary,) = jaxdp.Ledger(path).datasets()
  assert answered == summary.charges == 10
