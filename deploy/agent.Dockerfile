# The Muster agent image. Build from the repository root:
#   docker build -f deploy/agent.Dockerfile -t muster-agent:0.1.0 .
FROM public.ecr.aws/docker/library/python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/muster
COPY pyproject.toml README.md ./
COPY layers ./layers
# The agent extra brings the official kubernetes client (its config loaders).
RUN pip install --no-compile ".[agent]" && rm -rf /root/.cache

USER 65532:65532
ENTRYPOINT ["muster"]
CMD ["agent"]
