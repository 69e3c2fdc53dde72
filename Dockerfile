# The dispatcher image. The deployment issue hardens this (pinned base digest, wheels built outside the final
# stage); it already runs as non-root with the `multikueue` entrypoint.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

WORKDIR /app
COPY pyproject.toml README.md ./
COPY multikueue ./multikueue
RUN pip install --no-cache-dir . && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin multikueue

USER 65532
ENTRYPOINT ["multikueue"]
CMD ["--help"]
