# The operator's image: `docker build -t rayservice-operator:e2e .` (`make kind-e2e` does it).
# It runs as uid/gid 65532 (runAsUser/runAsGroup in config/manager/manager.yaml) on a
# read-only root filesystem: nothing is written at start (no .pyc: PYTHONDONTWRITEBYTECODE),
# and HOME and TMPDIR are /tmp, which the Deployment mounts as an emptyDir.

# Build a wheel of the project (pyproject.toml) and install it with its dependencies into
# a venv; the venv is all the final stage takes.
FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY runtime runtime
COPY api api
COPY controllers controllers
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv --without-pip /opt/venv \
    && pip --python /opt/venv/bin/python install /wheels/*.whl

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp
COPY --from=builder /opt/venv /opt/venv
USER 65532:65532
ENTRYPOINT ["rayservice-manager"]
