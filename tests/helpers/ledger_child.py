"""Processes that charge one ledger at once, and that are killed while charging.

Run as a script (``python tests/helpers/ledger_child.py MODE LEDGER ...``), without
JAX: it imports only the standard-library modules of the ledger (its file, chain
and index: the transaction every charge runs in) and forks its workers, so hundreds
of trials fit in a few seconds. The charge step is basic composition on integer
units (``units <= capacity - spent``), the rule's ``allows`` on Python ints. Each
worker writes ``answered SEQ UNITS`` to its pipe only after the charge's
transaction has committed, as a release answers only after its charge is committed.
It prints one JSON object with what it checked.

Modes:
  kill TRIALS SEED: one worker at a time charges in a loop and is SIGKILLed at a
    random time, 0 to 3 ms after its first answer (10 trials to a ledger file,
    LEDGER.0, LEDGER.1, ...); then the ledger must open and verify, every printed
    answer must be a recorded charge and the recorded total must be at least what
    was answered.
  race ROUNDS WORKERS SEED: per round, a new dataset of capacity 40 units and
    WORKERS workers racing for it with charges of 1 to 3 units until refused; the
    answered units must be at most the capacity and equal the recorded spend.
  create ROUNDS WORKERS: per round, WORKERS workers open one new ledger file
    (LEDGER.0, LEDGER.1, ...) at once; each must open it (none may take the others'
    key file for a deleted database) and all must read one ledger id and one key.
"""

import json
import os
import random
import signal
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for name, folder in (
  ("jaxdp", ROOT / "jaxdp"),
  ("jaxdp.ledger", ROOT / "jaxdp" / "ledger"),
):
  module = types.ModuleType(name)  # the packages without their __init__ (no JAX)
  module.__path__ = [str(folder)]
  sys.modules[name] = module

from jaxdp.ledger.index import Index  # noqa: E402
from jaxdp.ledger.store import Store  # noqa: E402

BUDGET = {"state_shape": [], "capacity": 0}


def register(path, name, capacity):
  store = Store(path)
  index = Index(store.ledger_id, store.key)
  with index.writing(store) as tx:
    fp = {"data": name, "poset": None, "dataset": name}
    budget = dict(BUDGET, capacity=capacity)
    index.append(tx, name, "dataset", {"fingerprint": fp, "budget": budget})
  store.close()


def charge(store, index, name, units):
  """One charge; the entry's seq, or None when refused (nothing written)."""
  with index.writing(store) as tx:
    before = index.states[name]
    capacity = index.datasets[name]["budget"]["capacity"]
    if not units <= capacity - before["spent"]:
      return None
    after = dict(before, spent=before["spent"] + units, answered=before["answered"] + 1)
    index.append(tx, name, "charge", {"before": before, "after": after, "units": units})
    return index.chain.seq


def worker(path, name, write_fd, units_of, start_fd=None):
  """Charges until refused, writing each answer after its commit; never returns."""
  if start_fd is not None:
    os.read(start_fd, 1)
  store = Store(path, timeout=30)
  index = Index(store.ledger_id, store.key)
  while True:
    units = units_of()
    seq = charge(store, index, name, units)
    if seq is None:
      os._exit(0)
    os.write(write_fd, f"answered {seq} {units}\n".encode())


def read_all(fd):
  chunks = []
  while True:
    b = os.read(fd, 65536)
    if not b:
      return b"".join(chunks).decode()
    chunks.append(b)


def recorded(path, name):
  """(seq -> units, spent) of a dataset, from a freshly opened and verified ledger."""
  store = Store(path, create=False)
  index = Index(store.ledger_id, store.key)
  with index.writing(store, write=False) as tx:
    rows = tx.entries_after(0)
  store.close()
  charges = {
    r[0]: json.loads(r[4])["units"] for r in rows if r[1] == name and r[2] == "charge"
  }
  return charges, index.states[name]["spent"]


def kill(base, trials, seed, per_file=10):
  """``per_file`` trials on each of several ledgers (each opening verifies the
  whole chain: one long ledger would make the trials quadratic)."""
  rng = random.Random(seed)
  answers, mid, spent = 0, 0, 0
  for trial in range(trials):
    path = f"{base}.{trial // per_file}"
    if trial % per_file == 0:
      register(path, "d", 2**31 - 1)
      answered_total = 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
      os.close(r)
      worker(path, "d", w, lambda: 1)
    os.close(w)
    first = os.read(r, 64)  # the worker is charging: kill it at a random time
    time.sleep(rng.uniform(0, 0.003))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    text = first.decode() + read_all(r)
    os.close(r)
    done = [line.split() for line in text.split("\n")[:-1]]  # complete lines only
    charges, spent = recorded(path, "d")  # opens and verifies, or raises
    for _, seq, units in done:
      assert int(seq) in charges and charges[int(seq)] == int(units), (seq, units)
    answered_total += sum(int(u) for _, _, u in done)
    answers += len(done)
    assert spent >= answered_total, (spent, answered_total)
    mid += spent > answered_total  # a charge committed whose answer was never printed
  return {"trials": trials, "answers": answers, "lost_answers": mid}


def race(path, rounds, workers, seed):
  capacity, over = 40, []
  for k in range(rounds):
    name = f"round{k}"
    register(path, name, capacity)
    start_r, start_w = os.pipe()
    pipes, pids = [], []
    for j in range(workers):
      r, w = os.pipe()
      rng = random.Random(seed * 1000 + k * workers + j)
      pid = os.fork()
      if pid == 0:
        os.close(r)
        worker(path, name, w, lambda rng=rng: rng.randint(1, 3), start_r)
      os.close(w)
      pipes.append(r)
      pids.append(pid)
    os.write(start_w, b"x" * workers)  # all start at once
    answered = 0
    for r in pipes:
      answered += sum(int(line.split()[2]) for line in read_all(r).splitlines())
      os.close(r)
    for pid in pids:
      _, status = os.waitpid(pid, 0)
      assert status == 0, status
    os.close(start_r)
    os.close(start_w)
    _, spent = recorded(path, name)
    assert answered == spent <= capacity, (answered, spent, capacity)
    over.append(capacity - spent)
  return {"rounds": rounds, "workers": workers, "left_per_round": over}


def create(base, rounds, workers):
  seen = []
  for k in range(rounds):
    path = f"{base}.{k}"
    start_r, start_w = os.pipe()
    pipes = []
    for _ in range(workers):
      r, w = os.pipe()
      if os.fork() == 0:
        os.close(r)
        os.read(start_r, 1)
        try:
          store = Store(path, timeout=30)
          text = f"{store.ledger_id} {store.key.hex()}"
        except Exception as e:  # reported to the parent, which fails
          text = f"{type(e).__name__}: {e}"
        os.write(w, text.encode())
        os._exit(0)
      os.close(w)
      pipes.append(r)
    os.write(start_w, b"x" * workers)  # all start at once
    opened = []
    for r in pipes:
      opened.append(read_all(r))
      os.close(r)
    for _ in pipes:
      os.wait()
    os.close(start_r)
    os.close(start_w)
    assert len(set(opened)) == 1 and len(opened[0].split()) == 2, opened
    seen.append(opened[0])
  return {"rounds": rounds, "workers": workers, "ledgers": len(set(seen))}


if __name__ == "__main__":
  mode, path, *rest = sys.argv[1:]
  out = {"kill": kill, "race": race, "create": create}[mode](path, *map(int, rest))
  print(json.dumps(out))
