# The dispatcher image: a virtualenv built in one stage, copied into a clean one that runs as non-root.
#
#   docker build -t multikueue:0.1.0 .                                    # users: the official slim image
#   docker build --build-arg BASE_IMAGE=local/debian-python:bookworm .   # offline: any Debian with python3
#
# BASE_IMAGE pins the Python minor (3.11, what the project is tested with). Wheels put in wheelhouse/ before the
# build are installed without any index (e2e/images.py does this on hosts whose package proxy containers do not
# trust); an empty wheelhouse means pip downloads them in the build stage, which never reaches the final image.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY wheelhouse/ /wheelhouse/
RUN python3 -m venv /opt/multikueue
# Dependencies first, from pyproject.toml and the version module only: this layer is reused until they change.
COPY pyproject.toml README.md LICENSE /src/
COPY multikueue/__init__.py /src/multikueue/__init__.py
RUN set -eu; \
    if ls /wheelhouse/*.whl >/dev/null 2>&1; then echo "--no-index --find-links /wheelhouse" >/pip-index; else : >/pip-index; fi; \
    /opt/multikueue/bin/pip install $(cat /pip-index) /src; \
    /opt/multikueue/bin/pip uninstall --yes multikueue
# The controller's package only: the test bed and the demo are testbed/'s distribution, never in the image.
COPY multikueue /src/multikueue
RUN /opt/multikueue/bin/pip install --no-deps $(cat /pip-index) /src && /opt/multikueue/bin/multikueue --version

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="multikueue" \
      org.opencontainers.image.description="MultiKueue dispatcher for external-framework kinds" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/multikueue /opt/multikueue
ENV PATH=/opt/multikueue/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# 65532: the conventional "nonroot" uid; no home, no shell, nothing writable but /tmp (an emptyDir in config/).
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["multikueue"]
CMD ["--help"]
