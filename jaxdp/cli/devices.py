"""``--devices`` and the multi-process flags: the devices a command shards over."""

from __future__ import annotations

import os

import jax

from jaxdp.cli.parser import UsageError


def request_host_devices(n):
  """``--devices K`` on CPU: asks XLA for K host devices.

  Importing JAX does not start its backend; this must run before anything does (the
  first array or device query), which reads ``XLA_FLAGS`` once.
  """
  if n is None:
    return
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()


def join_processes(args):
  """``--coordinator/--num-processes/--process-id``: joins a multi-process run
  (``jax.distributed``); the studies then shard over every process's devices.

  Raises:
    UsageError: the three flags not given together, or a process id out of range.
  """
  given = [
    getattr(args, a, None) is not None
    for a in ("coordinator", "num_processes", "process_id")
  ]
  if not any(given):
    return
  if not all(given):
    raise UsageError("--coordinator, --num-processes and --process-id go together")
  if not 0 <= args.process_id < args.num_processes:
    raise UsageError(
      f"--process-id {args.process_id}: must be in [0, {args.num_processes})"
    )
  jax.distributed.initialize(
    coordinator_address=args.coordinator,
    num_processes=args.num_processes,
    process_id=args.process_id,
  )


def selected_devices(n):
  """The devices to shard over: every process's in a multi-process run, else the first
  ``n`` local ones (``None``: the library's default).

  Raises:
    UsageError: more devices asked for than there are.
  """
  if jax.process_count() > 1:  # every process's devices: the global mesh
    return jax.devices()
  if n is None:
    return None
  devs = jax.devices()
  if n > len(devs):
    raise UsageError(f"--devices {n}: only {len(devs)} device(s) available")
  return devs[:n]
