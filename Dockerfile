# syntax=docker/dockerfile:1
# The pinned CUDA image that reruns the paper. docker/README.md explains each choice,
# how to build, run and archive it, and how to re-pin the base.
#
# Base: nvidia/cuda:13.0.3-cudnn-runtime-ubuntu24.04, pinned by the digest of its linux/amd64
# manifest (a tag alone is no pin: NVIDIA deletes end-of-life tags). CUDA 13.0 matches torch
# 2.14.1's default build, '2.14.1+cu130' (the PyPI wheel; torch brings its own CUDA 13.0 and
# cuDNN 9 libraries as hashed nvidia-* wheels from the lock). Re-pin with
#   docker buildx imagetools inspect nvidia/cuda:13.0.3-cudnn-runtime-ubuntu24.04
# Where no registry is reachable, any Debian bookworm or Ubuntu 24.04 base builds the same
# layers: --build-arg BASE_IMAGE=... (docker/README.md, "Build without a registry").
ARG BASE_IMAGE=nvidia/cuda:13.0.3-cudnn-runtime-ubuntu24.04@sha256:af851538a2bb05f587f27b660d61de3643d964e75ef5c04f4086ff2b36f2a12a
FROM ${BASE_IMAGE}

# Pins that tests/test_docker.py checks against docker/requirements.lock and pyproject.toml.
# Build metadata (GIT_COMMIT, BUILD_DATE, IMAGE_DIGEST) is declared below the heavy layers: an
# ARG reaches the environment of every later RUN, so a new date would rebuild them all.
ARG PYTHON_VERSION=3.11
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1
ARG TORCH_CUDA=13.0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# A builder that drops SHELL (buildah and podman in their default OCI format) would run every
# RUN under /bin/sh without pipefail: stop there, naming the fix.
RUN if [ -z "${BASH_VERSION:-}" ] || ! shopt -qo pipefail; then \
      echo "SHELL was ignored, so RUN lacks bash -o pipefail: build with --format docker" >&2; \
      exit 1; \
    fi
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8

# Python 3.11 (the lock's interpreter): Debian bookworm ships it; Ubuntu 24.04 ships 3.12 only,
# so there it comes from the deadsnakes PPA (the only step that differs between the bases).
# WeasyPrint loads Pango, HarfBuzz (and its subsetter) and fontconfig at run time; the DejaVu
# fonts are bundled because a glyph without a font prints as a blank, with no error.
# Apt versions are not pinned: old ones leave the archive, so the pin is the base digest plus
# the archived image (docker/README.md, "Keeping the image alive").
# hadolint ignore=DL3008
RUN apt-get update \
 && if ! apt-cache show "python${PYTHON_VERSION}-venv" >/dev/null 2>&1; then \
      apt-get install -y --no-install-recommends ca-certificates gpg-agent software-properties-common \
      && add-apt-repository -y ppa:deadsnakes/ppa \
      && apt-get update \
      && apt-get purge -y --auto-remove gpg-agent software-properties-common; \
    fi \
 && apt-get install -y --no-install-recommends \
      "python${PYTHON_VERSION}" "python${PYTHON_VERSION}-venv" \
      ca-certificates git tini util-linux \
      libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz0b libharfbuzz-subset0 \
      fontconfig fonts-dejavu-core \
 && rm -rf /var/lib/apt/lists/* \
 && fc-cache -f

# A non-root user with uid 1000 (the usual first host user, so bind mounts stay writable);
# the base's `ubuntu` user holds that uid, so it goes.
RUN (userdel --remove ubuntu 2>/dev/null || true) \
 && (groupdel ubuntu 2>/dev/null || true) \
 && useradd --create-home --uid 1000 --user-group --shell /bin/bash prh \
 && mkdir -p /data /runs /opt/prh \
 && chown prh:prh /data /runs

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Every Python package, torch and its nvidia-* CUDA wheels included, from the hashed lock;
# --no-deps plus `pip check` proves the lock is complete for this interpreter. The lock holds
# source archives too (antlr4-python3-runtime): they build with the lock's own setuptools,
# installed first from its hashed entry, and --no-build-isolation, so no build step fetches an
# unpinned, unhashed setuptools.
# Three layers, cut from the same lock: the CUDA libraries (nvidia-*, cuda-*: 3.2 GB), torch
# with triton (2.1 GB), both wheels only (--only-binary: nothing there builds), then the rest
# (the last step skips what is installed). A builder holds a layer up to four times while
# committing it (its container, two blob copies, the stored layer): one 6.8 GB pip layer took
# 28.3 GB of disk at the build's peak, three take 17.2 GB.
COPY docker/requirements.lock /opt/prh/requirements.lock
RUN "python${PYTHON_VERSION}" -m venv /opt/venv \
 && sed -n '/^setuptools==/,/[^\\]$/p' /opt/prh/requirements.lock >/tmp/build.lock \
 && pip install --require-hashes --no-deps -r /tmp/build.lock \
 && sed -n '/^\(nvidia\|cuda\)-/,/[^\\]$/p' /opt/prh/requirements.lock >/tmp/cuda.lock \
 && pip install --require-hashes --no-deps --only-binary :all: -r /tmp/cuda.lock
RUN sed -n '/^\(torch\|triton\)==/,/[^\\]$/p' /opt/prh/requirements.lock >/tmp/torch.lock \
 && pip install --require-hashes --no-deps --only-binary :all: -r /tmp/torch.lock
RUN pip install --require-hashes --no-deps --no-build-isolation -r /opt/prh/requirements.lock \
 && pip check \
 && python -c "import sys, torch, torchvision; \
build = (torch.__version__, torch.version.cuda, torchvision.__version__); \
cu = 'cu' + '${TORCH_CUDA}'.replace('.', ''); \
want = ('${TORCH_VERSION}+' + cu, '${TORCH_CUDA}', '${TORCHVISION_VERSION}+' + cu); \
sys.exit(0 if build == want else f'torch build {build}, expected {want}')"

# The project (prh, harness) from this checkout, and a one-commit git snapshot of it that the
# entrypoint clones into /runs (DVC needs a git repository; .git itself is not copied).
COPY --chown=prh:prh . /opt/prh/src
RUN pip install --no-deps --no-build-isolation --no-index /opt/prh/src \
 && rm -rf /opt/prh/src/build
COPY --chmod=755 docker/entrypoint.sh /usr/local/bin/prh-entrypoint

ARG GIT_COMMIT=unknown
USER 1000:1000
ENV GIT_AUTHOR_NAME=prh GIT_AUTHOR_EMAIL=prh@localhost \
    GIT_COMMITTER_NAME=prh GIT_COMMITTER_EMAIL=prh@localhost
RUN git -C /opt/prh/src init -q \
 && git -C /opt/prh/src add -A \
 && git -C /opt/prh/src commit -q -m "prh-rerun image snapshot of ${GIT_COMMIT}"

# Provenance (docker/README.md, "Build"): labels and PRH_* variables read by
# harness/tracking/fingerprint.py, which MLflow logs and the report prints.
ARG BASE_IMAGE
ARG IMAGE_DIGEST=""
ARG BUILD_DATE=unknown
ARG IMAGE_NAME=prh-rerun

# Offline by design: weights and data come from /data, nothing from the model hub. The NVIDIA
# Container Toolkit reads the NVIDIA_* variables (the nvidia/cuda base sets them too; set here
# so that an image on another base gets the driver mounted alike).
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    HF_HOME=/tmp/hf \
    MPLCONFIGDIR=/tmp/matplotlib \
    DVC_NO_ANALYTICS=1 \
    PRH_DATA_DIR=/data \
    PRH_RUNS_DIR=/runs \
    PRH_SRC_DIR=/opt/prh/src \
    PRH_LOCK_FILE=/opt/prh/requirements.lock \
    PRH_BASE_IMAGE=${BASE_IMAGE} \
    PRH_IMAGE_NAME=${IMAGE_NAME} \
    PRH_IMAGE_DIGEST=${IMAGE_DIGEST} \
    PRH_GIT_COMMIT=${GIT_COMMIT} \
    PRH_BUILD_DATE=${BUILD_DATE}

LABEL org.opencontainers.image.title="prh-rerun" \
      org.opencontainers.image.description="Rerun and audit Balestriero & LeCun (2026), PRH with JEPAs" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.prh.image-digest="${IMAGE_DIGEST}"

VOLUME ["/data", "/runs"]
WORKDIR /runs
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/prh-entrypoint"]
CMD ["flickr30k"]
