# The Muster agent image. Build from the repository root:
#   docker build -f deploy/agent.Dockerfile -t muster-agent:0.1.0 .
# Every package comes from requirements/agent.lock (Muster's dependencies with its
# `agent` extra and what builds Muster itself, each pinned with its hashes; `make
# lock` writes it), so two builds of one commit install the same code.
FROM public.ecr.aws/docker/library/python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/muster
COPY requirements/agent.lock requirements/
RUN pip install --no-compile --require-hashes --no-deps -r requirements/agent.lock
COPY pyproject.toml README.md ./
COPY layers ./layers
# Muster itself, fetching nothing: its build backend is already installed from the lock.
RUN pip install --no-compile --no-deps --no-build-isolation --no-index . \
    && pip check && rm -rf /root/.cache

USER 65532:65532
ENTRYPOINT ["muster"]
CMD ["agent"]
