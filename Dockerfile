# The operator's image: `docker build -t rayservice-operator:e2e .` (`make kind-e2e` does it).
# It runs as uid/gid 65532 (runAsUser/runAsGroup in config/manager/manager.yaml) on a
# read-only root filesystem: nothing is written at start (no .pyc: PYTHONDONTWRITEBYTECODE),
# and HOME and TMPDIR are /tmp, which the Deployment mounts as an emptyDir.

# The base image: pin it by digest where a registry is reachable
# (`docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest> .`); the tag is
# the default only because the machines this is built on here have no registry to ask.
ARG PYTHON_IMAGE=python:3.11-slim
# The builder stage's image; the same by default. With no registry (hack/kind/build-images.sh
# operator-wheels): PYTHON_IMAGE is a local Debian + Python image, and BUILDER_IMAGE that
# image plus this machine's wheels of requirements.lock and of setuptools, with pip told
# to look nowhere else (PIP_NO_INDEX, PIP_FIND_LINKS), so the build needs no network.
ARG BUILDER_IMAGE=${PYTHON_IMAGE}

# Install the dependencies from requirements.lock (exact versions, every file checked
# against its sha256: `hack/lock.py` writes it), then wheels of this repository's two
# distributions - the framework (k8s-controller-runtime, runtime/pyproject.toml) and the
# operator on it (pyproject.toml) - without resolving anything; `pip check` proves the
# operator's pin of the framework holds. The venv is all the final stage takes.
FROM ${BUILDER_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY requirements.lock ./
RUN python -m venv --without-pip /opt/venv \
    && pip --python /opt/venv/bin/python install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md LICENSE MANIFEST.in ./
COPY runtime runtime
COPY api api
COPY controllers controllers
RUN pip wheel --no-deps --wheel-dir /wheels ./runtime . \
    && pip --python /opt/venv/bin/python install --no-deps /wheels/*.whl \
    && pip --python /opt/venv/bin/python check

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
COPY --from=builder /opt/venv /opt/venv
# KubeRay's command: its Helm chart runs `/manager` (operatorCommand), so a KubeRay values
# file starts this operator unchanged. A copy of the console script (its shebang names
# the venv's python, so it runs from any path).
COPY --from=builder /opt/venv/bin/rayservice-manager /manager
USER 65532:65532
ENTRYPOINT ["rayservice-manager"]
