#!/usr/bin/env bash
# Entrypoint of the pinned image (docker/README.md).
#
#   IMAGE [flickr30k] [dvc exp run options]   the paper's setup: needs /data and a GPU (default)
#   IMAGE world [dvc exp run options]         the embedded world profile: CPU, no data needed
#   IMAGE COMMAND [ARGS...]                   any other command (bash, harness report ...)
#
# The pipeline runs in a clone of the image's source snapshot under /runs (one workspace per
# snapshot), with the DVC cache and the MLflow database shared beside it, so everything a run
# produces outlives the container. PRH_DATA_DIR, PRH_RUNS_DIR and PRH_SRC_DIR move the three
# places (the tests use them; in the image they are /data, /runs and /opt/prh/src).
set -euo pipefail
shopt -s inherit_errexit

# `docker run --user UID:GID` with any uid but the image's 1000 runs git on a snapshot (and
# workspaces) another uid owns, which git refuses ("detected dubious ownership"); both are this
# image's own, so trust them: git's safe.directory in a global config file of our own (the
# GIT_CONFIG_COUNT variables would not reach the upload-pack of `git clone` from the snapshot).
GIT_CONFIG_GLOBAL=$(mktemp "${TMPDIR:-/tmp}/prh-gitconfig.XXXXXX")
printf '[safe]\n\tdirectory = *\n' >"${GIT_CONFIG_GLOBAL}"
export GIT_CONFIG_GLOBAL

DATA_DIR=${PRH_DATA_DIR:-/data}
RUNS_DIR=${PRH_RUNS_DIR:-/runs}
SRC_DIR=${PRH_SRC_DIR:-/opt/prh/src}
IMAGE=${PRH_IMAGE_NAME:-prh-rerun}

# The code the image installed from its snapshot (the stages run that copy, DVC hashes the
# workspace's): prh/, harness/ and the report templates, which install as harness/templates.
CODE_DIRS=(prh harness reports/templates)

# What the flickr30k profile reads, relative to /data, which becomes data/flickr30k/raw in the
# workspace (dvc.yaml: raw/dataset.json, raw/images; params.yaml: flickr30k.image.weights).
FLICKR30K_FILES=(dataset.json images weights/dinov2_vitb14.pth)

RUN_FLICKR30K="docker run --gpus all -v /path/to/data:/data -v /path/to/runs:/runs ${IMAGE}"
RUN_WORLD="docker run -v /path/to/runs:/runs ${IMAGE} world"

# fail FIRST_LINE [MORE_LINES...]: the message on stderr, then exit 2.
fail() {
    printf 'prh-entrypoint: %s\n' "$1" >&2
    shift
    printf '%s\n' "$@" >&2
    exit 2
}

check_data() {
    local missing=() f
    for f in "${FLICKR30K_FILES[@]}"; do
        [[ -e "${DATA_DIR}/${f}" ]] || missing+=("${DATA_DIR}/${f}")
    done
    ((${#missing[@]} == 0)) && return 0
    local what="is not mounted"
    [[ -d "${DATA_DIR}" && -n "$(ls -A "${DATA_DIR}" 2>/dev/null)" ]] && what="lacks files"
    fail "the flickr30k profile needs the data set and weights in ${DATA_DIR}, which ${what}." \
        "Missing: ${missing[*]}" \
        "Put Karpathy's split file for Flickr30k as dataset.json, the Flickr30k photos in images/" \
        "and the DINOv2 ViT-B/14 weights as weights/dinov2_vitb14.pth in one folder, then run:" \
        "  ${RUN_FLICKR30K}" \
        "The world profile needs no data and no GPU:  ${RUN_WORLD}"
}

check_gpu() {
    local gpus
    if gpus=$(nvidia-smi -L 2>/dev/null) && grep -q '^GPU ' <<<"${gpus}"; then
        return 0
    fi
    fail "the flickr30k profile needs a GPU, and none is visible in the container" \
        "(nvidia-smi is missing or lists no GPU). Install the NVIDIA Container Toolkit on the" \
        "host and pass the GPUs:" \
        "  ${RUN_FLICKR30K}" \
        "The world profile runs on the CPU:  ${RUN_WORLD}"
}

check_runs() {
    [[ -d "${RUNS_DIR}" && -w "${RUNS_DIR}" ]] || fail \
        "${RUNS_DIR} (DVC cache, MLflow database, reports) is missing or not writable by uid" \
        "$(id -u). Mount a folder you own:" \
        "  ${RUN_FLICKR30K}" \
        "or add --user \"\$(id -u):\$(id -g)\" when the folder belongs to another uid."
    if command -v mountpoint >/dev/null && ! mountpoint -q "${RUNS_DIR}"; then
        printf 'prh-entrypoint: warning: %s is not a mounted volume; results vanish with the %s\n' \
            "${RUNS_DIR}" "container (add -v /path/to/runs:/runs)" >&2
    fi
}

# Refuse to run when the workspace's code (committed or not) differs from the snapshot's: DVC
# would hash the edited files while the stages run the installed copy, recording results
# against code that did not produce them.
check_code() {
    local work=$1 snapshot changed
    snapshot=$(git -C "${SRC_DIR}" rev-parse HEAD)
    changed=$({
        git -C "${work}" diff --name-only "${snapshot}" -- "${CODE_DIRS[@]}"
        git -C "${work}" ls-files --others --exclude-standard -- "${CODE_DIRS[@]}"
    } | sort -u)
    [[ -z "${changed}" ]] && return 0
    fail "the code in ${work} differs from the copy the image installed and the stages run:" \
        "  ${changed//$'\n'/$'\n'  }" \
        "DVC would record results against edits that did not produce them. Rebuild the image" \
        "from the edited checkout (docker/README.md, \"Build\"), or undo the edits; see them with" \
        "  git -C ${work} diff ${snapshot:0:12} -- ${CODE_DIRS[*]}"
}

# Clone the source snapshot into a workspace under RUNS_DIR (once per snapshot) and point DVC,
# MLflow and the flickr30k data there. Prints the workspace path.
prepare_workspace() {
    local profile=$1 snapshot work
    snapshot=$(git -C "${SRC_DIR}" rev-parse --short=12 HEAD 2>&1) || fail \
        "no source snapshot (a git repository) at ${SRC_DIR}; this entrypoint runs in the image" \
        "built from the repository's Dockerfile (docker/README.md, \"Build\"). git said:" \
        "${snapshot}"
    work="${RUNS_DIR}/workspace-${snapshot}"
    [[ -d "${work}/.git" ]] || git clone -q "${SRC_DIR}" "${work}"
    (
        cd "${work}"
        dvc config --local cache.dir "${RUNS_DIR}/dvc-cache"
        if [[ "${profile}" == flickr30k ]]; then
            mkdir -p data/flickr30k
            ln -sfn "${DATA_DIR}" data/flickr30k/raw
        fi
    ) >&2
    printf '%s\n' "${work}"
}

run_pipeline() {
    local profile=$1 work
    shift
    check_runs
    if [[ "${profile}" == flickr30k ]]; then
        check_data
        check_gpu
    fi
    work=$(prepare_workspace "${profile}")
    check_code "${work}"
    export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///${RUNS_DIR}/mlflow.db}
    export DVC_NO_ANALYTICS=1
    printf 'prh-entrypoint: profile %s in %s (MLflow: %s)\n' \
        "${profile}" "${work}" "${MLFLOW_TRACKING_URI}" >&2
    cd "${work}"
    # The profile is a commit of the workspace, not `dvc exp run -S profile=...`, which would
    # leave params.yaml edited and tag every MLflow run of the paper's setup git_dirty=True.
    # flickr30k runs the paper's three seeds (its table is a mean of three; fewer cannot
    # estimate training variance, so the audit could say no "reproduced")
    sed -i "s/^profile: .*/profile: ${profile}/" params.yaml
    if [[ "${profile}" == flickr30k ]]; then
        sed -i "s/^seeds: .*/seeds: [0, 1, 2]/" params.yaml
    fi
    if ! git diff --quiet -- params.yaml; then
        git -c user.name=prh -c user.email=prh@localhost commit -q -m "profile ${profile}" \
            params.yaml >&2
    fi
    dvc exp run "$@"
    printf 'prh-entrypoint: done; reports in %s/reports (audit.html, audit.pdf)\n' "${work}" >&2
}

case "${1:-flickr30k}" in
    flickr30k | world) profile=${1:-flickr30k}; shift || true; run_pipeline "${profile}" "$@" ;;
    -*) run_pipeline flickr30k "$@" ;;
    *) exec "$@" ;;
esac
